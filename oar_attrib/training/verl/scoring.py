"""Importances of a verl batch, computed where verl's policy is (METHOD.md 4, 7).

verl's driver holds no model: the policy is the actor worker group, whose `compute_log_prob`
returns each token's log-probability under it (and, with the old log-probabilities, each
response token's entropy). Two methods need nothing more:

- `entropy` / `entropy_reasoning`: H_t is the entropy verl's actor already computed for the
  old log-probabilities, response token t's next-token distribution (no extra pass);
- `oar_p_step` with the `as_joint` probe: phi = mean_k log p(a_k | prefix) is the answer
  tokens' own log-probabilities, so each perturbed copy (every reachable scored token of one
  step set to the pad token, the units and mask of `methods.oar_p_step`) is one row of
  `compute_log_prob`, as is the clean row; I_k = max(phi - phi^(k), 0) (`probe_importance`).

`policy_scorer` hands these to the one weights pipeline as its scorer
(`weights.pipeline.score_and_weight`), which finds the rows' positions and gates them exactly
as for a model in this process. Nothing here imports verl: `Policy` is a plain callable that
`verl.actor` builds from the worker group and tests build from a model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from oar_attrib.inputs.batch import ScoringBatch
from oar_attrib.methods import method_spec
from oar_attrib.methods.oar_p_step import step_units
from oar_attrib.methods.perturb import reachable_positions
from oar_attrib.methods.probes import ProbeSites, probe_importance, probe_sites
from oar_attrib.weights.pipeline import Scorer
from oar_attrib.weights.settings import ReshapeSettings

# policy(rows, ids) -> (N, W) float32, W >= the longest copy: column i of copy n holds
# log p(ids[n][i + 1] | ids[n][:i + 1]) under the policy at temperature 1. rows[n] is the
# batch row copy n was made from (the same length and positions); columns past a copy's last
# token are never read.
Policy = Callable[[list[int], list[list[int]]], torch.Tensor]
JOINT = "as_joint"


@dataclass(frozen=True)
class StepCopies:
    """The rows `compute_log_prob` scores for step OAR-P: per row, its clean copy (unit -1)
    and one copy per step with the step's reachable scored positions set to the pad id."""

    rows: list[int]  # (N,) the batch row of each copy
    units: list[int]  # (N,) the step each copy masks, -1 for the clean copy
    ids: list[list[int]]  # N token id lists, each as long as its row


def step_units_of(batch: ScoringBatch) -> torch.Tensor:
    """(B, L) long: `methods.oar_p_step`'s units, the step of each scored position of a row with
    a span up to its last probe position, -1 elsewhere."""
    return step_units(batch, reachable_positions(batch, probe_sites(batch)))


def step_copies(batch: ScoringBatch, units: torch.Tensor, rows: list[int]) -> StepCopies:
    """The copies of the listed rows that have a step among `units` (B, L) (`step_units_of`)."""
    out = StepCopies([], [], [])
    for row in rows:
        steps = sorted(set(units[row].tolist()) - {-1})
        clean = batch.input_ids[row, : int(batch.lengths[row])]
        for unit in [-1, *steps] if steps else []:
            ids = clean if unit < 0 else torch.where(units[row, : len(clean)] == unit,
                                                     batch.pad_token_id, clean)
            out.rows.append(row)
            out.units.append(unit)
            out.ids.append(ids.tolist())
    return out


def joint_phi(logprobs: torch.Tensor, sites: ProbeSites) -> torch.Tensor:
    """phi = mean_k log p(a_k | prefix) of each copy (the `as_joint` probe).

    logprobs: (N, W) as a `Policy` returns them; sites: (N, K) the probe sites of each copy's
    row (q_k = a_k - 1: the column that holds log p(a_k | prefix)). Returns (N,) float32."""
    picked = logprobs.float().gather(1, sites.positions.to(logprobs.device))  # (N, K)
    valid = sites.valid.to(logprobs.device)
    picked = torch.where(valid, picked, torch.zeros((), device=logprobs.device))
    return picked.sum(dim=1) / valid.sum(dim=1).clamp_min(1)


def oar_p_step_importances(batch: ScoringBatch, policy: Policy, rows: list[int],
                           rows_per_call: int) -> torch.Tensor:
    """Step-level OAR-P with the `as_joint` probe and the pad mask, the numbers of
    `methods.oar_p_step(model, batch, probe="as_joint")` up to float rounding, from the
    policy's log-probabilities of at most `rows_per_call` copies a call.

    Returns (B, L) float32 on CPU: each step's I_k on its reachable scored tokens, 0 elsewhere
    and on rows not listed."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    sites, units = probe_sites(batch), step_units_of(batch)
    copies = step_copies(batch, units, rows)
    phi = []  # (N,) over the calls
    for start in range(0, len(copies.rows), rows_per_call):
        which = copies.rows[start:start + rows_per_call]
        logprobs = policy(which, copies.ids[start:start + rows_per_call]).cpu()
        phi.append(joint_phi(logprobs, sites.select(torch.tensor(which))))
    clean: dict[int, torch.Tensor] = {}
    for row, unit, value in zip(copies.rows, copies.units, torch.cat(phi) if phi else []):
        if unit < 0:  # the clean copy comes first in its row's copies
            clean[row] = value
            continue
        importance = probe_importance(clean[row][None], value[None], JOINT)[0]
        out[row] = torch.where(units[row] == unit, importance, out[row])
    return out


def entropy_importances(batch: ScoringBatch, entropies: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """H_t of every response token of the listed rows, from verl's entropies.

    entropies: (B, T) float, response-aligned as verl stores them (column j: the entropy of the
    distribution that chose response token j). Returns (B, L) float32 on CPU, 0 off the
    responses and on rows not listed (the pipeline keeps the method's own positions: every
    response token, or S)."""
    out = torch.zeros(batch.input_ids.shape, dtype=torch.float32)
    responses = batch.responses()
    for row in rows:
        at = responses[row].nonzero().flatten()
        out[row, at] = entropies[row, : len(at)].float().cpu()
    out[:, 0] = 0.0  # position 0 has no preceding logits (as `methods.baselines.entropy`)
    return out


def policy_scorer(policy: Policy | None, entropies: torch.Tensor | None, rows_per_call: int) -> Scorer:
    """The scorer (`weights.pipeline.Scorer`) of the methods that run on verl: entropies from
    `entropies` (B, T), step OAR-P through `policy`."""

    def scorer(batch: ScoringBatch, settings: ReshapeSettings, rows: list[int]) -> torch.Tensor:
        name = method_spec(settings.method).name
        if name in ("entropy", "entropy_reasoning") and entropies is not None:
            return entropy_importances(batch, entropies, rows)
        if name == "oar_p_step" and settings.probe == JOINT and policy is not None:
            return oar_p_step_importances(batch, policy, rows, rows_per_call)
        raise ValueError(f"method {name!r} with probe {settings.probe!r} has no scorer on verl here")

    return scorer
