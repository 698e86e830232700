"""The gate's normalised importance I^ for display (METHOD.md section 6, steps 1-2), in numpy:
log1p(I) min-max normalised over the scored tokens. `gating.normalise_importance` is the batched
torch form the weights use; tests/weights/test_gating.py checks the two agree. Kept free of torch so
the web pages and figures draw it without loading the model stack."""
from __future__ import annotations

import numpy as np


def log1p_minmax(importance, scored) -> np.ndarray:
    """(T,) float64 I^ in [0, 1] on the scored tokens with a finite importance, NaN elsewhere;
    0 where those values are all equal (no token stands out).

    importance: (T,) importances (>= 0 on S; negatives count as 0); scored: (T,) bool, S.
    """
    x = np.asarray(importance, dtype=np.float64)
    ok = np.asarray(scored, dtype=bool) & np.isfinite(x)
    out = np.full(x.shape, np.nan)
    if not ok.any():
        return out
    logged = np.log1p(np.clip(x[ok], 0.0, None))
    lo, hi = logged.min(), logged.max()
    out[ok] = (logged - lo) / (hi - lo) if hi > lo else 0.0
    return out
