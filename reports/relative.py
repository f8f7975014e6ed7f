"""Metrics against the board's reference (`grpo-joint`), with bootstrap intervals that pair both noises.

docs/metrics.md, "FLOPs to target and savings" and "Accuracy at matched FLOPs": the targets tau_k
come from the reference's gain (tau_k = base + k x (reference final - base), k in TARGET_GAINS);
every method's FLOPs to each target and its savings against the reference are read off aggregate
curves; and the reference's own curve is read at each method's counted spend.

The reference is bootstrapped once per board (`reference_bootstrap`) and each method's replicates
are paired with its replicates, so a method's interval carries the reference's seed noise as well
as its own. The reference compared with itself reuses its own replicates: its savings are exactly 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reports.metrics import TARGET_GAINS, flops_to_target_batch, interpolate_rows, savings, targets_from_gain
from reports.stats import (
    CURVE_REPS, NONE, CurveSet, Estimate, aggregate, from_replicates, interval, point, resample_indices, stat_name,
)


@dataclass
class Reference:
    """The reference's aggregate curve and bootstrap, shared by every method of a board.

    grid [G], mid [G]: its aggregate curve; rep_grid [B], reps [R, B]: aggregate curves of resampled
    runs (one row, the aggregate itself, for a single run); tau [K], ftt [K]: the targets and its
    own FLOPs to them; tau_reps, ftt_reps [R, K]: the same per replicate; idx [R, n]: the resampled
    run indices (a method with the same runs reuses them).
    """

    grid: np.ndarray
    mid: np.ndarray
    rep_grid: np.ndarray
    reps: np.ndarray
    tau: np.ndarray
    ftt: np.ndarray
    tau_reps: np.ndarray
    ftt_reps: np.ndarray
    idx: np.ndarray
    lengths: np.ndarray
    n_runs: int

    @property
    def gain(self) -> float:
        """The reference's final accuracy minus its base, on its aggregate curve (tau_0.5 = base + gain / 2)."""
        return float((self.tau[0] - self.mid[0]) / TARGET_GAINS[0])

    @property
    def has_targets(self) -> bool:
        """Targets mean something only when the reference improves on the base: with no gain every
        tau_k is at or below the base, and every method "reaches" it at 0 FLOPs."""
        return self.gain > 0


def _ftt(grid: np.ndarray, curves: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """FLOPs to target per row and target: curves [R, G], tau [R, K] (or [K]) -> [R, K], NaN if never."""
    tau = np.broadcast_to(tau, (curves.shape[0], np.shape(tau)[-1]))
    return np.stack([flops_to_target_batch(grid, curves, tau[:, k]) for k in range(tau.shape[1])], axis=1)


def _at_budget(grid: np.ndarray, curves: np.ndarray, budget_flops: float) -> np.ndarray:
    """[R] each aggregate curve at the budget (its last point unless a run's last step overshot)."""
    return interpolate_rows(grid, curves, np.array([budget_flops]))[:, 0]


def reference_bootstrap(cs: CurveSet, budget_flops: float, lengths: np.ndarray, rng: np.random.Generator) -> Reference:
    """Targets, FLOPs to them and bootstrap replicates of the reference's runs (cs: its curves)."""
    mid = cs.aggregate()
    tau = targets_from_gain(mid[0], _at_budget(cs.grid, mid[None, :], budget_flops)[0])
    ftt = _ftt(cs.grid, mid[None, :], tau)[0]
    idx = resample_indices(cs.n_runs, rng, CURVE_REPS)
    if cs.n_runs > 1:
        thin = cs.thinned()
        rep_grid, reps = thin.grid, thin.replicates(idx)
        tau_reps = targets_from_gain(reps[:, 0], _at_budget(rep_grid, reps, budget_flops))
        ftt_reps = _ftt(rep_grid, reps, tau_reps)
    else:
        rep_grid, reps, tau_reps, ftt_reps = cs.grid, mid[None, :], tau[None, :], ftt[None, :]
    return Reference(cs.grid, mid, rep_grid, reps, tau, ftt, tau_reps, ftt_reps, idx, lengths, cs.n_runs)


@dataclass
class Relative:
    """A method's metrics against the reference, each keyed by target gain k where it has one."""

    flops_to_target: dict[float, Estimate]
    savings: dict[float, Estimate]
    reference_at_spend: Estimate
    minus_reference_at_spend: Estimate


def empty_relative() -> Relative:
    return Relative({k: NONE for k in TARGET_GAINS}, {k: NONE for k in TARGET_GAINS}, NONE, NONE)


def targets_and_savings(cs: CurveSet, mid: np.ndarray, reps: np.ndarray | None, rep_grid: np.ndarray,
                        ref: Reference, same: bool) -> tuple[dict[float, Estimate], dict[float, Estimate]]:
    """FLOPs to each target and savings there, points from the aggregate curve mid [G] on cs.grid.

    FLOPs to target is read at the fixed target tau_k (its interval is this method's seed noise);
    savings pair each of this method's replicates (reps [R, B] on rep_grid, None for one run) with a
    reference replicate and that replicate's own target (both noises).
    """
    n = cs.n_runs
    ftt = _ftt(cs.grid, mid[None, :], ref.tau)[0]  # [K]
    sav = savings(ftt, ref.ftt)  # [K]
    ftt_reps = sav_reps = None
    if reps is not None:
        at_tau = _ftt(rep_grid, reps, ref.tau)  # [R, K]
        ftt_reps = np.where(np.isnan(at_tau), np.inf, at_tau)  # never reached: an unbounded interval end
        m_reps = ref.ftt_reps if same else _ftt(rep_grid, reps, ref.tau_reps)
        sav_reps = savings(m_reps, ref.ftt_reps)
    out_ftt, out_sav = {}, {}
    for j, k in enumerate(TARGET_GAINS):
        out_ftt[k] = from_replicates(float(ftt[j]), None if ftt_reps is None else ftt_reps[:, j], n)
        # one run on either side: no interval (it would carry the other side's seed noise only)
        out_sav[k] = from_replicates(float(sav[j]), None if sav_reps is None else sav_reps[:, j],
                                     min(n, ref.n_runs))
    return out_ftt, out_sav


def at_spend(counted: np.ndarray, final: np.ndarray, idx: np.ndarray, ref: Reference) -> tuple[Estimate, Estimate]:
    """The reference's accuracy at this method's counted spend, and this method's final accuracy minus it.

    Args:
        counted, final: [n] per-run counted FLOPs and accuracy at the budget, in run order.
        idx: [R, n] this method's resampled runs; row r is paired with the reference's replicate r
            (the reference itself passes its own `ref.idx`, so the pairs are the same runs).
    Returns:
        (reference accuracy at the spend, difference), each with its 95% interval.
    """
    spend = point(counted)
    ref_at = float(interpolate_rows(ref.grid, ref.mid[None, :], np.array([spend]))[0, 0])
    n = min(len(counted), ref.n_runs)
    if n == 1:  # either side one run: an interval would carry only the other's seed noise
        return Estimate(ref_at, None, None, 1, "single"), Estimate(point(final) - ref_at, None, None, 1, "single")
    spend_reps = aggregate(counted[idx], axis=1)  # [R]
    reps = ref.reps if ref.reps.shape[0] == spend_reps.size else np.broadcast_to(ref.reps, (spend_reps.size,
                                                                                            ref.reps.shape[1]))
    ref_reps = interpolate_rows(ref.rep_grid, reps, spend_reps[:, None])[:, 0]
    diff_reps = aggregate(final[idx], axis=1) - ref_reps
    stat = stat_name(n)
    return (Estimate(ref_at, *interval(ref_reps), n, stat),
            Estimate(point(final) - ref_at, *interval(diff_reps), n, stat))
