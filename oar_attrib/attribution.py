"""The public entry point: `attribute(model, tokenizer, prompts, responses, methods=...)`.

Text -> segments -> importances (one registered method each) -> weights -> optional reshaped
advantages and credit metrics, per response. Importances are computed in sub-batches so that
progress shows and memory stays bounded; every method sees the same batch.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .errors import InputError
from .inputs.batch import GroupOutcomes
from .inputs.encoding import EncodedPair, encode_pairs
from .methods import method_spec
from .methods.masks import resolve_mask_names
from .inputs.steps import AUTO
from .records.traces import AttributionBatch, TraceAttribution, build_trace
from .weights.weightings import get_weighting
from .weights import pipeline
from .weights.pipeline import Weighed, for_method
from .weights.settings import ReshapeSettings

__all__ = ["AttributionBatch", "TraceAttribution", "attribute", "compute_weights"]  # records: traces

_D = ReshapeSettings  # the defaults below are the settings' own objects


def compute_weights(method: str, importance: torch.Tensor, mask: torch.Tensor,
                    tau: float = _D.tau, beta: float = _D.beta, w_min: float = _D.w_min, *,
                    weighting: str | None = None, rho: float = _D.rho) -> torch.Tensor:
    """(B, L) weights from (B, L) importances over the (B, L) bool scored mask, through
    `weighting` (default: the one `method` registered with; `weightings.available_weightings()`)."""
    fn = get_weighting(weighting or method_spec(method).weighting)
    settings = ReshapeSettings(method=method, tau=tau, beta=beta, w_min=w_min, rho=rho)
    return fn(importance, mask, settings.weighting_params())


def _trace(pair: EncodedPair, prompt, weighed: dict[str, Weighed], row: int, probe, params, gating,
           advantage, n_rows: int):
    """The trace record of the batch's row `row` from each method's pipeline output."""
    s, e = pair.response_start, pair.length
    scores = {m: w.importances[row, s:e] for m, w in weighed.items()}
    weights = {m: w.weights[row, s:e] for m, w in weighed.items()}
    bonus = {m: w.bonus[row, s:e] for m, w in weighed.items()}
    seconds = {m: w.seconds / n_rows for m, w in weighed.items()}
    return build_trace(pair, prompt, probe=probe, scores=scores, weights=weights,
                       advantage=advantage, params={**gating, "methods": params}, timings=seconds,
                       bonus=bonus)


def _chunks(n: int, batch_size: int, groups: Sequence | None) -> list[range]:
    """Consecutive row ranges of about `batch_size` rows; with `groups`, never one group's
    rows apart (a group's rows must be contiguous)."""
    if groups is None:
        return [range(a, min(a + batch_size, n)) for a in range(0, n, batch_size)]
    seen, out, start = set(), [], 0
    for row in range(n):
        if row and groups[row] != groups[row - 1]:
            if groups[row] in seen:
                raise InputError(f"group {groups[row]!r} is not contiguous (row {row}); put each "
                                 "group's rows next to each other")
            if row - start >= batch_size:
                out.append(range(start, row))
                start = row
        seen.add(groups[row])
    return out + ([range(start, n)] if n > start else [])


def _outcomes(groups, correct, advantages, rows: range) -> GroupOutcomes | None:
    """The `GroupOutcomes` of `rows`, or None without groups."""
    if groups is None:
        return None
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    return GroupOutcomes(group=torch.tensor([ids[groups[r]] for r in rows]),
                         correct=torch.tensor([bool(correct[r]) for r in rows]),
                         advantage=None if advantages is None else
                         torch.tensor([float(advantages[r]) for r in rows]))


def attribute(
    model,
    tokenizer,
    prompts: str | Sequence,
    responses: str | Sequence[str],
    methods: Sequence[str] = ("oar_p",),
    *,
    probe: str = "as_mean",
    answer_format: str = "auto",
    answer_pattern=None,
    chat: bool | None = None,
    advantages: Sequence[float] | None = None,
    tau: float = _D.tau,
    beta: float = _D.beta,
    w_min: float = _D.w_min,
    weighting: str | None = _D.weighting,
    rho: float = _D.rho,
    granularity: str = _D.granularity,
    step_pool: str = _D.step_pool,
    method_params: dict[str, dict] | None = None,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = False,
    step_unit=AUTO,
    max_batch_tokens: int | None = None,
    groups: Sequence | None = None,
    correct: Sequence[bool] | None = None,
) -> AttributionBatch:
    """Token importances, weights and credit metrics of each response.

    prompts, responses: one or B of each (a prompt is a string or a chat message list).
    methods: registered importance methods (`methods.available_methods()`).
    probe: outcome probe, `lt`, `as_mean` or `as_joint` (METHOD.md section 3).
    answer_format, answer_pattern: where the final answer is (`spans.locate_answer`: auto,
        boxed, gsm8k, answer_is, regex with answer_pattern); OARConfig and `oar attribute
        --answer-format` use the same names.
    advantages: optional B sequence advantages A_i; adds token advantages A_i * w_t and the
        top-10% advantage mass per method.
    tau, beta, w_min: bi-level gating (METHOD.md section 6); w_min floors the suppression gate
        before the mass-preserving rescale, so a final weight can be below it.
    weighting, rho: the weighting (default each method's own) and top_rho's kept fraction.
    granularity, step_pool: 'step' gates pooled step importances and gives each step's weight
        to its tokens, as a step-granularity trainer does (`ReshapeSettings`).
    method_params: extra keyword arguments per method, e.g. {"oar_g": {"n_noise": 4}}; an
        OAR-P `mask` may name the tokenizer's "eos" or "unk" token (`methods.masks`).
    progress: a progress bar counting traces, with the scored positions so far.
    step_unit: how reasoning splits into steps (`steps.step_spans`: line, paragraph,
        sentence, a regex; default auto: lines, or sentences when the reasoning is one line,
        as the arithmetic world's is, so each `x=a+b=n.` clause is a step). Sets each trace's
        `steps` and the steps step-level methods (`oar_p_step`) perturb.
    max_batch_tokens: the token budget per forward of the methods that take one (OAR-P);
        None sizes it from the device's free memory (`budget.auto_batch_tokens`).
        `method_params[method]["max_batch_tokens"]` wins over it.
    groups, correct: B group labels (responses sampled for one prompt share one; each group's
        rows next to each other) and whether each response is right: what a method comparing a
        group's rollouts reads (`ktae`); with `advantages`, GRAIL's rollout filter reads their
        sign. A group is never split across sub-batches.
    Responses whose answer span is not found get weight 1 everywhere and the flag
    `no_answer_span`; one whose answer starts it after an empty prompt (no position predicts
    the answer) is treated the same, flagged `no_predicting_position`. Non-finite importances
    are flagged, never silently gated.
    """
    if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], dict)):
        prompts = [prompts]
    if isinstance(responses, str):
        responses = [responses]
    if len(prompts) != len(responses):
        raise InputError(f"{len(prompts)} prompts but {len(responses)} responses; pass one per response")
    if advantages is not None and len(advantages) != len(responses):
        raise InputError(f"{len(advantages)} advantages for {len(responses)} responses")
    if (groups is None) != (correct is None) or (groups is not None and not
                                                 len(groups) == len(correct) == len(responses)):
        raise InputError("groups and correct go together, one of each per response")
    settings = ReshapeSettings(
        method=methods[0] if methods else _D.method, probe=probe, tau=tau, beta=beta, w_min=w_min,
        weighting=weighting, rho=rho, granularity=granularity, step_pool=step_pool,
        max_batch_tokens=max_batch_tokens, answer_format=answer_format, answer_pattern=answer_pattern,
        seed=seed)
    per_method = {m: for_method(settings, m) for m in methods}  # checks every name
    params = resolve_mask_names(method_params or {}, tokenizer)  # "eos" / "unk" -> token ids
    gating = {"tau": tau, "beta": beta, "w_min": w_min}
    if granularity != _D.granularity or weighting is not None:
        gating |= {"granularity": granularity, "step_pool": step_pool, "weighting": weighting}
    out = AttributionBatch()
    bar = tqdm(total=len(prompts), desc="attribute", unit="trace", disable=not progress)
    positions = 0  # scored positions so far, beside the traces
    with bar:  # the pipeline puts the model in eval mode while it scores
        for rows in _chunks(len(prompts), batch_size, groups):
            start, stop = rows.start, rows.stop
            batch, pairs = encode_pairs(tokenizer, prompts[start:stop], responses[start:stop],
                                        answer_format=answer_format, answer_pattern=answer_pattern, chat=chat,
                                        step_unit=step_unit)
            batch = dataclasses.replace(batch, outcomes=_outcomes(groups, correct, advantages, rows))
            weighed = {m: pipeline.score_and_weight(model, batch, per_method[m], params=params.get(m),
                                                    tokenizer=tokenizer) for m in methods}
            for row, pair in enumerate(pairs):
                adv = None if advantages is None else float(advantages[start + row])
                out.append(_trace(pair, prompts[start + row], weighed, row, probe, params, gating,
                                  adv, len(pairs)))
            positions += sum(sum(t.scored) for t in out[-len(pairs):])
            bar.update(len(pairs))
            bar.set_postfix(positions=positions)
    return out
