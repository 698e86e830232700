"""The one pipeline from a scoring batch to weights: `score_and_weight(model, batch, settings)`.

`attribute()`, the trainer's reshaping and the web app's live page all call it, so a trace
gets the same importances and weights wherever it is scored (METHOD.md 3, 6-7):

1. the rows to score (default: every row with positions in the method's scope: an answer span
   and scored positions, or for a `scope="response"` method any response token) are
   deduplicated (a sampled group often repeats a completion; a row's scores depend on its own
   tokens only) and grouped so each group's tokens stay within the budget; a `grouped` method
   (KTAE, whose counts compare a group's rollouts) runs once on every row instead;
2. the method (`methods.method_spec(settings.method)`) scores each group; a method registered
   `random=True` gets one generator per row, seeded from the settings' seed and the row's
   token ids (`row_seed`), so a row's numbers do not depend on the rows batched with it;
   a `uniform` method (`none`) is not run and no model is needed; a method that averages
   random draws (`draws=True`, OAR-G) returns them, and the pipeline averages them itself
   (`methods.draws.mean_of_draws`, the method's own mean) and keeps them in `Weighed.draws`,
   from which each trace's split-half reliability is computed (`metrics.split_half_reliability`);
3. non-finite policy: a row with NaN or inf on its scored positions keeps weight 1
   everywhere and is reported in `nonfinite` (never silently gated, never stopping a run);
4. the weighting (the settings', else the method's own) turns the importances into weights
   over the method's positions (S, or the response), per token or, with granularity 'step',
   per step (`step_gating.step_weights`); weight 1 elsewhere and on rows not scored. An
   `additive` weighting (KTAE's) gives a term added to the advantage (`Weighed.bonus`) and
   weight 1.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import time
from dataclasses import dataclass
from typing import Callable

import torch

from ..inputs.batch import ScoringBatch
from ..models.budget import CPU_BATCH_TOKENS
from ..models.lm import eval_mode
from ..methods import MethodSpec, method_spec
from ..methods.draws import mean_of_draws
from .step_gating import step_weights
from .weightings import weighting_spec
from .settings import ReshapeSettings, SettingError


# Step 2 for a policy outside this process: (batch, settings, rows to score) -> (B, L) importances.
Scorer = Callable[[ScoringBatch, ReshapeSettings, list[int]], torch.Tensor]


@dataclass
class Weighed:
    """What `score_and_weight` gives for a (B, L) batch.

    importances: (B, L) float32 on CPU, the method's scores as computed (NaN or inf kept, for
                 the trace's flag), 0 outside its positions and on rows not scored.
    weights:     (B, L) float32 on CPU, 1 outside its positions, on rows not scored and on
                 `nonfinite` rows.
    scored:      (B, L) bool, the method's positions: S, the reasoning positions of rows with
                 an answer span; or, for a `scope="response"` method, every response token.
    attributed:  (B,) bool, rows the method scored (and a uniform method did not skip).
    nonfinite:   (B,) bool, rows whose importances on its positions were NaN or inf.
    seconds:     wall time of the scoring and the weighting.
    bonus:       (B, L) float32 on CPU, the term an additive weighting adds to the advantage
                 (A_i * w_t + b_t), 0 elsewhere and for every other weighting.
    draws:       (n, B, L) float32 on CPU, the per-draw importances of a method that averages
                 draws (`MethodSpec.draws`; `importances` is their mean), 0 outside its
                 positions and on rows not scored; None for other methods.
    """

    importances: torch.Tensor
    weights: torch.Tensor
    scored: torch.Tensor
    attributed: torch.Tensor
    nonfinite: torch.Tensor
    seconds: float
    bonus: torch.Tensor | None = None
    draws: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.bonus is None:
            self.bonus = torch.zeros(self.weights.shape, dtype=torch.float32)


def row_seed(seed: int, ids) -> int:
    """A 63-bit seed from the run's seed and a row's token ids: equal rows, equal seeds, on
    every rank, in every batch, in `attribute()` as in training."""
    digest = hashlib.sha256(f"{seed}|{[int(i) for i in ids]}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _row_key(batch: ScoringBatch, row: int) -> tuple:
    n = int(batch.lengths[row])
    masks = (batch.input_ids, batch.scored_mask, batch.answer_mask, batch.response_mask)
    return tuple(tuple(t[row, :n].tolist()) for t in masks if t is not None)


def _chunks(rows: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Rows grouped in order so that each group's total length stays within `budget` (a row
    longer than the budget goes alone)."""
    groups, current, used = [], [], 0
    for row in rows:
        if current and used + lengths[row] > budget:
            groups.append(current)
            current, used = [], 0
        current.append(row)
        used += lengths[row]
    return groups + ([current] if current else [])


def _method_kwargs(spec: MethodSpec, settings: ReshapeSettings, sub: ScoringBatch, params: dict,
                   tokenizer) -> dict:
    """Keyword arguments of the method on the sub-batch `sub`."""
    lengths = sub.lengths.tolist()
    generators = [torch.Generator().manual_seed(row_seed(settings.seed, sub.input_ids[b, :n].tolist()))
                  for b, n in enumerate(lengths)]
    kwargs = spec.kwargs(dataclasses.asdict(settings), settings.max_batch_tokens, max(lengths), generators)
    if not spec.random:  # a method that is not row-wise random gets one generator per call
        kwargs["generator"] = torch.Generator().manual_seed(settings.seed)
    if spec.needs_tokenizer and tokenizer is not None:
        kwargs["tokenizer"] = tokenizer
    spec.check_knobs(params)  # the caller's knobs, held to the knobs' bounds as the settings' are
    return {**kwargs, **params}


def _score_grouped(model, batch: ScoringBatch, settings: ReshapeSettings, spec: MethodSpec,
                   rows: list[int], params: dict | None, tokenizer) -> torch.Tensor:
    """(B, L) float32 importances on CPU of a `grouped` method: run once on the whole batch
    (its counts are over each group's rollouts), kept on the given rows, 0 on the others."""
    kwargs = _method_kwargs(spec, settings, batch, dict(params or {}), tokenizer)
    scores = spec.fn(model, batch, probe=settings.probe, **kwargs).float().cpu()
    chosen = torch.zeros(len(scores), dtype=torch.bool)
    chosen[list(rows)] = True
    return torch.where(chosen[:, None], scores, torch.zeros_like(scores))


def score(model, batch: ScoringBatch, settings: ReshapeSettings, rows: list[int], *,
          params: dict | None = None, tokenizer=None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, L) float32 importances on CPU of the given rows (steps 1-2), 0 on other rows, and
    for a method that averages draws their (n, B, L) per-draw importances (else None).

    params: extra keyword arguments of the method (they win over the settings').
    """
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    spec = method_spec(settings.method)
    if spec.grouped:  # counts over the group's rollouts: every row, once, no model
        return _score_grouped(model, batch, settings, spec, rows, params, tokenizer), None
    first: dict[tuple, int] = {}
    source = {r: first.setdefault(_row_key(batch, r), r) for r in rows}
    unique = [r for r in rows if source[r] == r]
    if not unique:
        return out, None
    lengths = batch.lengths.tolist()
    device = next(model.parameters()).device
    draws = None
    for group in _chunks(unique, lengths, settings.max_batch_tokens or CPU_BATCH_TOKENS):
        sub = batch.select(group).to(device)
        kwargs = _method_kwargs(spec, settings, sub, dict(params or {}), tokenizer)
        if spec.draws:
            kwargs["return_draws"] = True
        scores = spec.fn(model, sub, probe=settings.probe, **kwargs).float().cpu()
        if spec.draws:  # (n, G, W)
            if draws is None:
                draws = torch.zeros((scores.shape[0], *out.shape), dtype=torch.float32)
            draws[:, group, :sub.input_ids.shape[1]] = scores
            scores = mean_of_draws(scores)
        out[group, : sub.input_ids.shape[1]] = scores
    for row, first_row in source.items():
        if row != first_row:
            out[row] = out[first_row]
            if draws is not None:
                draws[:, row] = draws[:, first_row]
    return out, draws


def positions(batch: ScoringBatch, spec: MethodSpec) -> torch.Tensor:
    """(B, L) bool: the positions method `spec` scores and its weighting weighs (its scope):
    S of the rows with an answer span, or every response token."""
    if spec.scope == "response":
        return batch.responses().clone()
    return batch.scored_mask & batch.has_answer[:, None]


def token_credit(importances: torch.Tensor, scored: torch.Tensor, settings: ReshapeSettings,
                 step_ids: torch.Tensor | None = None, batch: ScoringBatch | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights, bonus), each (B, L), of finite (B, L) importances over the (B, L) bool mask
    `scored` (step 4): the settings' weighting, else the method's own; with granularity 'step'
    the weighting runs over the steps of `step_ids` (B, L) and each step's weight goes to its
    tokens. An additive weighting's output is the bonus (weights 1); otherwise the bonus is 0.
    `batch` is passed to weightings that read it (segments, outcomes)."""
    spec = weighting_spec(settings.weighting or method_spec(settings.method).weighting)
    params = settings.weighting_params()
    ones = torch.ones(importances.shape, dtype=torch.float32)
    if settings.granularity == "step":
        if spec.additive or spec.needs_batch or method_spec(settings.method).scope != "reasoning":
            raise SettingError("granularity", f"granularity='step' pools the reasoning steps; method "
                               f"{settings.method!r} with weighting {spec.name!r} weighs tokens of the "
                               "whole response: use granularity='token'")
        if step_ids is None:
            step_ids = torch.full(importances.shape, -1, dtype=torch.long)
        weights = step_weights(importances, scored, step_ids, settings.step_pool,
                               lambda values, valid: spec.fn(values, valid, params))
        return weights, torch.zeros_like(ones)
    out = spec.fn(importances, scored, params, batch)
    return (ones, out.float()) if spec.additive else (out, torch.zeros_like(ones))


def weigh(importances: torch.Tensor, scored: torch.Tensor, settings: ReshapeSettings,
          step_ids: torch.Tensor | None = None, batch: ScoringBatch | None = None) -> torch.Tensor:
    """The (B, L) weights of `token_credit` (1 everywhere for an additive weighting, whose term
    is `token_credit`'s bonus)."""
    return token_credit(importances, scored, settings, step_ids, batch)[0]


def score_and_weight(model, batch: ScoringBatch, settings: ReshapeSettings, *,
                     rows: list[bool] | None = None, params: dict | None = None,
                     tokenizer=None, scorer: Scorer | None = None) -> Weighed:
    """Importances and weights of `batch` under `settings` (module docstring).

    model: the policy (may be None when the method is uniform or `scorer` is given).
    batch: B rows, on any device.
    rows: (B,) which rows to score (default all); the others keep weight 1.
    params: extra keyword arguments of the method, e.g. {"n_noise": 4}.
    tokenizer: passed to methods that read text (`needs_tokenizer`).
    scorer: step 2 done elsewhere, for a policy this process cannot run as a module (verl's
    actor, `training.verl.scoring`): `scorer(batch, settings, rows)` gives the (B, L)
    importances of the rows listed (0 on the others); steps 1, 3 and 4 are the same.
    """
    start = time.perf_counter()
    batch = batch.to("cpu")
    spec = method_spec(settings.method)
    scored = positions(batch, spec)
    chosen = torch.ones(len(scored), dtype=torch.bool) if rows is None else torch.as_tensor(list(rows), dtype=torch.bool)
    attributed = scored.any(dim=1) & chosen & (not spec.uniform)
    importances, draws = torch.zeros(scored.shape, dtype=torch.float32), None
    if attributed.any() and scorer is not None:
        importances = scorer(batch, settings, attributed.nonzero().flatten().tolist()).float().cpu()
    elif attributed.any():
        with eval_mode(model) if model is not None else contextlib.nullcontext():
            importances, draws = score(model, batch, settings,
                                       attributed.nonzero().flatten().tolist(), params=params,
                                       tokenizer=tokenizer)
    nonfinite = (scored & ~torch.isfinite(importances)).any(dim=1)
    gated = scored & (attributed & ~nonfinite)[:, None]
    clean = torch.where(gated, importances, torch.zeros_like(importances))
    weights, bonus = token_credit(clean, gated, settings, batch.step_ids, batch)
    if draws is not None:
        draws = torch.where(scored, draws, torch.zeros((), dtype=draws.dtype))
    return Weighed(importances=torch.where(scored, importances, torch.zeros_like(importances)),
                   weights=weights, scored=scored, attributed=attributed, nonfinite=nonfinite,
                   seconds=time.perf_counter() - start, bonus=bonus, draws=draws)


def for_method(settings: ReshapeSettings, method: str) -> ReshapeSettings:
    """The same settings for another method (`attribute` runs several on one batch)."""
    return dataclasses.replace(settings, method=method)
