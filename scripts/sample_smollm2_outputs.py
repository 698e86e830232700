"""Sample SmolLM2-135M-Instruct's answers to GSM8K and MATH-500 questions for the span tests.

    python scripts/sample_smollm2_outputs.py --data ../shared/data --out samples.jsonl

Each question is asked through the model's chat template with one format instruction (the
training prompt templates, plus an "The answer is" instruction), decoded greedily and at
temperature 1. The texts were then labelled by hand into tests/data/smollm2_outputs.jsonl.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from oar_attrib.models.generation import generate
from oar_attrib.models import load_model
from oar_attrib.training.data import PROMPT_TEMPLATES, read_jsonl

INSTRUCTIONS = {
    **PROMPT_TEMPLATES,
    "answer_is": "{question}\nPlease reason step by step, and end with a final line 'The answer is <answer>.'",
}


def _rows(data: Path, n_gsm8k: int, n_math: int) -> list[dict]:
    gsm = read_jsonl(data / "gsm8k_test.jsonl")[:n_gsm8k]
    math = [r for r in read_jsonl(data / "math500_test.jsonl") if len(r["answer"]) <= 12][:n_math]
    rows = []
    for r in gsm:
        for template in ("gsm8k", "answer_is"):
            rows.append({"source": "gsm8k", "id": r["id"], "template": template,
                         "question": r["question"], "answer": r["answer"]})
    for r in math:
        rows.append({"source": "math500", "id": r["id"], "template": "boxed",
                     "question": r["problem"], "answer": r["answer"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder of gsm8k_test.jsonl, math500_test.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n-gsm8k", type=int, default=8)
    parser.add_argument("--n-math", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(2)
    model, tok = load_model("smollm2-135m")
    rows = _rows(args.data, args.n_gsm8k, args.n_math)
    prompts = [tok.apply_chat_template(
        [{"role": "user", "content": INSTRUCTIONS[r["template"]].format(question=r["question"])}],
        tokenize=False, add_generation_prompt=True) for r in rows]
    with args.out.open("w") as out:
        for decoding, sample in (("greedy", False), ("t1", True)):
            ids = generate(model, tok, prompts, max_new_tokens=args.max_new_tokens, do_sample=sample,
                           temperature=1.0, batch_size=len(prompts), seed=0)
            for r, row in zip(rows, ids):
                truncated = row[-1] != tok.eos_token_id
                text = tok.decode(row, skip_special_tokens=True)
                out.write(json.dumps({**r, "decoding": decoding, "text": text,
                                      "truncated": truncated}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
