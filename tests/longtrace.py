"""A store of long traces to test and measure the trace browser at real length.

Real MATH-500 and GSM8K solutions (from the shared data folder) are joined until a response
reaches about `target_tokens` tokens of the Qwen2.5 tokenizer, then attributed by a small
Qwen2 whose weights are RANDOM: the scores exercise the pages, they say nothing about the
text. The run config says so (`random_weights: true`) and the trace page shows it.

A test and benchmark fixture, kept out of the package: the shared folder is passed in (tests:
`shared_data.shared_folder()`).

    python scripts/build_long_store.py --out long.db      # the same from the command line
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

TOKEN_METHODS = ("oar_p", "oar_p_step", "oar_g", "entropy", "grail", "ig", "random")
_GSM8K_FINAL = re.compile(r"\n?####\s*(.+)\s*$")


def shared_dir(shared: str | Path) -> Path:
    """The shared data folder `shared`, checked to hold data/ and tokenizers/."""
    path = Path(shared)
    if not (path / "data").is_dir() or not (path / "tokenizers").is_dir():
        raise FileNotFoundError(f"{path} holds no data/ and tokenizers/ folders; pass the shared folder")
    return path


def _records(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def long_responses(shared: Path, tokenizer, n: int, target_tokens: int = 4000) -> list[tuple[str, str]]:
    """n (prompt, response) pairs: each response joins GSM8K and MATH-500 solutions, in file
    order, until it holds >= target_tokens tokens, and ends on a MATH-500 solution, whose
    last \\boxed{} is the response's answer (earlier GSM8K `#### N` lines become sentences,
    so that the one answer marker is the last box). The prompt is the first problem's."""
    gsm = _records(shared / "data" / "gsm8k_test.jsonl")
    math = [r for r in _records(shared / "data" / "math500_test.jsonl") if "\\boxed" in r["solution"]]
    out, g, m = [], 0, 0
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
    for _ in range(n):
        parts, prompt, length = [], None, 0
        while length < target_tokens:
            record = gsm[g % len(gsm)]
            g += 1
            prompt = prompt or record["question"]
            parts.append(_GSM8K_FINAL.sub(lambda x: f"\nSo the result is {x.group(1).strip()}.",
                                          record["solution"]))
            parts.append(math[m % len(math)]["solution"])
            m += 1
            # Parts counted alone (fast); the joined text once that count reaches the target.
            length += count(parts[-2]) + count(parts[-1])
            if length >= target_tokens:
                length = count("\n\n".join(parts))
        out.append((prompt, "\n\n".join(parts)))
    return out


def qwen_tokenizer(shared: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(shared / "tokenizers" / "Qwen2.5-7B-Instruct"))


def build_long_store(path: str | Path, *, shared: str | Path, n_traces: int = 1,
                     target_tokens: int = 4000, methods: Sequence[str] = TOKEN_METHODS,
                     model=None, tokenizer=None, method_params: dict | None = None,
                     name: str = "long traces (random weights)") -> int:
    """Add a run of `n_traces` long traces (see `long_responses`) to the store at `path`,
    attributed with `methods` by `model` (default: `random_qwen2`, flagged in the config as
    random weights: a 2-layer hidden-32 `models.random_qwen2`); returns the run id."""
    import time

    from oar_attrib.attribution import attribute
    from oar_attrib.store import Store

    folder = shared_dir(shared)
    tokenizer = tokenizer or qwen_tokenizer(folder)
    pairs = long_responses(folder, tokenizer, n_traces, target_tokens)
    random_weights = model is None
    if model is None:
        longest = max(len(tokenizer(p + r)["input_ids"]) for p, r in pairs)
        from oar_attrib.models import random_qwen2

        model = random_qwen2(len(tokenizer), hidden=32, heads=2, max_positions=longest + 64)
    params = {"ig": {"n_steps": 4}, **(method_params or {})}
    params = {k: v for k, v in params.items() if k in methods}
    start = time.perf_counter()
    traces = attribute(model, tokenizer, [p for p, _ in pairs], [r for _, r in pairs],
                       list(methods), advantages=[1.0] * len(pairs), method_params=params,
                       batch_size=1)
    with Store(path) as store:
        run_id = store.add_run(name, model="random Qwen2 (2 layers)" if random_weights else
                               getattr(getattr(model, "config", None), "name_or_path", ""),
                               config={"source": "MATH-500 + GSM8K solutions, joined",
                                       "random_weights": random_weights,
                                       "target_tokens": target_tokens, "methods": list(methods),
                                       "method_params": params,
                                       "attribute_seconds": round(time.perf_counter() - start, 2)})
        store.add_traces(run_id, traces)
    return run_id
