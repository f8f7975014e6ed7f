"""The metrics of DESIGN section 3, as pure functions on one run's numbers (no pandas, no I/O).

Curves are (flops, accuracy) sequences sorted by cumulative counted FLOPs, the first point at 0 FLOPs
(the base model). Conventions every metric here shares:

- Carried flat: a run that stopped before its budget keeps its last accuracy up to the budget.
- Between two evaluations accuracy is linear in log10 FLOPs. log10 is undefined at 0, so on the
  segment that starts at the base point (0 FLOPs) it is linear in FLOPs instead; a curve whose base
  point already reaches the target reaches it at 0 FLOPs.
- "Not reached" is None for one run, NaN in the vectorised forms used by the bootstrap.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

PFLOP = 1e15
REFERENCE_METHOD = "grpo-joint"
_TOL = 1e-12  # accuracy that equals tau up to float noise has reached it


def carry_flat(flops: Sequence[float], accuracy: Sequence[float], budget_flops: float) -> tuple[np.ndarray, np.ndarray]:
    """The curve with a last point at the budget if it stopped before it.

    Returns:
        flops [P or P+1], accuracy [same], as float arrays.
    """
    f = np.asarray(flops, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    if f.shape != a.shape or f.ndim != 1 or f.size == 0:
        raise ValueError("flops and accuracy must be equal-length, non-empty 1-D sequences")
    if f[-1] < budget_flops:
        f, a = np.append(f, budget_flops), np.append(a, a[-1])
    return f, a


def final_accuracy(flops: Sequence[float], accuracy: Sequence[float], budget_flops: float) -> float:
    """Accuracy at the budget: the last evaluation, carried flat."""
    return float(carry_flat(flops, accuracy, budget_flops)[1][-1])


def _segment_position(x: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """Where x lies between x0 and x1 (0..1): in log10 FLOPs, or in FLOPs when x0 is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lin = x / np.where(x1 > 0, x1, 1.0)
        log = (np.log10(np.maximum(x, 1e-300)) - np.log10(np.maximum(x0, 1e-300))) / (
            np.log10(np.maximum(x1, 1e-300)) - np.log10(np.maximum(x0, 1e-300))
        )
    t = np.where(x0 > 0, log, lin)
    return np.where(x1 > x0, np.clip(t, 0.0, 1.0), 1.0)


def interpolate_curve(flops: Sequence[float], accuracy: Sequence[float], grid: Sequence[float]) -> np.ndarray:
    """Accuracy at each grid FLOP value, interpolated as the module docstring says, flat past the end.

    Returns:
        [len(grid)] accuracies.
    """
    f = np.asarray(flops, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    g = np.asarray(grid, dtype=float)
    hi = np.clip(np.searchsorted(f, g, side="left"), 0, f.size - 1)  # first point at or after g
    lo = np.maximum(hi - 1, 0)
    exact = f[hi] <= g  # at or past the last point, or exactly on a point
    t = _segment_position(g, f[lo], f[hi])
    out = a[lo] + t * (a[hi] - a[lo])
    return np.where(exact | (hi == lo), a[hi], out)


def flops_to_target_batch(flops: np.ndarray, curves: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """FLOPs at which each curve first reaches its target, NaN where it never does.

    Args:
        flops: [G] shared evaluation FLOPs, sorted, the first may be 0.
        curves: [R, G] accuracies.
        tau: [R] targets.
    Returns:
        [R] FLOPs.
    """
    curves = np.atleast_2d(curves)
    tau = np.broadcast_to(np.asarray(tau, dtype=float), (curves.shape[0],))
    hit = curves >= tau[:, None] - _TOL
    reached = hit.any(axis=1)
    i = np.argmax(hit, axis=1)  # first index that reaches tau
    j = np.maximum(i - 1, 0)
    rows = np.arange(curves.shape[0])
    a0, a1 = curves[rows, j], curves[rows, i]
    f0, f1 = flops[j], flops[i]
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.clip((tau - a0) / (a1 - a0), 0.0, 1.0)
        log_interp = f0 * np.power(f1 / np.where(f0 > 0, f0, 1.0), t)
    between = np.where(f0 > 0, log_interp, t * f1)
    out = np.where((i == 0) | (f1 <= f0), f1, between)
    return np.where(reached, out, np.nan)


def flops_to_target(flops: Sequence[float], accuracy: Sequence[float], tau: float) -> float | None:
    """FLOPs at which the curve first reaches tau (see module docstring), None if it never does."""
    f = np.asarray(flops, dtype=float)
    value = flops_to_target_batch(f, np.asarray(accuracy, dtype=float)[None, :], np.array([tau]))[0]
    return None if math.isnan(value) else float(value)


def savings_at_matched_accuracy(method_flops: float | None, reference_flops: float | None) -> float | None:
    """1 - FLOPs_to_target(method) / FLOPs_to_target(reference); None when undefined.

    A method that never reaches the target has no savings figure (None); a reference that reaches it
    at 0 FLOPs (the base model already does) leaves the ratio undefined (None).
    """
    if method_flops is None or reference_flops is None or reference_flops <= 0:
        return None
    return 1.0 - method_flops / reference_flops


def accuracy_per_pflop(final: float, base: float, counted_flops: float) -> float | None:
    """(final accuracy - base accuracy) per counted PFLOP; None for a run that counted nothing."""
    if counted_flops <= 0:
        return None
    return (final - base) / (counted_flops / PFLOP)


def phase_flops(ledger: Iterable[Mapping[str, Any]], category: str = "counted") -> dict[str, float]:
    """FLOPs per ledger phase, for one category."""
    out: dict[str, float] = {}
    for row in ledger:
        if row["category"] == category:
            out[row["phase"]] = out.get(row["phase"], 0.0) + float(row["flops"])
    return out


def distillation_share(ledger: Iterable[Mapping[str, Any]]) -> float | None:
    """Counted FLOPs of phase `distill` / counted FLOPs of phases `expert:*` and `stage:*`.

    None for a run with no expert or stage training (the share is undefined, not zero).
    """
    phases = phase_flops(ledger)
    experts = sum(v for k, v in phases.items() if k.startswith(("expert:", "stage:")))
    if experts <= 0:
        return None
    return phases.get("distill", 0.0) / experts


def length_ratio(mean_length: float | None, reference_mean_length: float | None) -> float | None:
    """Mean response length / the reference's; None when either is missing or the reference's is 0."""
    if mean_length is None or not reference_mean_length:
        return None
    return mean_length / reference_mean_length


def self_teacher_reduction(recovery: Mapping[str, Any] | None) -> float | None:
    """GRPO's recovery FLOPs / self-OPD's (record["recovery"]); None where either did not recover."""
    if not recovery:
        return None
    grpo, opd = recovery.get("grpo_flops"), recovery.get("opd_flops")
    if grpo is None or opd is None or opd <= 0:
        return None
    return float(grpo) / float(opd)


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
