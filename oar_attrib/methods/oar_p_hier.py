"""Hierarchical OAR-P: step OAR-P first, then exact token OAR-P inside the steps that matter.

Per row, every step is perturbed once (`oar_p_step`); the top steps are chosen by their step
importance, either the `top_steps` largest or, with `top_mass`, the fewest largest that carry
that share of the row's summed step importance; every reachable scored token of a chosen step
is then perturbed alone (`oar_p`). A token of a chosen step gets its exact token importance
(equal to token OAR-P's). A token of another step gets its step's importance rescaled to the
token scale of the row (METHOD.md section 4, "Hierarchical OAR-P"):

    I_t = c * I_k(t),   c = sum_{u chosen} I_u / sum_{u chosen} I_k(u)

the mean token importance per unit of step importance over the chosen tokens, so that the
bi-level gate's quantile over the mix of measured and step-level scores stays inside the
distribution (zeros would pull the tau-quantile to 0 whenever the unchosen tokens are a tau
share of the row, and the gate would boost only). Tokens in no step get 0, as in `oar_p_step`.

Both stages run in one engine pass (`perturb`): one clean pass per row group, whose cache
serves the step copies and then the token copies, planned and packed by the same engine.
`oar_p_hier_reference` is the definition by brute force: the step and token references in
turn, with the same choice and fill (`choose_steps`, `fill_steps`).
"""
from __future__ import annotations

import torch

from ..defaults import PROBE
from ..errors import InputError
from ..inputs.batch import ScoringBatch
from .oar_p_step import step_units
from .perturb import RowGroup, masked_reference, perturb, reachable_positions, unit_anchors
from .probes import check_probe, probe_sites
from .knobs import OarPHierKnobs
from .registry import register_method

_SHARE_TOLERANCE = 1e-6  # relative; float32 step importances summed in float64


def check_choice(top_steps: int, top_mass: float | None) -> None:
    """A one-line InputError unless `top_steps` is an int >= 1 and `top_mass` None or in (0, 1]."""
    if not isinstance(top_steps, int) or isinstance(top_steps, bool) or top_steps < 1:
        raise InputError(f"top_steps must be an integer >= 1, got {top_steps!r}")
    if top_mass is not None and not (isinstance(top_mass, (int, float)) and 0 < top_mass <= 1):
        raise InputError(f"top_mass is a share of the row's step importance and must be in "
                         f"(0, 1], got {top_mass!r}")


def choose_steps(step_scores: torch.Tensor, steps: torch.Tensor, top_steps: int = OarPHierKnobs.top_steps,
                 top_mass: float | None = OarPHierKnobs.top_mass) -> torch.Tensor:
    """(B, L) bool: the positions of each row's chosen steps.

    step_scores: (B, L) float, each step's importance on its positions (`oar_p_step`);
    steps: (B, L) long step ids, -1 outside steps. By count: the `top_steps` largest steps
    (ties: the earlier step first). By mass (`top_mass` given): the fewest largest steps whose
    importances sum to at least top_mass of the row's total; none when the total is 0.
    A NaN step importance sorts first (the row is flagged non-finite downstream anyway).
    """
    anchors = unit_anchors(steps)  # (B, L)
    chosen = torch.zeros(steps.shape, dtype=torch.bool, device=steps.device)
    for row in range(steps.shape[0]):
        ids = steps[row, anchors[row]]  # (S,) in order
        values = step_scores[row, anchors[row]].double().tolist()
        order = sorted(range(len(values)),
                       key=lambda i: (-values[i] if values[i] == values[i] else -float("inf"), i))
        if top_mass is None:
            keep = order[:top_steps]
        else:
            total = sum(values[i] for i in order)
            running, keep = 0.0, []
            for i in order:  # the share reached within float32 rounding counts as reached
                if not total > 0 or running >= top_mass * total * (1 - _SHARE_TOLERANCE):
                    break
                keep.append(i)
                running += values[i]
        chosen[row] = torch.isin(steps[row], ids[keep])
    return chosen


def fill_steps(step_scores: torch.Tensor, token_scores: torch.Tensor, chosen: torch.Tensor,
               steps: torch.Tensor) -> torch.Tensor:
    """(B, L) float32 hierarchical importances (module docstring): `token_scores` on the
    `chosen` positions, c * `step_scores` on the other positions of a step, 0 elsewhere.

    step_scores, token_scores: (B, L) float; chosen: (B, L) bool; steps: (B, L) long, -1
    outside steps. c (per row) is 0 when the chosen steps' importances sum to 0.
    """
    step_scores, token_scores = step_scores.float(), token_scores.float()
    zero = torch.zeros((), device=step_scores.device)
    measured = torch.where(chosen, token_scores, zero).sum(dim=1, keepdim=True)  # (B, 1)
    level = torch.where(chosen, step_scores, zero).sum(dim=1, keepdim=True)
    scale = torch.where(level > 0, measured / torch.where(level > 0, level, 1.0), zero)
    rest = torch.where(steps >= 0, step_scores * scale, zero)
    return torch.where(chosen, token_scores, rest)


def _token_units_in(chosen: torch.Tensor) -> torch.Tensor:
    """(B, L) long: each chosen position its own unit (its index), -1 elsewhere."""
    positions = torch.arange(chosen.shape[1], device=chosen.device).expand_as(chosen)
    return torch.where(chosen, positions, -1)


def _copy_generator(generator):
    """A copy of `generator` (one torch.Generator or a list of them) at the same state, or None."""
    if generator is None:
        return None
    if isinstance(generator, (list, tuple)):
        return [_copy_generator(g) for g in generator]
    copy = torch.Generator(device=generator.device)
    copy.set_state(generator.get_state())
    return copy


def oar_p_hier_reference(model, batch: ScoringBatch, probe: str = PROBE, *,
                         top_steps: int = OarPHierKnobs.top_steps, top_mass: float | None = OarPHierKnobs.top_mass,
                         mask=OarPHierKnobs.mask, generator=None) -> torch.Tensor:
    """Hierarchical OAR-P by brute force: `oar_p_step_reference`, the choice of steps, then one
    full forward per token of the chosen steps (`mask`, `generator` as for `oar_p_reference`;
    both stages draw the same "resample" tokens, as the fast engine's one draw does).

    batch: B rows of width L with step_ids. Returns (B, L) float32 on the batch's device.
    """
    check_probe(probe)
    check_choice(top_steps, top_mass)
    steps = step_units(batch, reachable_positions(batch, probe_sites(batch)))
    again = _copy_generator(generator)
    step_scores = masked_reference(model, batch, steps, probe, mask=mask, generator=generator)
    chosen = choose_steps(step_scores, steps, top_steps, top_mass)
    token_scores = masked_reference(model, batch, _token_units_in(chosen), probe, mask=mask,
                                    generator=again)
    return fill_steps(step_scores, token_scores, chosen, steps)


# random: mask="resample" draws; overhead_tokens and packing group the same copies differently
@register_method("oar_p_hier", token_budget=True, random=True, speed_params=("overhead_tokens", "packing"),
                 knobs=OarPHierKnobs, defaults=("reading",), listed=4)
def oar_p_hier(model, batch: ScoringBatch, *, probe: str = PROBE, top_steps: int = OarPHierKnobs.top_steps,
               top_mass: float | None = OarPHierKnobs.top_mass, max_batch_tokens: int | None = None,
               generator: torch.Generator | None = None, progress: bool = False,
               overhead_tokens: int | None = None, packing: str = "auto",
               mask=OarPHierKnobs.mask) -> torch.Tensor:
    """Hierarchical OAR-P, equal to `oar_p_hier_reference` up to float rounding.

    batch: B rows of width L with step_ids (`encode_pairs` sets them).
    top_steps: the steps of each row whose tokens are scored exactly, by count.
    top_mass: when given (in (0, 1]), the steps are chosen by mass instead: the fewest largest
        steps carrying that share of the row's summed step importance.
    max_batch_tokens, generator, progress, overhead_tokens, packing, mask: as for `oar_p`.
    Returns (B, L) float32 on the batch's device: token OAR-P's importances on the chosen
    steps' tokens, the rescaled step importance on the other steps' tokens (module
    docstring), 0 elsewhere.
    """
    check_choice(top_steps, top_mass)
    step_units(batch, batch.scored_mask)  # no steps: refused before any model call

    def score_group(group: RowGroup) -> torch.Tensor:
        step_scores = group.score(group.units)  # (G, W), on the group's one clean pass
        chosen = choose_steps(step_scores, group.units, top_steps, top_mass)
        token_scores = group.score(_token_units_in(chosen))
        return fill_steps(step_scores, token_scores, chosen, group.units)

    return perturb(model, batch, step_units, score_group, probe=probe,
                   max_batch_tokens=max_batch_tokens, generator=generator, progress=progress,
                   overhead_tokens=overhead_tokens, packing=packing, mask=mask)
