"""`causal_oracle`: a positive control that knows the causal tokens, and `causal_scramble`, its
own scores on other tokens; for instruments only.

`causal_oracle` reads no model. On the arithmetic world's problems (`world.generator.
parse_question` reads the problem back from the prompt) it scores 1 the response tokens of the
oracle set's spans (`world.oracle`) and 0 every other reasoning token; the method's weighting
(OAR's bi-level gate) turns that into weights as it does for OAR-P's scores. The default set,
`direct`, is the results the answer reads. A method that knows what causes the reward must
align the trainer's gradient with the true one better than GRPO: `oar align` uses it as the
positive control of its endpoint (docs/guide/align.md). What the other sets did, measured
(arith-tiny, 30 batches, a 16-batch pool): `chain` (every step on the answer's dependency path,
with the operands and names it copies) came out -0.014 [-0.029, -0.000] on seed 0 and +0.015
[-0.004, +0.037] on seed 1, a sign that flips between seeds, so it is no control; `direct` was
made the default after seed 0 had shown both, and seed 1 is its confirmation on fresh batches
and a fresh pool.

`causal_scramble` is the control of that control: `causal_oracle`'s scores of each row moved to
other scored positions of the row at random (a permutation drawn from the row's own
generator), so it has the oracle's sparsity and the gate gives it the same weights, on tokens
that do not cause the reward. `causal_oracle` must beat it: a win over GRPO that the scramble
shares would come from how many tokens are weighted, not which.

Both read the answer key, so they train nothing (`analysis_only`), and neither is among the
methods analyses list by default: importing this module registers them (`oar align` does; the
attribution pipeline knows nothing of the world). Any other prompt (another world, a real
model's questions) has no known causal tokens: they refuse it with an InputError naming the row.
"""
from __future__ import annotations

import torch

from oar_attrib.defaults import PROBE
from oar_attrib.errors import InputError
from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.models.lm import keep_scoreable, scoreable
from oar_attrib.methods.probes import check_probe
from oar_attrib.methods.registry import register_method
from oar_attrib.world.generator import parse_question
from oar_attrib.world.oracle import oracle_spans

NAME = "causal_oracle"
SCRAMBLE = "causal_scramble"
# What scores 1: 'direct' the results the answer reads (the default), 'chain' the steps on the
# answer's path (its sign flips between seeds: module docstring), 'not_idle' every reasoning
# token but the distractor steps and filler words (those the oracle knows the answer never reads).
SETS = ("chain", "direct", "not_idle")
NOT_A_WORLD_PROMPT = (f"{NAME} knows the causal tokens of the arithmetic world's problems only "
           "(prompts like 'd=4+7, e=d-3. find d+e.'); use a world preset such as arith-tiny")


def char_offsets(tokenizer, ids: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each token's text within the decoded text of `ids` (cumulative decodes,
    so a tokenizer whose pieces merge when decoded together is placed right)."""
    out, before = [], 0
    for k in range(len(ids)):
        after = len(tokenizer.decode(ids[: k + 1]))
        out.append((before, max(before, after)))
        before = max(before, after)
    return out


def row_scores(tokenizer, prompt_ids: list[int], response_ids: list[int], oracle_set: str) -> list[float]:
    """1.0 on the response tokens that overlap the oracle set's spans, else 0.0; InputError
    when the prompt is not a world question."""
    problem = parse_question(tokenizer.decode(prompt_ids))
    if problem is None:
        raise InputError(NOT_A_WORLD_PROMPT)
    oracle = oracle_spans(problem, tokenizer.decode(response_ids))
    inside = oracle_set != "not_idle"
    spans = getattr(oracle, oracle_set) if inside else oracle.distractor + oracle.filler
    return [float(any(s < e2 and s2 < e for s2, e2 in spans) == inside)
            for s, e in char_offsets(tokenizer, response_ids)]


@register_method(NAME, analysis_only=True, needs_tokenizer=True)
def causal_oracle(model, batch: ScoringBatch, *, probe: str = PROBE, generator=None, tokenizer=None,
                  oracle_set: str = "direct") -> torch.Tensor:
    """(B, L) float32: 1 on the causal tokens the world's oracle marks (`oracle_set`: 'direct',
    the results the answer reads; 'chain', the steps on the answer's path; `SETS`), 0 on the
    other scored positions and exactly 0 elsewhere. The model is not run."""
    check_probe(probe)
    if tokenizer is None:
        raise InputError(f"{NAME} reads the prompt's text: pass tokenizer=")
    if oracle_set not in SETS:
        raise InputError(f"{NAME}: oracle_set={oracle_set!r}; choose one of {', '.join(SETS)}")
    values = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    response = batch.responses().cpu()
    for b, n in enumerate(batch.lengths.tolist()):
        where = response[b, :n].nonzero().flatten()
        if where.numel() == 0:
            continue
        start = int(where[0])
        ids = batch.input_ids[b, :n].tolist()
        values[b, start:n] = torch.tensor(row_scores(tokenizer, ids[:start], ids[start:], oracle_set))
    return keep_scoreable(values.to(batch.input_ids.device), batch)


@register_method(SCRAMBLE, analysis_only=True, needs_tokenizer=True, random=True)
def causal_scramble(model, batch: ScoringBatch, *, probe: str = PROBE, generator=None, tokenizer=None,
                    oracle_set: str = "direct") -> torch.Tensor:
    """(B, L) float32: `causal_oracle`'s scores with each row's values permuted over its scored
    positions (`scoreable`), so every row keeps its count of 1s and loses which tokens they
    are; exactly 0 elsewhere. generator: one torch.Generator, or a list of B (row b's
    permutation drawn from generators[b] alone, so a row's scores do not depend on its batch);
    None draws from torch's global generator. The model is not run."""
    scores = causal_oracle(model, batch, probe=probe, tokenizer=tokenizer, oracle_set=oracle_set).cpu()
    rows = scores.shape[0]
    if isinstance(generator, (list, tuple)) and len(generator) != rows:
        raise InputError(f"{len(generator)} generators for {rows} rows; pass one generator, or one per row")
    mask = scoreable(batch).cpu()
    out = torch.zeros_like(scores)
    for b in range(rows):
        where = mask[b].nonzero().flatten()  # (k,) the row's scored positions
        gen = generator[b] if isinstance(generator, (list, tuple)) else generator
        order = torch.randperm(where.numel(), generator=gen)
        out[b, where] = scores[b, where[order]]
    return out.to(batch.input_ids.device)
