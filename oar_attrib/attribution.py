"""The public entry point: `attribute(model, tokenizer, prompts, responses, methods, settings)`.

Text -> segments -> importances (one registered method each) -> weights -> optional reshaped
advantages and credit metrics, per response. Importances are computed in sub-batches so that
progress shows and memory stays bounded; every method sees the same batch. Every trace
carries the settings record of what made it (`records.settings_record`) as its `params`.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from tqdm.auto import tqdm

from .errors import InputError
from .inputs.batch import GroupOutcomes
from .inputs.encoding import EncodedPair, encode_pairs
from .methods import default_methods, method_spec
from .methods.masks import resolve_mask_names
from .records.settings_record import settings_record
from .records.traces import AttributionBatch, TraceAttribution, build_trace
from .weights import pipeline
from .weights.pipeline import Weighed, for_method
from .weights.settings import ReshapeSettings

__all__ = ["AttributionBatch", "TraceAttribution", "attribute", "compute_weights"]  # records: traces

if TYPE_CHECKING:  # for the signature and the API page only; transformers loads with the model
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

_D = ReshapeSettings  # the defaults below are the settings' own objects
_SETTING_NAMES = tuple(f.name for f in dataclasses.fields(ReshapeSettings) if f.name != "method")


def compute_weights(method: str, importance: torch.Tensor, mask: torch.Tensor,
                    tau: float = _D.tau, beta: float = _D.beta, w_min: float = _D.w_min, *,
                    weighting: str | None = None, rho: float = _D.rho) -> torch.Tensor:
    """Deprecated (removed in the next release): `weights.pipeline.weigh(importance, mask,
    ReshapeSettings(method=..., tau=...))`, which this calls. (B, L) weights of (B, L)
    importances over the (B, L) bool scored mask."""
    warnings.warn("compute_weights is deprecated and goes in the next release; use "
                  "oar_attrib.weights.pipeline.weigh(importance, mask, ReshapeSettings(method=..., "
                  "tau=...))", DeprecationWarning, stacklevel=2)
    settings = ReshapeSettings(method=method, tau=tau, beta=beta, w_min=w_min, rho=rho, weighting=weighting)
    return pipeline.weigh(importance, mask, settings)


def resolve_settings(settings: ReshapeSettings | None, overrides: dict, stacklevel: int = 3) -> ReshapeSettings:
    """`settings` (default: `ReshapeSettings()`) with the old flat keywords of `attribute`
    (`tau=`, `probe=`, ... any field but `method`) applied, each with a DeprecationWarning that
    names `settings=`; an unknown keyword is a TypeError, as Python gives."""
    unknown = sorted(set(overrides) - set(_SETTING_NAMES))
    if unknown:
        raise TypeError(f"attribute() got an unexpected keyword argument {unknown[0]!r}")
    settings = settings if settings is not None else ReshapeSettings()
    if overrides:
        given = ", ".join(f"{k}=..." for k in overrides)
        warnings.warn(f"attribute({given}) is deprecated and goes in the next release; pass "
                      f"settings=ReshapeSettings({given})", DeprecationWarning, stacklevel=stacklevel)
        settings = dataclasses.replace(settings, **overrides)
    return settings


def analysis_params(methods: Sequence[str], method_params: dict | None) -> dict[str, dict]:
    """Each method's keyword arguments in analysis: its registered `analysis_params` (OAR-G's 8
    noise draws) under the caller's own `method_params[method]`."""
    given = method_params or {}  # entries of methods not run are ignored (a shared budget map)
    return {m: method_spec(m).analysis_kwargs(given.get(m)) for m in methods}


def _trace(pair: EncodedPair, prompt, weighed: dict[str, Weighed], row: int, probe, record,
           advantage, n_rows: int):
    """The trace record of the batch's row `row` from each method's pipeline output."""
    s, e = pair.response_start, pair.length
    scores = {m: w.importances[row, s:e] for m, w in weighed.items()}
    weights = {m: w.weights[row, s:e] for m, w in weighed.items()}
    bonus = {m: w.bonus[row, s:e] for m, w in weighed.items()}
    seconds = {m: w.seconds / n_rows for m, w in weighed.items()}
    draws = {m: w.draws[:, row, s:e] for m, w in weighed.items() if w.draws is not None}
    return build_trace(pair, prompt, probe=probe, scores=scores, weights=weights,
                       advantage=advantage, params=record, timings=seconds, bonus=bonus,
                       draws=draws)


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


def _parts(n: int, batch_size: int, groups, correct, advantages) -> list[tuple[slice, GroupOutcomes | None]]:
    """The sub-batches of `n` rows (`_chunks`), each with its rows' `GroupOutcomes` (None
    without groups)."""
    ids = {g: i for i, g in enumerate(dict.fromkeys(groups or ()))}
    return [(slice(rows.start, rows.stop), None if groups is None else GroupOutcomes(
                group=torch.tensor([ids[groups[r]] for r in rows]),
                correct=torch.tensor([bool(correct[r]) for r in rows]),
                advantage=None if advantages is None else torch.tensor([float(advantages[r]) for r in rows])))
            for rows in _chunks(n, batch_size, groups)]


def _attribute_batch(model, tokenizer, prompts, responses, settings: ReshapeSettings, params: dict,
                     advantages, record: dict, chat, step_unit, encoded=None,
                     outcomes: GroupOutcomes | None = None, on_scored=None) -> list[TraceAttribution]:
    """The traces of one batch: encoded once (or `encoded` already), scored and weighed by every
    method of `params` (method -> keyword arguments) under `settings`, each trace carrying `record`;
    `outcomes`: the rows' groups and correctness, for the methods that compare a group's rollouts;
    `on_scored(method, rows)` after each method is done with the batch."""
    batch, pairs = encode_pairs(tokenizer, prompts, responses, answer_format=settings.answer_format,
                                answer_pattern=settings.answer_pattern, chat=chat, step_unit=step_unit,
                                encoded=encoded)
    batch = dataclasses.replace(batch, outcomes=outcomes)
    weighed = {}
    for m, p in params.items():
        weighed[m] = pipeline.score_and_weight(model, batch, for_method(settings, m), params=p, tokenizer=tokenizer)
        if on_scored is not None:
            on_scored(m, len(pairs))
    return [_trace(pair, prompts[row], weighed, row, settings.probe, record,
                   None if advantages is None else float(advantages[row]), len(pairs))
            for row, pair in enumerate(pairs)]


def _as_lists(prompts, responses, advantages, groups=None, correct=None) -> tuple[list, list]:
    """(prompts, responses) as lists of one entry per response, checked against each other and
    against the advantages, groups and correctness given."""
    if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], dict)):
        prompts = [prompts]
    if isinstance(responses, str):
        responses = [responses]
    if len(prompts) != len(responses):
        raise InputError(f"{len(prompts)} prompts but {len(responses)} responses; pass one per response")
    if advantages is not None and len(advantages) != len(responses):
        raise InputError(f"{len(advantages)} advantages for {len(responses)} responses")
    if (groups is None) != (correct is None) or (groups is not None and not len(groups) == len(correct) == len(responses)):
        raise InputError("groups and correct go together, one of each per response")
    return list(prompts), list(responses)


def attribute(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: str | Sequence,
              responses: str | Sequence[str],
              methods: Sequence[str] | None = None, settings: ReshapeSettings | None = None, *,
              method_params: dict[str, dict] | None = None, advantages: Sequence[float] | None = None,
              chat: bool | None = None, step_unit: str = "auto", batch_size: int = 16, progress: bool = False,
              groups: Sequence | None = None, correct: Sequence[bool] | None = None,
              encoded: Sequence[EncodedPair] | None = None,
              on_scored: Callable[[str, int], None] | None = None, **overrides) -> AttributionBatch:
    """Token importances, weights and credit metrics of each response.

    prompts, responses: one or B of each (a prompt is a string or a chat message list).
    methods: registered importance methods (`methods.available_methods()`); None: the
        registry's `default_methods("api")` (token OAR-P).
    settings: how importances are computed and become weights (`ReshapeSettings`: probe,
        tau, beta, w_min, weighting, rho, granularity, step_pool, answer_format,
        answer_pattern, seed, ...; its `method` is not read, `methods` are). The old flat
        keywords (`probe=`, `tau=`, ...) still work for one release, with a DeprecationWarning.
    method_params: keyword arguments per method, e.g. {"oar_g": {"n_noise": 4}}, over the
        method's analysis defaults (OAR-G: 8 noise draws); an OAR-P `mask` may name the
        tokenizer's "eos" or "unk" token (`methods.masks`).
    advantages: optional B sequence advantages A_i; adds token advantages A_i * w_t and the
        top-10% advantage mass per method.
    chat: wrap plain-string prompts in the chat template (None: when the tokenizer has one).
    step_unit: how reasoning splits into steps (`steps.step_spans`: line, paragraph,
        sentence, a regex; default auto: lines, or sentences of a one-line reasoning). Sets
        each trace's `steps` and the steps step-level methods (`oar_p_step`) perturb.
    batch_size: traces scored together; progress: a bar counting traces and scored positions.
    groups, correct: B group labels (a prompt's sampled responses share one, next to each
        other; never split across sub-batches) and whether each response is right, read by a
        method comparing a group's rollouts (`ktae`); GRAIL's filter reads `advantages`' sign.
    encoded: the pairs already encoded with this call's answer format, chat and step unit
        (`encoding.encode_pair`, as `oar attribute` judges each line): not tokenized again.
    on_scored: called as `on_scored(method, rows)` each time a method is done with a
        sub-batch of `rows` responses (a progress display finer than whole traces).
    Every trace's `params` is the settings record (`records.settings_record`). Responses whose
    answer span is not found get weight 1 everywhere and the flag `no_answer_span`; one whose
    answer starts right after an empty prompt is flagged `no_predicting_position`. Non-finite
    importances are flagged, never silently gated.
    """
    settings = resolve_settings(settings, overrides)
    methods = list(methods) if methods is not None else default_methods("api")
    prompts, responses = _as_lists(prompts, responses, advantages, groups, correct)
    parts = _parts(len(prompts), batch_size, groups, correct, advantages)  # a group is contiguous
    for method in methods:
        for_method(settings, method)  # checks every name before anything runs
    used = analysis_params(methods, method_params)
    record = settings_record(settings, methods, used, model=model, step_unit=step_unit, chat=chat)
    params = resolve_mask_names(used, tokenizer)  # "eos" / "unk" -> token ids
    out, positions = AttributionBatch(), 0  # scored positions so far, beside the traces
    with tqdm(total=len(prompts), desc="attribute", unit="trace", disable=not progress) as bar:
        for part, outcomes in parts:
            traces = _attribute_batch(model, tokenizer, prompts[part], responses[part], settings, params,
                                      None if advantages is None else advantages[part], record, chat, step_unit,
                                      None if encoded is None else encoded[part], outcomes, on_scored)
            out.extend(traces)
            bar.update(len(traces))
            positions += sum(sum(t.scored) for t in traces) if progress else 0  # shown only
            bar.set_postfix(positions=positions)
    return out
