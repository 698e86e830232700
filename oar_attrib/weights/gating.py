"""Bi-level gating with mass preservation (METHOD.md section 6), and the baselines' reshapers.

Importances over the scored positions S of each row become weights w_t with mean 1 over S
(so the advantage mass of the sequence is unchanged) and w = 1 outside S. The token
advantage is A_i * w_t (`reshape_advantages`). All arithmetic is float32.
"""
from __future__ import annotations

import math

import torch

from ..errors import InputError
from ..defaults import BETA, RHO, TAU, W_MIN

# Guards denominators in branches that torch.where evaluates but then discards.
_TINY = 1e-12


def _as_rows(values: torch.Tensor, mask: torch.Tensor | None, name: str):
    """(B, T) float32 values, (B, T) bool mask, and whether the input was 1-D."""
    if not isinstance(values, torch.Tensor):
        values = torch.as_tensor(values)
    if values.dim() not in (1, 2):
        raise InputError(f"{name} must be (T,) or (B, T), got shape {tuple(values.shape)}")
    if mask is None:
        mask = torch.ones(values.shape, dtype=torch.bool, device=values.device)
    mask = torch.as_tensor(mask, device=values.device)
    if mask.shape != values.shape:
        raise InputError(
            f"mask must have the shape of {name} {tuple(values.shape)}, got {tuple(mask.shape)}"
        )
    if mask.is_floating_point():
        raise InputError(f"mask must be bool (True on scored positions), got {mask.dtype}")
    one_d = values.dim() == 1
    values, mask = values.float(), mask.bool()
    if one_d:
        values, mask = values.unsqueeze(0), mask.unsqueeze(0)
    return values, mask, one_d


def _check_scored(values: torch.Tensor, mask: torch.Tensor, name: str) -> None:
    """Raise naming the first row whose scored values are not finite or negative."""
    bad_finite = (mask & ~torch.isfinite(values)).any(dim=1)
    if bad_finite.any():
        rows = bad_finite.nonzero().flatten().tolist()
        raise InputError(
            f"{name} has NaN or inf at scored positions of row(s) {rows[:10]}; "
            "the importance method failed on them: check its inputs (or drop those rows)"
        )
    bad_sign = (mask & (values < 0)).any(dim=1)
    if bad_sign.any():
        row = int(bad_sign.nonzero()[0])
        low = float(values[row][mask[row]].min())
        raise InputError(
            f"{name} must be >= 0 on scored positions, row {row} has {low:.3g}; "
            "clamp the scores at 0 (or take their absolute value) first"
        )


def _check_gating_args(tau: float, beta: float, w_min: float) -> None:
    if not 0.0 <= tau <= 1.0:
        raise InputError(f"tau is a quantile level and must be in [0, 1], got {tau}")
    if not (beta >= 0.0 and math.isfinite(beta)):
        raise InputError(f"beta (the boost strength) must be finite and >= 0, got {beta}")
    if not 0.0 <= w_min <= 1.0:
        raise InputError(f"w_min (the suppression floor) must be in [0, 1], got {w_min}")


def normalise_importance(importance: torch.Tensor, mask: torch.Tensor):
    """Steps 1-2: I^ = min-max normalised log1p(I) over each row's scored positions.

    importance, mask: (B, T). Returns I^ (B, T) float32 in [0, 1] on the mask (0 elsewhere)
    and flat (B,) bool: rows whose max == min (or with no scored position), weight 1.
    """
    x = torch.log1p(importance.float().clamp_min(0))  # clamp: positions off the mask only
    inf = torch.tensor(float("inf"), device=x.device)
    lo = torch.where(mask, x, inf).amin(dim=1, keepdim=True)  # (B, 1)
    hi = torch.where(mask, x, -inf).amax(dim=1, keepdim=True)
    spread = hi - lo
    flat = ~(spread > 0).squeeze(1)  # also True for an empty row (spread = -inf)
    ihat = (x - lo) / torch.where(spread > 0, spread, torch.ones_like(spread))
    ihat = torch.where(mask & ~flat.unsqueeze(1), ihat, torch.zeros_like(ihat))
    return ihat, flat


def masked_quantile(values: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """(B,) q-quantile of each row's masked values, linear interpolation (torch.quantile's).

    values, mask: (B, T). Rows with no masked value get 0.
    """
    n = mask.sum(dim=1)  # (B,)
    inf = torch.tensor(float("inf"), device=values.device)
    ordered = torch.where(mask, values, inf).sort(dim=1).values  # masked values first
    rank = q * (n - 1).clamp_min(0).to(values.dtype)  # (B,)
    below = rank.floor().long()
    above = torch.minimum(below + 1, (n - 1).clamp_min(0))
    lo = ordered.gather(1, below.unsqueeze(1)).squeeze(1)
    hi = ordered.gather(1, above.unsqueeze(1)).squeeze(1)
    out = torch.lerp(lo, hi, rank - below.to(values.dtype))
    return torch.where(n > 0, out, torch.zeros_like(out))


def gate(ihat: torch.Tensor, tau_q: torch.Tensor, beta: float = BETA, w_min: float = W_MIN):
    """Steps 3-4 on normalised importances, before mass preservation.

    ihat: (B, T) in [0, 1]; tau_q: (B, 1) or scalar threshold. Below tau_q the weight is
    max(I^ / tau_q, w_min) <= 1, from tau_q on it is 1 + beta (I^ - tau_q) / (1 - tau_q) >= 1;
    both branches are 1 at I^ = tau_q. When tau_q == 1 the boost fraction is taken as 0.
    """
    tau_q = torch.as_tensor(tau_q, dtype=ihat.dtype, device=ihat.device)
    suppress = (ihat / tau_q.clamp_min(_TINY)).clamp_min(w_min)
    headroom = 1.0 - tau_q
    frac = (ihat - tau_q) / headroom.clamp_min(_TINY)
    boost = 1.0 + beta * torch.where(headroom > 0, frac, torch.zeros_like(frac))
    return torch.where(ihat < tau_q, suppress, boost)


def bilevel_weights(
    importance: torch.Tensor,
    mask: torch.Tensor | None = None,
    tau: float = TAU,
    beta: float = BETA,
    w_min: float = W_MIN,
) -> torch.Tensor:
    """OAR's token weights from importances, steps 1-6 of METHOD.md section 6.

    importance: (T,) or (B, T), >= 0 and finite on the scored positions.
    mask: same shape, bool, the scored positions S; None means every position.
    Returns float32 weights of the input's shape: mean exactly 1 over each row's S (up to
    float rounding), 1 outside S and on rows whose importances are all equal.
    """
    _check_gating_args(tau, beta, w_min)
    imp, mask, one_d = _as_rows(importance, mask, "importance")
    _check_scored(imp, mask, "importance")
    ihat, flat = normalise_importance(imp, mask)
    tau_q = masked_quantile(ihat, mask, tau).unsqueeze(1)  # (B, 1)
    raw = torch.where(mask, gate(ihat, tau_q, beta, w_min), torch.zeros_like(ihat))
    n = mask.sum(dim=1, keepdim=True).to(raw.dtype)  # (B, 1)
    total = raw.sum(dim=1, keepdim=True)
    # The top-ranked token has I^ = 1 >= tau_q, so its weight is >= 1 and total > 0.
    weights = raw * n / torch.where(total > 0, total, torch.ones_like(total))
    keep = mask & ~flat.unsqueeze(1)
    weights = torch.where(keep, weights, torch.ones_like(weights))
    return weights.squeeze(0) if one_d else weights


def entropy_topk_mask(entropy: torch.Tensor, mask: torch.Tensor | None = None, rho: float = RHO):
    """High-entropy-minority reshaper: 1 on the top-rho entropy tokens of the batch, else 0.

    entropy: (B, T) (or (T,)) policy entropies; mask: same shape, bool, the scored tokens.
    The cut-off is the k-th largest masked entropy of the WHOLE batch, k = ceil(rho * N)
    for N masked tokens; tokens tied with it are all kept. Off the mask the weight is 1.
    No renormalisation. Returns float32 of the input's shape.
    """
    if not 0.0 <= rho <= 1.0:
        raise InputError(f"rho is the kept fraction of tokens and must be in [0, 1], got {rho}")
    ent, mask, one_d = _as_rows(entropy, mask, "entropy")
    _check_scored(ent, mask, "entropy")
    values = ent[mask]
    k = math.ceil(rho * values.numel() - 1e-9)  # 1e-9: 0.1 * 30 must give 3, not 4
    keep = torch.zeros_like(mask)
    if k > 0:
        cut = values.topk(k).values[-1]
        keep = mask & (ent >= cut)
    weights = torch.where(mask, keep.float(), torch.ones_like(ent))
    return weights.squeeze(0) if one_d else weights


def _log_moments(saliency: torch.Tensor, mask: torch.Tensor):
    """GRAIL's statistics of one batch: log(s + 1e-8) (B, T) and its mean and population
    variance (B, 1) over each row's masked positions (checked finite and >= 0 there)."""
    _check_scored(saliency, mask, "saliency")
    logs = torch.log(saliency.clamp_min(0) + 1e-8)
    n = mask.sum(dim=1, keepdim=True).clamp_min(1).to(logs.dtype)  # (B, 1)
    zero = torch.zeros_like(logs)
    mean = torch.where(mask, logs, zero).sum(dim=1, keepdim=True) / n
    var = torch.where(mask, (logs - mean) ** 2, zero).sum(dim=1, keepdim=True) / n
    return logs, mean, var


def grail_weights(saliency: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """GRAIL's weights: w = clip(1 + 0.5 z, 0.5, 5), z the z-score of log(s + 1e-8) per row.

    saliency: (B, T) (or (T,)), >= 0 on the mask; mask: same shape, bool. The z-score uses
    the population std over the row's masked positions. Rows with fewer than 2 masked
    positions or equal saliencies get 1; off the mask the weight is 1. No renormalisation.
    """
    sal, mask, one_d = _as_rows(saliency, mask, "saliency")
    logs, mean, var = _log_moments(sal, mask)
    std = var.sqrt()
    inf = torch.tensor(float("inf"), device=logs.device)
    hi = torch.where(mask, logs, -inf).amax(dim=1, keepdim=True)
    spread = hi - torch.where(mask, logs, inf).amin(dim=1, keepdim=True)
    # Equal values must give weight 1: their float mean can differ from them by an ulp,
    # which a z-score would blow up to +-1, so flat rows are detected by their spread.
    ok = (mask.sum(dim=1, keepdim=True) >= 2) & (spread > 0) & (std > 0)
    z = (logs - mean) / torch.where(ok, std, torch.ones_like(std))
    weights = (1.0 + 0.5 * z).clamp(0.5, 5.0)
    weights = torch.where(mask & ok, weights, torch.ones_like(weights))
    return weights.squeeze(0) if one_d else weights


# GRAIL's published defaults (the authors' training config qwen3_grail.yaml): weight spread
# 0.5 around mean 1, clipped to [0.5, 5]; the answer's own tokens get the ceiling.
GRAIL_STD, GRAIL_W_MIN, GRAIL_W_MAX = 0.5, 0.5, 5.0


def grail_published_weights(saliency: torch.Tensor, response: torch.Tensor, answer: torch.Tensor,
                            reasoning: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    """GRAIL's token weights as its authors train them (METHOD.md 7).

    saliency:  (B, T) s_t >= 0 on the response; response: (B, T) bool, every response token;
    answer:    (B, T) bool, the answer span's tokens; reasoning: (B, T) bool, the tokens before
               the answer (the only ones whose z-score weight is kept);
    fallback:  (B,) bool, rows kept at weight 1 there (no answer span; a right rollout when
               only wrong ones are reweighted).
    z is the z-score of log(s + 1e-8) over each row's response tokens, with the population
    std sqrt(var + 1e-8); w = clip(1 + 0.5 z, 0.5, 5) on the reasoning of rows not falling
    back, GRAIL_W_MAX on the answer tokens of every row, 1 elsewhere (the marker, the tail,
    padding). No renormalisation. Returns (B, T) float32.
    """
    sal, response, _ = _as_rows(saliency, response, "saliency")
    logs, mean, var = _log_moments(sal, response)
    z = (logs - mean) / torch.sqrt(var + 1e-8)
    shaped = (1.0 + GRAIL_STD * z).clamp(GRAIL_W_MIN, GRAIL_W_MAX)
    keep = reasoning.to(shaped.device) & response & ~fallback.to(shaped.device)[:, None]
    weights = torch.where(keep, shaped, torch.ones_like(shaped))
    return torch.where(answer.to(shaped.device), torch.full_like(shaped, GRAIL_W_MAX), weights)


def reshape_advantages(advantages: torch.Tensor, weights: torch.Tensor,
                       bonus: torch.Tensor | None = None) -> torch.Tensor:
    """Token advantages A_{i,t} = A_i * w_t (+ b_t, an additive weighting's term: KTAE's).

    advantages: (B,) sequence advantages; weights: (B, T); bonus: (B, T) or None.
    Returns (B, T) float32.
    """
    advantages = torch.as_tensor(advantages)
    if advantages.dim() != 1:
        raise InputError(
            f"advantages must be (B,), one per sequence, got shape {tuple(advantages.shape)}"
        )
    if weights.dim() != 2 or weights.shape[0] != advantages.shape[0]:
        raise InputError(
            f"weights must be (B, T) with B = {advantages.shape[0]} (the number of "
            f"advantages), got shape {tuple(weights.shape)}"
        )
    out = advantages.float().to(weights.device).unsqueeze(1) * weights.float()
    if bonus is not None:
        if tuple(bonus.shape) != tuple(weights.shape):
            raise InputError(f"bonus must have the weights' shape {tuple(weights.shape)}, got "
                             f"{tuple(bonus.shape)}")
        out = out + bonus.float().to(out.device)
    return out
