"""The public entry point: `attribute(model, tokenizer, prompts, responses, methods=...)`.

Text -> segments -> importances (one registered method each) -> weights -> optional reshaped
advantages and credit metrics, per response. Importances are computed in sub-batches so that
progress shows and memory stays bounded; every method sees the same batch.
"""
from __future__ import annotations

import time
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .batch import ScoringBatch
from .errors import InputError, renamed_keyword
from .inputs import EncodedPair, encode_pairs
from .lm import eval_mode, model_device
from .methods import get_method, method_spec
from .probes import check_probe
from .steps import AUTO
from .traces import AttributionBatch, TraceAttribution, build_trace, scored_positions
from .weightings import WeightingParams, get_weighting

__all__ = ["AttributionBatch", "TraceAttribution", "attribute", "compute_weights"]  # records: traces


def compute_weights(method: str, importance: torch.Tensor, mask: torch.Tensor,
                    tau: float = 0.4, beta: float = 2.0, w_min: float = 0.1, *,
                    weighting: str | None = None, rho: float = 0.2) -> torch.Tensor:
    """(B, L) weights from (B, L) importances over the (B, L) bool scored mask, through
    `weighting` (default: the one `method` registered with; `weightings.available_weightings()`)."""
    fn = get_weighting(weighting or method_spec(method).weighting)
    return fn(importance, mask, WeightingParams(tau=tau, beta=beta, w_min=w_min, rho=rho))


def _score(model, tokenizer, batch: ScoringBatch, methods, probe, params, seed) -> tuple[dict, dict]:
    """Importances (B, L) float32 on CPU and seconds, per method."""
    scores, seconds = {}, {}
    for method in methods:
        spec = method_spec(method)
        kwargs = dict(params.get(method, {}))
        if spec.needs_tokenizer:
            kwargs.setdefault("tokenizer", tokenizer)
        generator = torch.Generator(device=model_device(model)).manual_seed(seed)
        start = time.perf_counter()
        scores[method] = spec.fn(model, batch, probe=probe, generator=generator, **kwargs).float().cpu()
        seconds[method] = time.perf_counter() - start
    return scores, seconds


def _trace(pair: EncodedPair, prompt, scores, seconds, row, probe, params, gating, advantage):
    """The trace record of the batch's row `row` (weights through the method's weighting;
    weight 1 where the method's scores on S are not finite)."""
    s, e = pair.response_start, pair.length
    scored = scored_positions(pair)
    row_scores = {m: v[row, s:e] for m, v in scores.items()}
    weights = {}
    for method, values in row_scores.items():
        if torch.isfinite(values[scored]).all():
            clean = torch.where(scored, values, torch.zeros_like(values))
            weights[method] = compute_weights(method, clean, scored, **gating)
        else:
            weights[method] = torch.ones_like(values)
    return build_trace(pair, prompt, probe=probe, scores=row_scores, weights=weights,
                       advantage=advantage, params={**gating, "methods": params}, timings=seconds)


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
    tau: float = 0.4,
    beta: float = 2.0,
    w_min: float = 0.1,
    method_params: dict[str, dict] | None = None,
    batch_size: int = 16,
    seed: int = 0,
    progress: bool = False,
    step_unit=AUTO,
    fmt: str | None = None,
    pattern=None,
    max_batch_tokens: int | None = None,
) -> AttributionBatch:
    """Token importances, weights and credit metrics of each response.

    prompts, responses: one or B of each (a prompt is a string or a chat message list).
    methods: registered importance methods (`methods.available_methods()`).
    probe: outcome probe, `lt`, `as_mean` or `as_joint` (METHOD.md section 3).
    answer_format, answer_pattern: where the final answer is (`spans.locate_answer`: auto,
        boxed, gsm8k, answer_is, regex with answer_pattern); OARConfig and `oar attribute
        --answer-format` use the same names. `fmt` and `pattern` are their old spellings.
    advantages: optional B sequence advantages A_i; adds token advantages A_i * w_t and the
        top-10% advantage mass per method.
    tau, beta, w_min: bi-level gating (METHOD.md section 6); w_min floors the suppression gate
        before the mass-preserving rescale, so a final weight can be below it.
    method_params: extra keyword arguments per method, e.g. {"oar_g": {"n_noise": 4}}.
    progress: a progress bar counting traces, with the scored positions so far.
    step_unit: how reasoning splits into steps (`steps.step_spans`: line, paragraph,
        sentence, a regex; default auto: lines, or sentences when the reasoning is one line,
        as the arithmetic world's is, so each `x=a+b=n.` clause is a step). Sets each trace's
        `steps` and the steps step-level methods (`oar_p_step`) perturb.
    max_batch_tokens: the token budget per forward of the methods that take one (OAR-P);
        None sizes it from the device's free memory (`budget.auto_batch_tokens`).
        `method_params[method]["max_batch_tokens"]` wins over it.
    Responses whose answer span is not found get weight 1 everywhere and the flag
    `no_answer_span`; one whose answer starts it after an empty prompt (no position predicts
    the answer) is treated the same, flagged `no_predicting_position`. Non-finite importances
    are flagged, never silently gated.
    """
    answer_format = renamed_keyword("fmt", fmt, "answer_format", answer_format, "auto")
    answer_pattern = renamed_keyword("pattern", pattern, "answer_pattern", answer_pattern, None)
    if isinstance(prompts, (str, dict)) or (prompts and isinstance(prompts[0], dict)):
        prompts = [prompts]
    if isinstance(responses, str):
        responses = [responses]
    if len(prompts) != len(responses):
        raise InputError(f"{len(prompts)} prompts but {len(responses)} responses; pass one per response")
    if advantages is not None and len(advantages) != len(responses):
        raise InputError(f"{len(advantages)} advantages for {len(responses)} responses")
    check_probe(probe)
    for method in methods:
        get_method(method)
    params, gating = method_params or {}, {"tau": tau, "beta": beta, "w_min": w_min}
    if max_batch_tokens is not None:
        params = {**params, **{m: {"max_batch_tokens": max_batch_tokens, **params.get(m, {})}
                               for m in methods if method_spec(m).token_budget}}
    out = AttributionBatch()
    starts = range(0, len(prompts), batch_size)
    bar = tqdm(total=len(prompts), desc="attribute", unit="trace", disable=not progress)
    positions = 0  # scored positions so far, beside the traces
    with eval_mode(model), bar:
        for start in starts:
            stop = start + batch_size
            batch, pairs = encode_pairs(tokenizer, prompts[start:stop], responses[start:stop],
                                        answer_format=answer_format, answer_pattern=answer_pattern, chat=chat,
                                        step_unit=step_unit)
            scores, seconds = _score(model, tokenizer, batch, methods, probe, params, seed + start)
            for row, pair in enumerate(pairs):
                adv = None if advantages is None else float(advantages[start + row])
                out.append(_trace(pair, prompts[start + row], scores,
                                  {m: t / len(pairs) for m, t in seconds.items()},
                                  row, probe, params, gating, adv))
            positions += sum(sum(t.scored) for t in out[-len(pairs):])
            bar.update(len(pairs))
            bar.set_postfix(positions=positions)
    return out
