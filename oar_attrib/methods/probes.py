"""Outcome probes (METHOD.md section 3): what the model believes about its final answer.

The model is causal: the logits at position q_k = a_k - 1 predict the answer token a_k. Answer
spans have a different length K per row, so every method reads them through `ProbeSites`:
padded (B, K) index tensors plus a validity mask, where column 0 is always the first answer
token of the row. The probe functions take the logits already gathered at those sites,
(B, K, V), so OAR-P, OAR-G, IG and GRAIL share one definition of each probe.

- `lt`:       log P = log_softmax(z_{q_1})                      -> (B, V)
- `as_mean`:  log P = log_softmax(mean_k z_{q_k})               -> (B, V)
- `as_joint`: phi   = mean_k log p(a_k | prefix)                -> (B,)

All softmax / KL arithmetic is float32, whatever the dtype of the logits.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models.budget import backward_tokens
from ..defaults import PROBES
from ..inputs.batch import ScoringBatch
from ..errors import unknown_name
from ..models.lm import model_device

DISTRIBUTION_PROBES: frozenset[str] = frozenset({"lt", "as_mean"})


def check_probe(probe: str) -> str:
    """Return `probe` if it is a known probe name, else raise `UnknownNameError`."""
    if probe not in PROBES:
        raise unknown_name("probe", probe, PROBES)
    return probe


@dataclass(frozen=True)
class ProbeSites:
    """Where each row's probe reads the logits, padded to the longest answer span.

    positions: (B, K) long, q_k = a_k - 1 in ascending order; padding repeats column 0.
    targets:   (B, K) long, the answer token ids a_k; padding is 0.
    valid:     (B, K) bool, True on real answer tokens. A row with no answer span is all
               False (its probe values are meaningless and must be masked by the caller).
    """

    positions: torch.Tensor
    targets: torch.Tensor
    valid: torch.Tensor

    @property
    def has_answer(self) -> torch.Tensor:
        """(B,) bool."""
        return self.valid[:, 0]

    @property
    def last(self) -> torch.Tensor:
        """(B,) long: the last probe position q_K of each row (0 on rows without a span)."""
        masked = torch.where(self.valid, self.positions, torch.zeros_like(self.positions))
        return masked.max(dim=1).values

    def select(self, rows: torch.Tensor) -> "ProbeSites":
        """The sites of the given rows (a (R,) long index, repeats allowed)."""
        return ProbeSites(self.positions[rows], self.targets[rows], self.valid[rows])

    def shifted(self, offset: torch.Tensor) -> "ProbeSites":
        """Sites with `offset` (B,) subtracted from the positions: indices into a window
        that starts at absolute position `offset`."""
        pos = self.positions - offset.to(self.positions)[:, None]
        return ProbeSites(pos, self.targets, self.valid)


def probe_sites(batch: ScoringBatch) -> ProbeSites:
    """The probe sites q_k = a_k - 1 and answer ids a_k of every row of `batch`."""
    answer_pos, valid = padded_positions(batch.answer_mask)  # (B, K) each
    targets = torch.where(valid, batch.input_ids.gather(1, answer_pos), 0)
    # ScoringBatch guarantees a_k >= 1; the clamp only keeps rows without a span in range.
    return ProbeSites((answer_pos - 1).clamp_min(0), targets, valid)


def padded_positions(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The True positions of each row of `mask` (B, L), ascending, padded to the longest row.

    Returns (positions, valid), (B, N) each with N >= 1: padding repeats the row's first
    position (0 on an empty row) so that every index is in range.
    """
    n_rows, width = mask.shape
    n_max = max(int(mask.sum(dim=1).max().item()) if n_rows else 0, 1)
    idx = torch.arange(width, device=mask.device).expand(n_rows, width)
    order = torch.where(mask, idx, idx + width).sort(dim=1).values[:, :n_max]  # (B, N)
    valid = order < width
    first = torch.where(valid[:, :1], order[:, :1], torch.zeros_like(order[:, :1]))
    return torch.where(valid, order, first), valid


def probe_values(logits: torch.Tensor, sites: ProbeSites, probe: str) -> torch.Tensor:
    """The probe value of each row from the logits at its sites.

    logits: (N, K, V) any float dtype, the logits at `sites.positions` (any padding column
            may hold anything finite or not: it is masked out).
    Returns (N, V) float32 log-probabilities for `lt` / `as_mean`, (N,) float32 phi for
    `as_joint`. Differentiable, so the gradient methods use it as their target.
    """
    check_probe(probe)
    z = logits.float()  # (N, K, V)
    valid = sites.valid.to(z.device)
    if probe == "lt":
        return torch.log_softmax(z[:, 0], dim=-1)  # (N, V)
    weights = valid.float()  # (N, K)
    count = weights.sum(dim=1).clamp_min(1.0)  # (N,)
    if probe == "as_mean":
        # where(), not a product: a NaN or inf in a padding column must not leak in.
        z_valid = torch.where(valid[..., None], z, torch.zeros((), device=z.device))
        mean = z_valid.sum(dim=1) / count[:, None]  # (N, V)
        return torch.log_softmax(mean, dim=-1)
    logp = torch.log_softmax(z, dim=-1)  # (N, K, V)
    picked = logp.gather(-1, sites.targets.to(z.device)[..., None]).squeeze(-1)  # (N, K)
    picked = torch.where(valid, picked, torch.zeros((), device=z.device))
    return picked.sum(dim=1) / count  # (N,)


def probe_divergence(clean: torch.Tensor, perturbed: torch.Tensor, probe: str) -> torch.Tensor:
    """How far the probe moved, signed and unclamped: the differentiable objective of OAR-G.

    clean, perturbed: (N, V) log-probabilities for `lt` / `as_mean`, (N,) phi for `as_joint`
    (`clean` may be (1, V) / (1,) and broadcast).
    Returns (N,) float32: KL(P || P') for the distributions, phi - phi' for `as_joint`.
    """
    check_probe(probe)
    clean, perturbed = clean.float(), perturbed.float()
    if probe == "as_joint":
        return clean - perturbed
    p = clean.exp()
    # 0 * log 0 = 0 for impossible tokens; a NaN p still propagates (NaN == 0 is False).
    terms = torch.where(p == 0, torch.zeros((), device=p.device), p * (clean - perturbed))
    return terms.sum(dim=-1)


def probe_importance(clean: torch.Tensor, perturbed: torch.Tensor, probe: str) -> torch.Tensor:
    """OAR-P's importance of a perturbation, >= 0 (NaN in, NaN out).

    Shapes as `probe_divergence`. Returns (N,) float32: KL(P || P') for `lt` / `as_mean`,
    max(phi - phi', 0) for `as_joint`. Rounding can make the KL of two near-identical
    distributions a hair negative; it is clamped to 0 too.
    """
    return probe_divergence(clean, perturbed, probe).clamp_min(0.0)


def backward_budget(model, work: ScoringBatch, max_batch_tokens: int | None) -> int:
    """`max_batch_tokens`, or (None) the tokens of one forward with backward over `work`'s rows
    (on the model's device) with their probe sites, from the device's memory bound
    (`budget.backward_tokens`): the budget of OAR-G, GRAIL and IG."""
    if max_batch_tokens is not None:
        return max_batch_tokens
    width = int(probe_sites(work).valid.sum(dim=1).max()) if work.input_ids.numel() else 1
    return backward_tokens(model, model_device(model), work.input_ids.shape[1], width)
