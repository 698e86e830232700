"""How often a model answers the word-problem world's presets right at temperature 1 (or another).

    python scripts/calibrate_wordworld.py --presets one-step easy two-step three-step \\
        --n 40 --out docs/experiments/wordworld/calibration.json --cache samples.jsonl

Each held-out problem is asked once through the model's chat template with the instruction to
end with "The answer is N." (`training.data.format_prompt`, template `answer_is`), sampled at
temperature 1, and graded by math-verify on that final value (`grading.grade`; a completion cut
off at `--max-new-tokens` earns 0). Resumable: every graded completion is appended to `--cache`
as it is done and a rerun skips the (preset, problem) pairs already there. The summary gives
each preset's accuracy with 95% bootstrap and Wilson intervals, the truncation rate, and the presets in
the 20-60% band the world aims at.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch

from oar_attrib.analysis.stats import mean_ci
from oar_attrib.models.generation import generate
from oar_attrib.inputs.grading import grade
from oar_attrib.models import load_model
from oar_attrib.training.data import format_prompt
from oar_attrib.world.words import WORD_PRESETS, generate_word_problems

BAND = (0.2, 0.6)


def wilson95(k: int, n: int) -> list[float]:
    """Wilson's 95% interval of a proportion k/n: unlike the bootstrap, not [0, 0] at k = 0."""
    z, p = 1.959964, k / n
    centre, half = (p + z * z / (2 * n)), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [round((centre - half) / (1 + z * z / n), 4), round((centre + half) / (1 + z * z / n), 4)]


def _done(cache: Path) -> dict[tuple[str, int], dict]:
    if not cache.is_file():
        return {}
    rows = [json.loads(line) for line in cache.read_text().splitlines() if line.strip()]
    return {(r["preset"], r.get("temperature", 1.0), r["index"]): r for r in rows}


def _prompt(tok, question: str) -> str:
    chat = format_prompt(question, tok, template="answer_is")
    return tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def _sample(model, tok, args, preset: str, todo: list[int], problems, cache: Path) -> None:
    """Sample and grade the problems `todo` of `preset`, appending each to `cache`."""
    for start in range(0, len(todo), args.batch_size):
        chunk = todo[start: start + args.batch_size]
        ids = generate(model, tok, [_prompt(tok, problems[i].question) for i in chunk],
                       max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0,
                       temperature=args.temperature or 1.0,
                       batch_size=len(chunk), seed=args.seed + start)
        with cache.open("a") as out:
            for i, row in zip(chunk, ids):
                text = tok.decode(row, skip_special_tokens=True)
                truncated = row[-1] != tok.eos_token_id
                g = grade(text, problems[i].answer, "answer_is", truncated=truncated)
                out.write(json.dumps({"preset": preset, "temperature": args.temperature, "index": i, "question": problems[i].question,
                                      "gold": problems[i].answer, "text": text, "truncated": truncated,
                                      "answer": g.answer, "correct": g.correct, "why": g.why}) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(WORD_PRESETS), choices=list(WORD_PRESETS))
    parser.add_argument("--n", type=int, default=40, help="held-out problems per preset")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=1.0, help="0: greedy")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="the summary JSON")
    parser.add_argument("--cache", type=Path, required=True, help="JSONL of graded completions (resumable)")
    parser.add_argument("--summary-only", action="store_true",
                        help="sample nothing: summarise the presets' completions already in --cache")
    args = parser.parse_args()
    if not args.summary_only:
        torch.set_num_threads(args.threads)  # 1 is fastest on a busy machine: 2 threads spin-wait
        model, tok = load_model(args.model)
        for preset in args.presets:
            problems = generate_word_problems(args.n, preset, seed=args.seed, split="test")
            done = _done(args.cache)
            todo = [i for i in range(args.n) if (preset, args.temperature, i) not in done]
            _sample(model, tok, args, preset, todo, problems, args.cache)
    done = _done(args.cache)
    summary = {}
    for (preset, temperature) in sorted({k[:2] for k in done if k[0] in args.presets}):
        rows = [r for (p, t, _), r in sorted(done.items()) if (p, t) == (preset, temperature)]
        if not args.summary_only:
            rows = rows[: args.n]
        name = preset if temperature == 1.0 else f"{preset} (temperature {temperature:g})"
        stats = mean_ci([float(r["correct"]) for r in rows], args.seed, "accuracy")
        stats["wilson95"] = wilson95(sum(r["correct"] for r in rows), len(rows))
        stats["truncated"] = sum(r["truncated"] for r in rows) / len(rows)
        stats["no_answer"] = sum(r["why"] == "no_answer" for r in rows) / len(rows)
        summary[name] = stats
    band = [p for p, s in summary.items() if BAND[0] <= s["accuracy"] <= BAND[1] and "(" not in p]
    args.out.write_text(json.dumps({
        "model": args.model, "seed": args.seed, "split": "test",
        "decoding": "one sample per problem, temperature 1 unless the name says (0: greedy)",
        "max_new_tokens": args.max_new_tokens,
        "prompt": "chat template, training.data template 'answer_is'",
        "grading": "math-verify on the final 'The answer is' value (grading.grade)",
        "presets": summary, "in_band_20_60": band, "configs": {p: WORD_PRESETS[p].__dict__ for p in args.presets},
        "samples": str(args.cache.name),
    }, indent=2) + "\n")
    print(json.dumps(summary, indent=2), "\nin the 20-60% band:", band)


if __name__ == "__main__":
    main()
