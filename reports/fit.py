"""The ScaleRL curve fit of docs/metrics.md ("Curves and interpolation"): R(C) = R0 + (A - R0) / (1 + (Cmid / C)^B).

Fitted to a method's aggregate accuracy against counted FLOPs; shown on its page (asymptote A,
efficiency B, midpoint Cmid). scipy.optimize is imported on the first fit: it is slow to load.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CurveFit:
    """R(C) = R0 + (A - R0) / (1 + (Cmid / C)^B), the ScaleRL form, fitted to accuracy vs FLOPs."""

    asymptote: float  # A
    efficiency: float  # B
    midpoint_flops: float  # Cmid
    base_accuracy: float  # R0, fixed, not fitted
    rmse: float  # root-mean-square residual over the fitted points

    def predict(self, flops: Sequence[float] | np.ndarray) -> np.ndarray:
        return _fit_model(np.log10(np.maximum(np.asarray(flops, float), 1e-300)), self.base_accuracy,
                          self.asymptote, self.efficiency, math.log10(self.midpoint_flops))


def _fit_model(log_c: np.ndarray, r0: float, a: float, b: float, log_mid: float) -> np.ndarray:
    # (Cmid / C)^B = 10^(B (log Cmid - log C)); clipped so that far tails do not overflow
    z = np.clip(b * (log_mid - log_c) * math.log(10), -700, 700)
    return r0 + (a - r0) / (1.0 + np.exp(z))


def fit_scaling_curve(
    flops: Sequence[float], accuracy: Sequence[float], base_accuracy: float, min_points: int = 3
) -> CurveFit | None:
    """Fit A, B and Cmid by least squares (scipy.optimize.curve_fit), R0 = base accuracy.

    Points at 0 FLOPs are left out (R(0) = R0 by construction). Returns None when there are fewer than
    `min_points` positive-FLOP points, when the optimiser fails, or when the fit is degenerate (A = R0:
    the curve never moves, so B and Cmid mean nothing).
    """
    from scipy.optimize import OptimizeWarning, curve_fit  # imported here: scipy.optimize is slow to load

    f = np.asarray(flops, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    keep = f > 0
    if keep.sum() < min_points:
        return None
    x, y = np.log10(f[keep]), a[keep]
    p0 = [float(np.clip(y.max(), 0.0, 1.0)), 1.0, float(np.median(x))]
    bounds = ([0.0, 0.05, x.min() - 3.0], [1.0, 20.0, x.max() + 3.0])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            params, _ = curve_fit(
                lambda lc, A, B, M: _fit_model(lc, base_accuracy, A, B, M), x, y, p0=p0, bounds=bounds, maxfev=2000
            )
    except (RuntimeError, ValueError, FloatingPointError):
        return None
    A, B, M = (float(p) for p in params)
    if not all(map(math.isfinite, (A, B, M))) or abs(A - base_accuracy) < 1e-6:
        return None
    rmse = float(np.sqrt(np.mean((_fit_model(x, base_accuracy, A, B, M) - y) ** 2)))
    return CurveFit(asymptote=A, efficiency=B, midpoint_flops=10.0**M, base_accuracy=base_accuracy, rmse=rmse)
