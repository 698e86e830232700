"""Which OAR-P mask and probe best predict the model's own counterfactuals (issue 23)?

For each trace (a prompt, the model's own greedy response, an optional gold answer):
1. the counterfactual oracle (`instruments.data.oracle.counterfactual_oracle`) tests at most
   `cf_positions` scored positions (`choose_positions`: one per stratum, seeded): position t is
   causal when replacing y_t and regenerating the rest greedily changes the final answer
   (`instruments.data.recall.answer_key`). The replacement defaults to "resample" (a token other
   than y_t drawn from the model at t): an oracle that intervened with the pad token could not
   judge the pad mask, and on SmolLM2 the pad ends the turn (every position comes out causal).
2. token OAR-P (`methods.oar_p`) scores the same tested positions, and only them (the batch's
   scored mask is cut down to them: each position's importance does not depend on which
   others are scored), under every mask x probe. The probe `gold` is `as_joint` on the trace
   re-encoded with the gold answer in its answer span (`inputs.gold.with_gold_answer`): the
   drop of the correct answer's log-likelihood.
3. per cell: recall@|O| among the tested positions (`weights.metrics.recall_at_k`; the random
   expectation |O| / |tested| beside it) and Spearman's rho between the scores and the 0/1
   outcome (`weights.metrics.spearman`). A trace with no causal position has no recall, one
   where every or no position is causal (or the scores are constant) no rho.
`summarise_rows` gives each cell's mean over traces with 95% bootstrap intervals
(`analysis.stats.mean_ci`). One JSON row per trace (`trace_row`) keeps the tested positions,
the oracle's outcome and every cell's scores, so the table can be recomputed from the rows.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..defaults import PROBES
from ..errors import InputError
from ..inputs.encoding import encode_pair, pairs_to_batch
from ..inputs.gold import with_gold_answer
from ..inputs.segments import scored_set
from ..methods.masks import MASKS, TOKEN_NAMES, resolve_token_name
from ..methods.oar_p import oar_p
from ..methods.oar_p_step import oar_p_step
from ..weights.metrics import random_recall, recall_at_k, spearman
from ..instruments.data.oracle import choose_positions, counterfactual_oracle
from ..instruments.data.recall import REGENERATION_MARGIN, answer_key
from .stats import mean_ci

GOLD = "gold"  # the probe `as_joint` on the trace re-encoded with the gold answer
# The table's rows and columns: every OAR-P mask (the tokenizer's tokens after pad), and every
# probe of the model, then the gold one.
TABLE_MASKS: tuple[str, ...] = (MASKS[0], *TOKEN_NAMES, *MASKS[1:])
TABLE_PROBES: tuple[str, ...] = (*PROBES, GOLD)
REFERENCE = "pad/as_mean"  # the paper's mask with its best probe: differences are taken to it


def cell_name(mask: str, probe: str, step: bool = False) -> str:
    """"pad/as_mean" for token OAR-P, "pad/as_mean/step" for step OAR-P."""
    return f"{mask}/{probe}/step" if step else f"{mask}/{probe}"


def usable_masks(tokenizer, masks=TABLE_MASKS) -> dict[str, str | int]:
    """{name: the `mask` value oar_p takes} of the names the tokenizer allows ("eos" and "unk"
    resolve to its token ids; one it lacks is left out)."""
    out = {}
    for name in masks:
        try:
            out[name] = resolve_token_name(name, tokenizer)
        except InputError:
            if name not in ("eos", "unk"):
                raise
    return out


def only_positions(batch, positions) -> object:
    """`batch` (one row) with only `positions` (indices into the row) scored."""
    scored = torch.zeros_like(batch.scored_mask)
    scored[0, list(positions)] = True
    if (scored & ~batch.scored_mask).any():
        raise InputError("positions to test must be scored positions of the trace")
    step_ids = None if batch.step_ids is None else torch.where(scored, batch.step_ids, -1)
    return dataclasses.replace(batch, scored_mask=scored, step_ids=step_ids)


def cell_metrics(scores, causal) -> dict:
    """{"recall", "spearman", "expected"} of (N,) scores against the (N,) bool outcome."""
    scores, causal = np.asarray(scores, np.float64), np.asarray(causal, bool)
    if not causal.any() or not np.isfinite(scores).all():
        recall = float("nan")
    else:
        recall = float(recall_at_k(scores, causal))
    return {"recall": recall, "spearman": spearman(scores, causal.astype(np.float64)),
            "expected": float(random_recall(causal)) if causal.any() else float("nan")}


def _scores(model, batch, mask, probe, seed, max_batch_tokens, step) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)  # mask="resample": the same draws in every probe
    method = oar_p_step if step else oar_p
    return method(model, batch, probe=probe, mask=mask, generator=gen,
                  max_batch_tokens=max_batch_tokens)[0]


def score_cells(model, batch, gold_batch, columns, masks: dict, probes, seed: int = 0,
                max_batch_tokens: int | None = None, step: bool = False) -> tuple[dict, dict]:
    """({cell: [score per column]}, {cell: error}) of every mask x probe on one-row batches
    (`gold_batch`: the gold re-encoding, or None; `columns`: the tested row indices); step
    OAR-P (`methods.oar_p_step`, a token gets its step's score) when `step`. Two mask names
    for the same token id (SmolLM2's pad is its eos) are computed once. A cell that cannot be
    computed (mask="delete" next to the answer) is left out with its error."""
    scores, errors, done = {}, {}, {}
    for name, mask in masks.items():
        for probe in probes:
            use = gold_batch if probe == GOLD else batch
            if use is None:
                continue
            key = (use.pad_token_id if mask == "pad" else mask, probe)  # "pad" is an id too
            if key not in done:
                try:
                    row = _scores(model, use, mask, "as_joint" if probe == GOLD else probe, seed,
                                  max_batch_tokens, step)
                    done[key] = [float(row[c]) for c in columns]
                except InputError as err:
                    done[key] = str(err)
            value = done[key]
            (errors if isinstance(value, str) else scores)[cell_name(name, probe, step)] = value
    return scores, errors


def trace_row(model, tokenizer, prompt, response: str, gold: str | None = None, *,
              masks: dict, probes=TABLE_PROBES, cf_positions: int = 16, seed: int = 0,
              replacement="resample", max_batch_tokens: int | None = None,
              step: bool = False) -> dict:
    """One trace's JSON row: {"status", "positions" (tested, into the response), "causal"
    (0/1 each), "scores" {cell: [score each]}, "errors", "metrics" {cell: cell_metrics}}.
    status "no_answer_span" (nothing else) when the answer is not found; the gold probe is
    left out without a gold answer or when the gold text does not fit the answer format.
    step: step OAR-P's cells too, on the whole steps (every scored position, read at the
    tested ones)."""
    pair = encode_pair(tokenizer, prompt, response)
    if not pair.span_found or pair.empty_reasoning or answer_key(pair.text) is None:
        return {"status": "no_answer_span"}
    scored = [i for i, s in enumerate(scored_set(pair.labels, pair.span_found)) if s]
    tested = choose_positions(scored, cf_positions, seed)
    causal = counterfactual_oracle(
        model, tokenizer, pair.prompt_ids, pair.response_ids, tested, answer_key,
        # seed + 1: the oracle's "resample" draws are not those of the mask "resample"
        replacement=replacement, max_positions=cf_positions, seed=seed + 1, batch_size=len(tested),
        max_new_tokens=len(pair.response_ids) + REGENERATION_MARGIN)
    columns = [pair.response_start + t for t in tested]
    full = pairs_to_batch([pair], tokenizer.pad_token_id)
    gold_full, gold_error = None, None
    if gold is not None and GOLD in probes:
        try:
            gold_full = pairs_to_batch([with_gold_answer(tokenizer, pair, gold)], tokenizer.pad_token_id)
        except InputError as err:
            gold_error = str(err)
    gold_batch = None if gold_full is None else only_positions(gold_full, columns)
    scores, errors = score_cells(model, only_positions(full, columns), gold_batch, columns, masks,
                                 probes, seed, max_batch_tokens)
    if step:
        more = score_cells(model, full, gold_full, columns, masks, probes, seed, max_batch_tokens, True)
        scores, errors = scores | more[0], errors | more[1]
    if gold_error:
        errors[GOLD] = gold_error
    outcome = [bool(causal[t]) for t in tested]
    return {"status": "scored", "positions": tested, "causal": [int(c) for c in outcome],
            "scores": scores, "errors": errors,
            "metrics": {cell: cell_metrics(s, outcome) for cell, s in scores.items()}}


def summarise_rows(rows: list[dict], seed: int = 0, reference: str = REFERENCE) -> dict:
    """{"cells": {cell: {"recall", "spearman", "expected": mean_ci, "minus_reference": {"recall",
    "spearman": mean_ci of the per-trace difference to the cell `reference`}}}, "reference",
    "n_traces", "n_scored", "positions_tested", "causal"} over the scored rows. The paired
    difference is over the traces where both cells are defined: cells share their traces, so
    it resolves differences that the cells' own intervals, which overlap, do not."""
    scored = [r for r in rows if r.get("status") == "scored"]
    cells = sorted({c for r in scored for c in r["metrics"]}, key=_cell_order)
    out = {}
    for cell in cells:
        have = [r["metrics"][cell] for r in scored if cell in r["metrics"]]
        out[cell] = {stat: mean_ci([m[stat] for m in have], seed, stat)
                     for stat in ("recall", "spearman", "expected")}
        pairs = [(r["metrics"][cell], r["metrics"][reference]) for r in scored
                 if cell in r["metrics"] and reference in r["metrics"]]
        out[cell]["minus_reference"] = {
            stat: mean_ci([a[stat] - b[stat] for a, b in pairs], seed, stat)
            for stat in ("recall", "spearman")}
    return {"cells": out, "reference": reference, "n_traces": len(rows), "n_scored": len(scored),
            "positions_tested": sum(len(r["positions"]) for r in scored),
            "causal": sum(sum(r["causal"]) for r in scored)}


def _cell_order(cell: str):
    mask, probe, *step = cell.split("/")
    return (bool(step), TABLE_MASKS.index(mask) if mask in TABLE_MASKS else len(TABLE_MASKS), mask,
            TABLE_PROBES.index(probe) if probe in TABLE_PROBES else len(TABLE_PROBES))


def markdown_table(summary: dict, stat: str = "recall", step: bool = False,
                   paired: bool = False) -> str:
    """A mask x probe markdown table of `stat` ("recall" or "spearman"): mean [95% CI] (n);
    of token or step OAR-P (`step`); `paired`: the difference to the reference cell instead."""
    cells = {c: v for c, v in summary["cells"].items() if (c.count("/") == 2) == step}
    masks = list(dict.fromkeys(c.split("/")[0] for c in cells))
    probes = [p for p in TABLE_PROBES if any(c.split("/")[1] == p for c in cells)]
    lines = ["| mask | " + " | ".join(probes) + " |", "|---" * (len(probes) + 1) + "|"]
    for mask in masks:
        got = [cells.get(cell_name(mask, p, step), {}) for p in probes]
        row = [_fmt((g.get("minus_reference", {}) if paired else g).get(stat), stat) for g in got]
        lines.append(f"| {mask} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _fmt(stats: dict | None, stat: str) -> str:
    if not stats or stats[stat] is None:
        return "n/a"
    value, (lo, hi) = stats[stat], stats["ci95"]
    return f"{value:.2f} [{lo:.2f}, {hi:.2f}] ({stats['n']})"
