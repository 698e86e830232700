"""Resampling importance of steps: the total effect of a step on the final answer.

For step i of a trace (Thought Anchors' counterfactual resampling, METHOD.md 8b's oracle at
step level), N continuations are sampled from the prefix that ends with step i ("kept") and
N from the prefix where step i is removed ("removed"), and the importance of step i is the
Jensen-Shannon divergence (nats, in [0, log 2]) between the two empirical distributions of
the final answer. The rest of the trace is regenerated, so a step whose result reaches the
answer only through later steps is credited: teacher-forced methods (OAR-P, gradients),
which hold the rest of the trace fixed, measure its direct effect alone.

Removal `pad` (default) writes the pad token over the step's tokens, as OAR-P does, and lets
the model continue after them; `drop` continues straight from the prefix before the step, so
the model writes its own step i (Thought Anchors' resampling, which credits a step only as far
as the model would not write it anyway). A callable removal maps the step's token ids to the
ids written in its place: an intervention on the step's content, such as the arithmetic
world's `shift_result` (a step's result changed, the rest regenerated from it).

Analysis only (2 N samples per step): registered as `resample`, never used to train.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import torch

from ..defaults import ANSWER_FORMAT
from ..defaults import PROBE
from ..models.generation import continue_rows, cut_at_stop, stop_ids
from ..inputs.batch import ScoringBatch
from ..errors import InputError
from ..models.lm import eval_mode
from .knobs import ResampleKnobs
from .registry import register_method
from ..inputs.spans import locate_answer

REMOVALS = ("pad", "drop")


@dataclass(frozen=True)
class StepResample:
    """The resampling result of one step: its token range [start, end) in the row, the answer
    counts with the step kept and removed, their JS divergence, and the accuracies when the
    row's reference answer was given (else None)."""

    start: int
    end: int
    kept: dict
    removed: dict
    divergence: float
    accuracy_kept: float | None = None
    accuracy_removed: float | None = None

    @property
    def accuracy_drop(self) -> float | None:
        if self.accuracy_kept is None:
            return None
        return self.accuracy_kept - self.accuracy_removed


def js_divergence(a: Counter, b: Counter) -> float:
    """Jensen-Shannon divergence (nats) of two empirical distributions given as counts."""
    na, nb = sum(a.values()), sum(b.values())
    if na == 0 or nb == 0:
        raise InputError("js_divergence needs at least one sample on each side")
    total = 0.0
    for key in set(a) | set(b):
        p, q = a[key] / na, b[key] / nb
        m = (p + q) / 2
        total += (p * math.log(p / m) if p else 0.0) + (q * math.log(q / m) if q else 0.0)
    return max(total / 2, 0.0)


def _prefixes(ids: list[int], start: int, end: int, pad_id: int, removal) -> tuple[list[int], list[int]]:
    kept = ids[:end]
    if callable(removal):
        written = list(removal(ids[start:end]))
    else:
        written = [pad_id] * (end - start) if removal == "pad" else []
    return kept, ids[:start] + written


def _sample(model, rows: list[list[int]], n: int, *, pad_id: int, eos: list[int], max_new_tokens: int,
            temperature: float, batch_size: int, seed: int, bar) -> list[list[int]]:
    """n sampled continuations of each row (row-major), cut before the first EOS."""
    per_call = max(1, batch_size // n)
    tails: list[list[int]] = []
    for i in range(0, len(rows), per_call):
        chunk = rows[i:i + per_call]
        torch.manual_seed(seed + i)  # generate draws from the global generator
        out = continue_rows(model, chunk, pad_id, max_new_tokens=max_new_tokens, do_sample=True,
                            temperature=temperature, num_return_sequences=n, eos_token_id=eos or None)
        tails.extend(cut_at_stop(row, eos, keep=False) for row in out.tolist())
        bar.update(len(chunk) * n)
    return tails


def _answer(tokenizer, tail: list[int], fmt: str):
    text = tokenizer.decode(tail, skip_special_tokens=True)
    location = locate_answer(text, fmt)
    return None if location is None else text[location.start:location.end].strip()


def resample_steps(model, tokenizer, batch: ScoringBatch, *, n_samples: int = ResampleKnobs.n_samples,
                   removal="pad", answers: Sequence[str | None] | None = None, answer_format: str = ANSWER_FORMAT,
                   temperature: float = 1.0, max_new_tokens: int | None = None,
                   max_rollouts: int = 4096, batch_size: int = 64, seed: int = 0,
                   progress: bool = False) -> list[list[StepResample]]:
    """Resampling importance of every step of every row with an answer span.

    batch: B rows with step_ids (`encode_pairs` sets them). removal: `pad`, `drop` or a
    function of the step's token ids (module docstring). answers: B reference answers (or
    None) for the accuracies. max_new_tokens: default the row's length after the step + 16.
    max_rollouts: at most this many sampled continuations per row (2 * n_samples * steps);
    more is an error that says what to lower. Returns one list of StepResample per row
    (empty for rows without a span).
    """
    from tqdm.auto import tqdm

    if not callable(removal) and removal not in REMOVALS:
        raise InputError(f"removal={removal!r}; choose one of {', '.join(REMOVALS)}, or pass a "
                         "function from a step's token ids to the ids written in its place")
    if n_samples < 1:
        raise InputError(f"n_samples={n_samples} must be >= 1")
    if answers is not None and len(answers) != batch.input_ids.shape[0]:
        raise InputError(f"{len(answers)} answers for {batch.input_ids.shape[0]} rows; pass one per row")
    rows = [r for r in range(batch.input_ids.shape[0]) if bool(batch.has_answer[r])]
    steps = {r: batch.step_ranges(r) for r in rows}
    for r in rows:
        if 2 * n_samples * len(steps[r]) > max_rollouts:
            raise InputError(
                f"row {r} has {len(steps[r])} steps: 2 x {n_samples} samples each is "
                f"{2 * n_samples * len(steps[r])} rollouts, over max_rollouts={max_rollouts}; lower "
                "n_samples or raise max_rollouts")
    pad_id = int(batch.pad_token_id)
    eos = stop_ids(model, tokenizer)
    total = sum(2 * n_samples * len(s) for s in steps.values())
    bar = tqdm(total=total, desc="resample", unit="rollout", disable=not progress)
    out: list[list[StepResample]] = [[] for _ in range(batch.input_ids.shape[0])]
    with torch.no_grad(), eval_mode(model):
        for r in rows:
            length = int(batch.lengths[r])
            ids = batch.input_ids[r, :length].tolist()
            prefixes = [p for a, b in steps[r] for p in _prefixes(ids, a, b, pad_id, removal)]
            budget = max_new_tokens or length - steps[r][0][0] + 16
            tails = _sample(model, prefixes, n_samples, pad_id=pad_id, eos=eos, max_new_tokens=budget,
                            temperature=temperature, batch_size=batch_size, seed=seed + 7919 * r, bar=bar)
            found = [_answer(tokenizer, t, answer_format) for t in tails]
            reference = None if answers is None else answers[r]
            for k, (a, b) in enumerate(steps[r]):
                kept = Counter(found[(2 * k) * n_samples:(2 * k + 1) * n_samples])
                removed = Counter(found[(2 * k + 1) * n_samples:(2 * k + 2) * n_samples])
                acc = (None, None) if reference is None else (
                    kept[str(reference)] / n_samples, removed[str(reference)] / n_samples)
                out[r].append(StepResample(a, b, dict(kept), dict(removed), js_divergence(kept, removed),
                                           *acc))
    bar.close()
    return out


# max_rollouts only refuses a row that needs more; batch_size is not speed-only: each chunk
# reseeds the sampler, so it changes the draws
@register_method("resample", analysis_only=True, needs_tokenizer=True, speed_params=("max_rollouts",),
                 knobs=ResampleKnobs, unit="step")
def resample(model, batch: ScoringBatch, *, probe: str = PROBE, generator: torch.Generator | None = None,
             tokenizer=None, n_samples: int = ResampleKnobs.n_samples, removal: str = "pad",
             answer_format: str = ANSWER_FORMAT, temperature: float = 1.0, max_rollouts: int = 4096,
             batch_size: int = 64, progress: bool = False) -> torch.Tensor:
    """Resampling importance (module docstring) on every token of each step: (B, L) float32,
    the step's JS divergence in [0, log 2], 0 outside the steps. Needs `tokenizer` to read the
    sampled answers (`attribute` passes its own; a direct call passes it). `probe` is unused (the answer is read from the text);
    `generator` seeds the sampling (default seed 0)."""
    if tokenizer is None:
        raise InputError("resample reads sampled answers as text and needs the tokenizer: call it "
                         "through attribute(), or pass tokenizer=")
    seed = 0 if generator is None else int(generator.initial_seed()) % (2**31)
    results = resample_steps(model, tokenizer, batch, n_samples=n_samples, removal=removal,
                             answer_format=answer_format, temperature=temperature,
                             max_rollouts=max_rollouts, batch_size=batch_size, seed=seed,
                             progress=progress)
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    for r, steps in enumerate(results):
        for step in steps:
            out[r, step.start:step.end] = step.divergence
    return out.to(batch.input_ids.device)
