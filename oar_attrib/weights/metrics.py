"""Evaluation metrics of weights and importances (METHOD.md section 8).

Every metric is computed per row over the scored positions S. A 1-D input (T,) gives a
float; a 2-D input (B, T) gives a numpy array (B,). A row where the metric is undefined
(S empty; for the oracle metrics also O = oracle ∩ S empty) gives NaN: callers skip NaN
rows when averaging (`analysis.stats.bootstrap_ci` drops them). Arithmetic is float64 numpy.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InputError


def _np(x, dtype=None) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=dtype)


def _per_row(fn, values, *masks, **kw):
    """Apply fn(values_row, *mask_rows, **kw) to (T,) or each row of (B, T) inputs."""
    values = _np(values, np.float64)
    masks = [_np(m).astype(bool) if m is not None else np.ones(values.shape, bool) for m in masks]
    if values.ndim not in (1, 2):
        raise InputError(f"expected a (T,) or (B, T) array, got shape {values.shape}")
    for m in masks:
        if m.shape != values.shape:
            raise InputError(f"masks must have the values' shape {values.shape}, got {m.shape}")
    if values.ndim == 1:
        return fn(values, *masks, **kw)
    return np.array([fn(v, *(m[b] for m in masks), **kw) for b, v in enumerate(values)])


def _ess_row(w: np.ndarray, s: np.ndarray) -> float:
    w = w[s]
    sq = float((w * w).sum())
    return float(w.sum() ** 2 / (len(w) * sq)) if len(w) and sq > 0 else math.nan


def ess_ratio(weights, mask=None):
    """ESS ratio (sum w)^2 / (|S| sum w^2) over S: 1 for uniform weights, (0, 1] for w > 0.

    weights: (T,) or (B, T); mask: same shape, bool, S (None: all positions).
    """
    return _per_row(_ess_row, weights, mask)


def _kept(n: int, frac: float) -> int:
    # 1e-9: 0.1 * 30 is 3.0000000000000004 in floats, and must keep 3 tokens, not 4.
    return max(1, math.ceil(frac * n - 1e-9))


def _top_mass_row(a: np.ndarray, s: np.ndarray, frac: float) -> float:
    a = np.abs(a[s])
    total = float(a.sum())
    if len(a) == 0 or total == 0:
        return math.nan
    k = _kept(len(a), frac)
    return float(np.sort(a)[::-1][:k].sum() / total)


def top_mass(token_advantages, mask=None, frac: float = 0.1):
    """Share of sum_t |A_t| over S carried by the k tokens of largest |A_t|.

    token_advantages: (T,) or (B, T); mask: same shape, bool, S.
    k = ceil(frac * |S|), at least 1, so uniform advantages give k / |S| (exactly frac
    when frac * |S| is a whole number, slightly more otherwise). NaN when all |A| are 0.
    """
    if not 0.0 < frac <= 1.0:
        raise InputError(f"frac must be in (0, 1], got {frac}")
    return _per_row(_top_mass_row, token_advantages, mask, frac=frac)


def _oracle_row(scores, oracle, scored, k):
    """Scores and oracle flags over S, and k (|O| by default), or None when undefined."""
    s, o = scores[scored], oracle[scored]
    if np.isnan(s).any():
        raise InputError("scores contain NaN at scored positions; rank finite scores only")
    r = int(o.sum())
    if len(s) == 0 or r == 0:
        return None
    k = r if k is None else int(k)
    if k < 0:
        raise InputError(f"k must be >= 0, got {k}")
    return s, o, min(k, len(s))


def _recall_row(scores, oracle, scored, k=None) -> float:
    got = _oracle_row(scores, oracle, scored, k)
    if got is None:
        return math.nan
    s, o, k = got
    if k == 0:
        return 0.0
    cut = np.sort(s)[::-1][k - 1]
    above, tied = s > cut, s == cut
    # The top-k takes every token above the cut and k - |above| of the tied ones, a uniform
    # random subset under random tie order: each tied oracle token is in with that share.
    share = (k - above.sum()) / tied.sum()
    return float((o[above].sum() + share * o[tied].sum()) / o.sum())


def recall_at_k(scores, oracle, scored=None, k: int | None = None):
    """|top-k(scores) ∩ O| / |O| over S, expected over a random order of tied scores.

    scores: (T,) or (B, T) importances; oracle: same shape, bool, causal positions (those
    outside S are ignored: O = oracle ∩ S); scored: same shape, bool, S (None: all).
    k defaults to |O| per row and is capped at |S|. All-equal scores give exactly k / |S|,
    the random-ranking expectation (`random_recall`).
    """
    return _per_row(_recall_row, scores, oracle, scored, k=k)


def _ap_row(scores, oracle, scored) -> float:
    got = _oracle_row(scores, oracle, scored, None)
    if got is None:
        return math.nan
    s, o, _ = got
    values, group = np.unique(-s, return_inverse=True)  # groups in descending score order
    n_g = np.bincount(group, minlength=len(values))
    r_g = np.bincount(group, weights=o.astype(float), minlength=len(values))
    before, hits_before, total = 0, 0.0, 0.0
    for n, r in zip(n_g, r_g):
        if r > 0:
            # Expected precision at each relevant item of a tie group in random order
            # (McSherry & Najork, ECIR 2008): slot j of the group holds a relevant item with
            # probability r/n, and then r-1 of the other n-1 items are spread uniformly.
            j = np.arange(1, n + 1)
            others = (j - 1) * (r - 1) / (n - 1) if n > 1 else 0.0
            total += float(((r / n) * (hits_before + 1 + others) / (before + j)).sum())
        before, hits_before = before + n, hits_before + r
    return total / float(o.sum())


def average_precision(scores, oracle, scored=None):
    """Average precision of the ranking by scores (descending) against O = oracle ∩ S.

    Ties are credited in EXPECTATION over a random order of the tied items (not the
    pessimistic order), so all-equal scores give the random-ranking expectation.
    scores, oracle, scored: (T,) or (B, T) as in `recall_at_k`.
    """
    return _per_row(_ap_row, scores, oracle, scored)


def _random_recall_row(oracle, scored, k=None) -> float:
    o = oracle[scored].astype(bool)
    n, r = len(o), int(o.sum())
    if n == 0 or r == 0:
        return math.nan
    k = r if k is None else min(int(k), n)
    return k / n


def random_recall(oracle, scored=None, k: int | None = None):
    """Expected recall@k of a uniformly random ranking: k / |S| (k = |O| by default).

    oracle, scored: (T,) or (B, T) bool.
    """
    return _per_row(_random_recall_row, oracle, scored, k=k)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks of a 1-D array, ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    ranks[order] = np.arange(len(x), dtype=np.float64)
    _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(inverse, weights=ranks) / counts)[inverse]


def spearman(a, b) -> float:
    """Spearman rank correlation of two 1-D arrays; NaN when either is constant."""
    ra, rb = _ranks(np.asarray(a, np.float64)), _ranks(np.asarray(b, np.float64))
    ra, rb = ra - ra.mean(), rb - rb.mean()
    denom = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denom) if denom > 0 else float("nan")


def partial_spearman(a, b, z) -> float:
    """Spearman correlation of `a` and `b` with `z` held fixed (the partial correlation of
    their ranks: (r_ab - r_az r_bz) / sqrt((1 - r_az^2)(1 - r_bz^2))); NaN when any of the three
    correlations is undefined or `a` or `b` is a monotone function of `z`."""
    r_ab, r_az, r_bz = spearman(a, b), spearman(a, z), spearman(b, z)
    denom = (1.0 - r_az * r_az) * (1.0 - r_bz * r_bz)
    if not (np.isfinite([r_ab, r_az, r_bz]).all() and denom > 1e-12):
        return float("nan")
    return float(np.clip((r_ab - r_az * r_bz) / math.sqrt(denom), -1.0, 1.0))


def _split_half_row(draws: np.ndarray, scored: np.ndarray) -> float:
    """draws: (n, T) float64; scored: (T,) bool."""
    half = draws.shape[0] // 2
    values = draws[:, scored]
    if half < 1 or values.shape[1] < 3 or not np.isfinite(values).all():
        return math.nan
    rho = spearman(values[:half].mean(axis=0), values[half:2 * half].mean(axis=0))
    k = draws.shape[0] / half
    return rho if not rho > 0 else float(k * rho / (1 + (k - 1) * rho))


def split_half_reliability(draws, mask=None):
    """How reproducible a ranking averaged over n random draws is (OAR-G's noise draws).

    draws: (n, T) or (n, B, T) per-draw importances; mask: (T,) or (B, T) bool, S (None: all).
    Per row: rho = Spearman between the mean of draws 1..m and of draws m+1..2m over S
    (m = n // 2; an odd last draw sits in neither half), corrected to the n draws of the
    mean by Spearman-Brown, k rho / (1 + (k - 1) rho) with k = n / m. A rho <= 0 is returned
    as it is: halves that disagree have no reliability to extrapolate. NaN (undefined) with
    fewer than 2 draws, fewer than 3 positions in S, a constant half, or non-finite draws.
    """
    values = _np(draws, np.float64)
    if values.ndim not in (2, 3):
        raise InputError(f"draws must be (n, T) or (n, B, T), got shape {values.shape}")
    rows = values[:, None] if values.ndim == 2 else values  # (n, B, T)
    masks = np.ones(rows.shape[1:], bool) if mask is None else _np(mask).astype(bool).reshape(rows.shape[1:])
    out = np.array([_split_half_row(rows[:, b], masks[b]) for b in range(rows.shape[1])])
    return float(out[0]) if values.ndim == 2 else out
