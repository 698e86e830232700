"""Where a method's recall@|O| misses fall on the arithmetic world, and whether the model uses
the tokens it misses.

    python scripts/recall_misses.py                  # the bundled model, `recall`, OAR-P
    python scripts/recall_misses.py --model PATH --preset recall-wide --method grail

For each scored trace of `oracle_recall`, the method's top-|O| tokens that are not in `direct`
are sorted by what they are in the trace (another step's result, an operand, other text). Then
each step result of the trace, one at a time, is replaced by the pad token with the rest held
fixed, and the change of the model's own answer log-likelihood (mean over the answer tokens,
the `as_joint` probe) is reported for four groups: `direct` results the method ranks in its
top |O| or not, and other results it ranks there or not, split by whether the trace is right.
A missed `direct` token whose masking leaves the answer's likelihood where it was is one the
model does not use.
"""
from __future__ import annotations

import argparse
from collections import Counter, defaultdict

import numpy as np
import torch

import oar_attrib as oa
from oar_attrib.instruments.world.recall import oracle_token_mask
from oar_attrib.world import STEP_RE as STEP


@torch.no_grad()
def answer_loglik(model, ids: list[int], answer_positions: list[int]) -> float:
    """Mean log-probability of the tokens at `answer_positions` of `ids`, teacher forced."""
    logp = model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(-1)
    return float(np.mean([logp[j - 1, ids[j]].item() for j in answer_positions]))


def top_k(scores: np.ndarray, scored: list[int], k: int) -> set[int]:
    return set(sorted(scored, key=lambda t: -scores[t])[:k])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="arith-tiny")
    parser.add_argument("--preset", default="recall")
    parser.add_argument("--method", default="oar_p")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    model, tok = oa.load_model(args.model)
    report = oa.oracle_recall(model, tok, n=args.n, seed=args.seed, preset=args.preset,
                              methods=[args.method], sets=("direct",))
    picks: Counter = Counter()
    change: dict = defaultdict(list)
    for i, trace in enumerate(report.traces):
        if report.status[i] != "scored":
            continue
        problem, text = report.problems[i], report.texts[i]
        u, _, v = problem.target
        scores = np.asarray(trace.scores[args.method])
        scored = [t for t, s in enumerate(trace.scored) if s]
        direct = oracle_token_mask(trace.offsets, report.oracles[i].direct)
        top = top_k(scores, scored, int(direct[scored].sum()))
        # What each character of the trace is: (step name, "l" | "r" | "res").
        role = {c: (m.group("name"), g) for m in STEP.finditer(text)
                for g in ("l", "r", "res") for c in range(*m.span(g))}
        for t in top - set(np.flatnonzero(direct)):
            name, part = role.get(trace.offsets[t][0], (None, None))
            kind = ("other text" if name is None else "another step's result" if part == "res"
                    else "an operand of a final step" if name in (u, v) else "an operand of another step")
            picks[kind] += 1

        prompt = tok(problem.prompt, add_special_tokens=False).input_ids
        ids = prompt + list(trace.token_ids)
        answer = [len(prompt) + t for t, seg in enumerate(trace.segments) if seg == "answer"]
        base = answer_loglik(model, ids, answer)
        for m in STEP.finditer(text):
            group = "direct" if m.group("name") in (u, v) else "other result"
            for t, (a, b) in enumerate(trace.offsets):
                if b > a and a >= m.start("res") and b <= m.end("res") and trace.scored[t]:
                    masked = list(ids)
                    masked[len(prompt) + t] = tok.pad_token_id
                    key = (group, "in top |O|" if t in top else "not in top |O|",
                           "right" if report.correct[i] else "wrong")
                    change[key].append(answer_loglik(model, masked, answer) - base)

    stats = report.methods[args.method]["direct"]
    print(f"{args.method} recall@|O| on direct: {stats['recall']:.3f} "
          f"({report.n_scored} traces, {report.accuracy:.1%} right)")
    print(f"its top-|O| tokens outside direct ({sum(picks.values())}):")
    for kind, count in picks.most_common():
        print(f"  {count:5d}  {kind}")
    print("masking one step result, rest fixed: change of the answer's mean log-likelihood")
    for key in sorted(change):
        d = np.asarray(change[key])
        print(f"  {' / '.join(key):<38} n={d.size:4d}  mean {d.mean():+.3f}  "
              f"lowered in {np.mean(d < 0):.0%}")


if __name__ == "__main__":
    main()
