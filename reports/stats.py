"""Aggregation over seeds: point estimates with 95% bootstrap intervals (docs/metrics.md, "Intervals").

With 3 or more seeds the point estimate is the interquartile mean (as rliable's `aggregate_iqm`) and the
interval a percentile bootstrap over runs; with 2 seeds the plain mean and the same bootstrap; with one
seed the number itself, no interval, marked single-seed. Each metric here is a function of one score
per run, so rliable's stratified bootstrap (resample runs within each task) is a plain resampling of
the runs; it is done here in numpy, vectorised, because `rliable.library` cannot be imported next to
pandas 3 (its `arch` dependency fails at import) and it draws from numpy's global random state.

Curve metrics (FLOPs to target, savings, the reference's accuracy at a method's spend) resample whole
runs: each replicate aggregates the resampled runs' curves point by point on a shared FLOP grid, then
reads the metric off the aggregate curve. The point estimate uses every evaluation of every run;
replicates use at most 48 of those grid points (`CurveSet.thinned`), which keeps a 1,000-run build
fast and moves interval ends by far less than their width.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from reports.metrics import interpolate_curve, to_budget

IQM_MIN_SEEDS = 3
CONFIDENCE = 0.95
DEFAULT_REPS = 2000
CURVE_REPS = 500  # curve replicates are [reps, runs, grid] arrays; 500 keeps a 1,000-run site fast
REPLICATE_POINTS = 48  # grid points a curve replicate keeps (intervals and bands; point estimates use all)


@dataclass(frozen=True)
class Estimate:
    """A metric aggregated over seeds.

    value: the point estimate (None: not defined for these runs); low / high: the 95% interval
    (None for a single seed; +-inf where some replicates never reach a target); stat: "iqm", "mean",
    "single" or "none" (no run defines the metric).
    """

    value: float | None
    low: float | None
    high: float | None
    n_seeds: int
    stat: str

    @property
    def single_seed(self) -> bool:
        return self.stat == "single"

    def to_dict(self) -> dict:
        def clean(x: float | None) -> float | str | None:
            # JSON has no infinity: an unbounded interval end is written as a string
            if x is None or math.isfinite(x):
                return x
            return "inf" if x > 0 else "-inf"

        return {"value": clean(self.value), "low": clean(self.low), "high": clean(self.high),
                "n_seeds": self.n_seeds, "stat": self.stat}


NONE = Estimate(None, None, None, 0, "none")


def rng_for(*names: str) -> np.random.Generator:
    """A generator seeded from names, so a rebuilt site shows the same intervals."""
    digest = hashlib.sha256("\x1f".join(names).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def aggregate(values: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """IQM over `axis` when it holds >= 3 runs, else the mean (the IQM of < 4 runs trims nothing)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[axis]
    if n < IQM_MIN_SEEDS:
        return values.mean(axis=axis)
    # scipy's trim_mean(values, 0.25) (what rliable's aggregate_iqm calls), by a full sort: on
    # [replicates, runs, grid] arrays a sort of a dozen runs is ~5x faster than its partition
    k = int(0.25 * n)
    middle = [slice(None)] * values.ndim
    middle[axis] = slice(k, n - k)
    return np.sort(values, axis=axis)[tuple(middle)].mean(axis=axis)


def point(values: Sequence[float]) -> float:
    """The point estimate of one metric's per-run values: the IQM from 3 runs, else the mean.

    Equal to rliable's `aggregate_iqm` (tested); computed by `aggregate` because rliable's goes through
    scipy's nan-policy wrapper, ~1 ms a call, which is most of a 1,000-run build's statistics.
    """
    return float(aggregate(np.asarray(values, dtype=float)))


def resample_indices(n: int, rng: np.random.Generator, reps: int = DEFAULT_REPS) -> np.ndarray:
    """[reps, n] run indices drawn with replacement."""
    return rng.integers(0, n, size=(reps, n))


def interval(replicates: np.ndarray) -> tuple[float, float] | tuple[None, None]:
    """Percentile interval of bootstrap replicates; NaN replicates (undefined metric) are left out.

    `inverted_cdf` picks observed replicates, so infinite ones (target never reached) give an
    infinite bound instead of NaN from interpolating between inf and a number.
    """
    r = np.asarray(replicates, dtype=float)
    r = r[~np.isnan(r)]
    if r.size == 0:
        return None, None
    alpha = (1.0 - CONFIDENCE) / 2.0
    lo, hi = np.quantile(r, [alpha, 1.0 - alpha], method="inverted_cdf")
    return float(lo), float(hi)


def stat_name(n: int) -> str:
    """The statistic a point estimate of n runs is: "single", "mean" (2 runs) or "iqm"."""
    return "single" if n == 1 else ("iqm" if n >= IQM_MIN_SEEDS else "mean")


def from_replicates(value: float | None, replicates: np.ndarray | None, n: int) -> Estimate:
    """An Estimate from a point value and its bootstrap replicates (None: one run, no interval).

    value None (undefined, e.g. a target the aggregate never reaches) keeps the interval of the
    replicates that are defined; non-finite replicates give an unbounded end (`interval`).
    """
    if value is not None and not math.isfinite(value):
        value = None
    if replicates is None or n < 2:
        return Estimate(value, None, None, n, stat_name(n))
    lo, hi = interval(replicates)
    return Estimate(value, lo, hi, n, stat_name(n))


def estimate(values: Sequence[float | None], rng: np.random.Generator, reps: int = DEFAULT_REPS) -> Estimate:
    """Aggregate one per-run metric; runs where it is undefined (None or NaN) are left out."""
    x = np.array([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    n = x.size
    if n == 0:
        return NONE
    value = point(x)
    if n == 1:
        return Estimate(value, None, None, 1, "single")
    lo, hi = interval(aggregate(x[resample_indices(n, rng, reps)], axis=1))
    return Estimate(value, lo, hi, n, stat_name(n))


def _combine(op: str, x, y):
    return x / y if op == "ratio" else x - y


def estimate_pair(
    x: Sequence[float | None], y: Sequence[float | None], rng: np.random.Generator, op: str = "ratio",
    reps: int = DEFAULT_REPS, same_runs: bool = False,
) -> Estimate:
    """agg(x) / agg(y) (op "ratio") or agg(x) - agg(y) ("difference"), x and y resampled independently.

    `same_runs`: x and y come from the same runs (a method against itself): one draw for both.
    n_seeds is the smaller sample's size; single-seed, with no interval, when either has one run (an
    interval would carry only the other side's seed noise).
    """
    if op not in ("ratio", "difference"):
        raise ValueError(f"op must be 'ratio' or 'difference', not {op!r}")
    x = np.asarray([v for v in x if v is not None and not math.isnan(v)], dtype=float)
    y = np.asarray([v for v in y if v is not None and not math.isnan(v)], dtype=float)
    if x.size == 0 or y.size == 0 or (op == "ratio" and point(y) == 0):
        return NONE
    value = float(_combine(op, point(x), point(y)))
    n = min(x.size, y.size)
    if n == 1:
        return Estimate(value, None, None, 1, "single")
    ix = resample_indices(x.size, rng, reps)
    iy = ix if same_runs and x.size == y.size else resample_indices(y.size, rng, reps)
    with np.errstate(divide="ignore", invalid="ignore"):
        replicates = _combine(op, aggregate(x[ix], axis=1), aggregate(y[iy], axis=1))
    lo, hi = interval(np.where(np.isfinite(replicates), replicates, np.nan))
    return Estimate(value, lo, hi, n, stat_name(n))


@dataclass(frozen=True)
class CurveSet:
    """Runs' curves on one FLOP grid: grid [G] (sorted, starts at 0), values [n_runs, G]."""

    grid: np.ndarray
    values: np.ndarray

    @property
    def n_runs(self) -> int:
        return self.values.shape[0]

    def aggregate(self) -> np.ndarray:
        """[G] the point-wise aggregate curve (IQM from 3 runs, else mean)."""
        return aggregate(self.values, axis=0)

    def thinned(self, max_points: int = REPLICATE_POINTS) -> CurveSet:
        """The same runs on at most `max_points` of the grid's points, always keeping both ends."""
        if self.grid.size <= max_points:
            return self
        keep = np.unique(np.r_[np.linspace(0, self.grid.size - 1, max_points).round().astype(int)])
        return CurveSet(grid=self.grid[keep], values=self.values[:, keep])

    def replicates(self, idx: np.ndarray) -> np.ndarray:
        """[R, G] aggregate curves of resampled runs, idx [R, n_runs]."""
        return aggregate(self.values[idx], axis=1)


def curve_set(curves: Sequence[tuple[Sequence[float], Sequence[float]]], budget_flops: float) -> CurveSet:
    """Each (flops, accuracy) curve to the budget (`to_budget`: cut there, or carried flat to it), all on the
    union of their FLOPs."""
    flat = [to_budget(f, a, budget_flops) for f, a in curves]
    grid = np.unique(np.concatenate([f for f, _ in flat] + [np.array([0.0])]))
    values = np.stack([interpolate_curve(f, a, grid) for f, a in flat])
    return CurveSet(grid=grid, values=values)
