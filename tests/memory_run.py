"""Every importance method once, in this process, each one's peak resident memory above the
memory before it: the subprocess of tests/methods/test_real_model.py's memory tests.

    python tests/memory_run.py smollm2|gemma3|qwen2 CAP_BYTES

Sets `budget.CPU_MEMORY_CAP` to CAP_BYTES, builds the model and one ~300-token trace, then for
each method returns freed heap pages to the system (glibc's malloc_trim), resets the process's
peak (VmHWM, `/proc/self/clear_refs`), runs it and reads the peak again. Prints one JSON line: {"bound": budget.cpu_memory_bound(), "peaks": {method: bytes}}.
"""
from __future__ import annotations

import ctypes
import gc
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from oar_attrib.models import budget  # noqa: E402
from oar_attrib.inputs.batch import ScoringBatch, step_ids_from_ranges  # noqa: E402
from oar_attrib.methods import get_method  # noqa: E402

METHODS = {  # method: parameters (few IG path points: its forwards hold one point each anyway;
    # 2 OAR-G draws, which share a pass where the budget holds both and run one after the other
    # where it does not (SmolLM2's 300 tokens at 1 GiB: one draw a pass, so more draws add time,
    # not memory); hierarchical OAR-P scores the tokens of one of its steps)
    "oar_p": {}, "oar_p_step": {}, "oar_p_hier": {"top_steps": 1}, "oar_g": {"n_noise": 2},
    "entropy": {}, "grail": {}, "ig": {"n_steps": 2}, "random": {},
}
TRACE = Path(__file__).parent / "data" / "smollm2_outputs.jsonl"
LENGTH = 300
OAR_P_POSITIONS = 6  # scored positions OAR-P perturbs: its forwards' size does not depend on it
STEPS = 3  # steps step-level OAR-P perturbs (first, middle, last), for the same reason


def peak() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def smollm2_batch() -> tuple[torch.nn.Module, ScoringBatch]:
    """SmolLM2-135M and its own 300-token greedy answer to GSM8K question 3 (truncated at the
    token limit; its last `####` line is the answer span)."""
    from oar_attrib.inputs.encoding import encode_pairs
    from oar_attrib.models import load_model

    model, tokenizer = load_model("smollm2-135m")
    record = next(r for r in map(json.loads, TRACE.read_text().splitlines())
                  if (r["id"], r["template"], r["decoding"]) == (3, "gsm8k", "greedy"))
    batch, _ = encode_pairs(tokenizer, ["Solve the problem."], [record["text"]], chat=False)
    return model, batch


def random_batch(kind: str) -> tuple[torch.nn.Module, ScoringBatch]:
    """A random-weight model with a large vocabulary (Gemma 3's 262k, Qwen2's 152k) and a
    300-token trace: 20 prompt tokens, reasoning in steps of 10, a 3-token answer, 1 tail."""
    if kind == "gemma3":
        from transformers import Gemma3ForCausalLM, Gemma3TextConfig

        config = Gemma3TextConfig(vocab_size=262144, hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                  head_dim=32, sliding_window=64, max_position_embeddings=1024,
                                  layer_types=["sliding_attention", "full_attention"])
        torch.manual_seed(0)
        model = Gemma3ForCausalLM(config).eval()
    else:
        from oar_attrib.models import random_qwen2

        model = random_qwen2(151936, hidden=64, layers=2, heads=2, max_positions=1024, init_std=0.02)
    ids = torch.randint(1, model.config.vocab_size, (1, LENGTH), generator=torch.Generator().manual_seed(0))
    scored = torch.zeros((1, LENGTH), dtype=torch.bool)
    scored[0, 20:LENGTH - 4] = True
    answer = torch.zeros_like(scored)
    answer[0, LENGTH - 4:LENGTH - 1] = True
    steps = step_ids_from_ranges((1, LENGTH), [[(a, min(a + 10, LENGTH - 4)) for a in range(20, LENGTH - 4, 10)]])
    response = torch.zeros_like(scored)
    response[0, 20:] = True
    return model, ScoringBatch(ids, torch.ones_like(ids), scored, answer, 0, steps, response)


def thinned(batch: ScoringBatch, n: int) -> ScoringBatch:
    """The batch with only `n` scored positions, spread from the first scored one on."""
    positions = batch.scored_mask[0].nonzero().flatten()
    keep = positions[torch.linspace(0, len(positions) - 1, n).round().long()]
    scored = torch.zeros_like(batch.scored_mask)
    scored[0, keep] = True
    return ScoringBatch(batch.input_ids, batch.attention_mask, scored, batch.answer_mask,
                        batch.pad_token_id, response_mask=batch.response_mask)


def few_steps(batch: ScoringBatch, n: int) -> ScoringBatch:
    """The batch with only `n` of its steps kept (spread from the first), -1 on the others."""
    ids = batch.step_ids[0]
    steps = ids[ids >= 0].unique()
    keep = steps[torch.linspace(0, len(steps) - 1, n).round().long()]
    step_ids = torch.where(torch.isin(batch.step_ids, keep), batch.step_ids, -1)
    return ScoringBatch(batch.input_ids, batch.attention_mask, batch.scored_mask, batch.answer_mask,
                        batch.pad_token_id, step_ids, batch.response_mask)


def main(kind: str, cap: int) -> None:
    torch.set_num_threads(2)
    budget.CPU_MEMORY_CAP = cap
    model, batch = smollm2_batch() if kind == "smollm2" else random_batch(kind)
    peaks = {}
    for name, params in METHODS.items():
        run = {"oar_p": lambda: thinned(batch, OAR_P_POSITIONS),
               "oar_p_step": lambda: few_steps(batch, STEPS),
               "oar_p_hier": lambda: few_steps(batch, STEPS)}.get(name, lambda: batch)()
        gc.collect()
        # Hand the heap's free pages back (glibc keeps them resident otherwise), so that a method
        # cannot reuse pages a method before it left, unmeasured; then the peak restarts at the
        # current RSS.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        before = peak()
        get_method(name)(model, run, **params)
        peaks[name] = peak() - before
    print(json.dumps({"bound": budget.cpu_memory_bound(), "length": int(batch.input_ids.shape[1]),
                      "peaks": peaks}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
