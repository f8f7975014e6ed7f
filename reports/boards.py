"""Leaderboards: the runs of one comparison, aggregated per method with intervals (DESIGN section 3).

A board is every run with the same profile, suite, difficulty, suite version and budget: the runs
DESIGN allows to be compared. Within a board the reference is `grpo-joint`; its aggregate final
accuracy is the target tau of "FLOPs to target" and "savings at matched accuracy".

    boards = build_boards(to_frames(records))
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from reports.metrics import REFERENCE_METHOD, CurveFit, fit_scaling_curve, flops_to_target_batch
from reports.records import BOARD_COLUMNS, Frames
from reports.stats import (
    CURVE_REPS, NONE, CurveSet, Estimate, curve_set, estimate, estimate_pair, interval, point,
    resample_indices, rng_for,
)

PHASE_GROUPS = (("expert:", "expert training"), ("stage:", "self-GRPO stages"), ("distill", "distillation"),
                ("train", "training"), ("recover:", "recovery"))


def phase_group(phase: str) -> str:
    """Coarse phase for the stacked bars: expert training, self-GRPO stages, distillation, ..."""
    for prefix, name in PHASE_GROUPS:
        if phase == prefix or (prefix.endswith(":") and phase.startswith(prefix)):
            return name
    return "other"


_PER_RUN = ("final_accuracy", "base_accuracy", "counted_flops", "final_mean_length", "accuracy_per_pflop",
            "distillation_share", "self_teacher_reduction")


@dataclass(frozen=True)
class BoardKey:
    profile: str
    suite: str
    difficulty: str
    suite_version: str
    budget_flops: float

    @property
    def label(self) -> str:
        return f"{self.suite} · {self.difficulty} · {self.profile}"


@dataclass
class MethodResult:
    """One method on one board: its runs, metrics over seeds, aggregate curve and band."""

    method: str
    is_reference: bool
    run_ids: list[str]
    seeds: list[int]
    final_accuracy: Estimate
    base_accuracy: Estimate
    flops_to_target: Estimate
    savings: Estimate
    accuracy_per_pflop: Estimate
    mean_length: Estimate
    length_ratio: Estimate
    distillation_share: Estimate
    self_teacher_reduction: Estimate
    counted_flops: Estimate
    curves: CurveSet
    curve_mid: np.ndarray  # [G] aggregate accuracy on curves.grid
    band_grid: np.ndarray  # [B] the FLOPs of the band: curves.grid thinned (stats.CurveSet.thinned)
    curve_low: np.ndarray | None  # [B] 95% band, None for one seed
    curve_high: np.ndarray | None
    fit: CurveFit | None
    domain_accuracy: dict[str, float] = field(default_factory=dict)  # aggregate final, per domain
    flops_by_group: dict[tuple[str, str], float] = field(default_factory=dict)  # (phase group, kind) -> mean
    per_run: dict[str, list] = field(default_factory=dict)  # column of the runs frame -> values, seed order

    @property
    def n_seeds(self) -> int:
        return len(self.run_ids)


@dataclass
class Board:
    key: BoardKey
    reference: str | None
    target: float | None  # tau: the reference's aggregate final accuracy
    methods: list[MethodResult]
    n_domains: int = 0
    warnings: list[str] = field(default_factory=list)
    label: str = ""  # key.label, plus version and budget where two boards would share it

    def __post_init__(self) -> None:
        self.label = self.label or self.key.label

    def method(self, name: str) -> MethodResult:
        return next(m for m in self.methods if m.method == name)


@dataclass
class _Ref:
    """The reference's bootstrap, shared by every method of the board so intervals are coherent."""

    tau: float
    ftt: float  # the reference's own FLOPs to tau
    tau_reps: np.ndarray  # [R]
    ftt_reps: np.ndarray  # [R]
    lengths: np.ndarray


def curves_by_run(curves: pd.DataFrame) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """run_id -> (flops [P], accuracy [P]) in evaluation order, without a per-run pandas groupby."""
    if curves.empty:
        return {}
    c = curves.sort_values(["run_id", "point"], kind="stable")
    ids = c["run_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    f, a = c["flops"].to_numpy(float), c["accuracy"].to_numpy(float)
    bounds = list(starts) + [len(ids)]
    return {ids[s]: (f[s:e], a[s:e]) for s, e in zip(bounds[:-1], bounds[1:])}


def _curve_estimates(cs: CurveSet, idx: np.ndarray, ref: _Ref | None, same_as_ref: bool):
    """FLOPs to target and savings (point, interval) plus the band; idx [R, n] resampled runs.

    FLOPs to target is read at the fixed target tau (its interval is this method's seed noise);
    savings pair each replicate with a reference replicate and its own tau (both noises). The
    reference compared with itself reuses its replicates, so its savings are exactly 0.
    """
    mid, thin = cs.aggregate(), cs.thinned()
    reps = thin.replicates(idx) if cs.n_runs > 1 else None  # [R, B]
    low = high = None
    if reps is not None:
        low, high = np.quantile(reps, [0.025, 0.975], axis=0)
    band = (thin.grid, low, high)
    if ref is None:
        return band, mid, NONE, NONE
    n, stat = cs.n_runs, ("single" if cs.n_runs == 1 else "iqm" if cs.n_runs >= 3 else "mean")
    ftt = flops_to_target_batch(cs.grid, mid[None, :], np.array([ref.tau]))[0]
    ftt_value = None if np.isnan(ftt) else float(ftt)
    savings_value = None if ftt_value is None or ref.ftt <= 0 else 1.0 - ftt_value / ref.ftt
    if reps is None:
        single = Estimate(ftt_value, None, None, 1, "single"), Estimate(savings_value, None, None, 1, "single")
        return (band, mid, *single)
    at_tau = flops_to_target_batch(thin.grid, reps, np.full(reps.shape[0], ref.tau))
    ftt_lo, ftt_hi = interval(np.where(np.isnan(at_tau), np.inf, at_tau))
    m_reps = ref.ftt_reps if same_as_ref else flops_to_target_batch(thin.grid, reps, ref.tau_reps)
    with np.errstate(divide="ignore", invalid="ignore"):
        sav = np.where(ref.ftt_reps > 0, 1.0 - np.where(np.isnan(m_reps), np.inf, m_reps) / ref.ftt_reps, np.nan)
    sav_lo, sav_hi = interval(sav)
    return band, mid, Estimate(ftt_value, ftt_lo, ftt_hi, n, stat), Estimate(savings_value, sav_lo, sav_hi, n,
                                                                              stat)


def _reference(runs: pd.DataFrame, curves: dict, key: BoardKey) -> _Ref | None:
    ref_runs = runs[runs["method"] == REFERENCE_METHOD].sort_values(["seed", "run_id"])
    if ref_runs.empty:
        return None
    cs = curve_set([curves[r] for r in ref_runs["run_id"]], key.budget_flops)
    mid = cs.aggregate()
    tau = float(mid[-1])
    ftt = float(flops_to_target_batch(cs.grid, mid[None, :], np.array([tau]))[0])
    if cs.n_runs > 1:
        rng = rng_for(*map(str, vars(key).values()), REFERENCE_METHOD)
        thin = cs.thinned()
        reps = thin.replicates(resample_indices(cs.n_runs, rng, CURVE_REPS))
        tau_reps = reps[:, -1]
        ftt_reps = flops_to_target_batch(thin.grid, reps, tau_reps)
    else:
        tau_reps, ftt_reps = np.array([tau]), np.array([ftt])
    return _Ref(tau, ftt, tau_reps, ftt_reps, ref_runs["final_mean_length"].to_numpy(float))


def _method_result(method: str, runs: pd.DataFrame, frames_idx: dict, key: BoardKey, ref: _Ref | None) -> MethodResult:
    runs = runs.sort_values(["seed", "run_id"])  # a fixed order whatever the files are called
    ids = runs["run_id"].tolist()
    rng = rng_for(*map(str, vars(key).values()), method)
    cs = curve_set([frames_idx["curves"][r] for r in ids], key.budget_flops)
    same = method == REFERENCE_METHOD
    idx = resample_indices(len(ids), rng, CURVE_REPS)
    (band_grid, low, high), mid, ftt, savings = _curve_estimates(cs, idx, ref, same)
    col = lambda name: runs[name].tolist()  # noqa: E731
    lengths = col("final_mean_length")
    domain_accuracy, flops_by_group = _mean_tables(ids, frames_idx["domains"], frames_idx["groups"])
    base = estimate(col("base_accuracy"), rng)
    return MethodResult(
        method=method, is_reference=same, run_ids=ids, seeds=col("seed"),
        final_accuracy=estimate(col("final_accuracy"), rng), base_accuracy=base,
        flops_to_target=ftt, savings=savings,
        accuracy_per_pflop=estimate(col("accuracy_per_pflop"), rng),
        mean_length=estimate(lengths, rng),
        length_ratio=NONE if ref is None else estimate_pair(lengths, ref.lengths, rng, same_runs=same),
        distillation_share=estimate(col("distillation_share"), rng),
        self_teacher_reduction=estimate(col("self_teacher_reduction"), rng),
        counted_flops=estimate(col("counted_flops"), rng),
        curves=cs, curve_mid=mid, band_grid=band_grid, curve_low=low, curve_high=high,
        # fitted to the aggregate at the thinned grid's points: the same curve, a third of the work
        fit=fit_scaling_curve(band_grid, np.interp(band_grid, cs.grid, mid),
                              base.value if base.value is not None else float(mid[0])),
        domain_accuracy=domain_accuracy, flops_by_group=flops_by_group,
        per_run={c: col(c) for c in _PER_RUN},
    )


def _per_run_tables(frames: Frames) -> tuple[dict, dict]:
    """run_id -> {domain: final accuracy}, and run_id -> {(phase group, kind): counted FLOPs}."""
    domains: dict[str, dict[str, float]] = {}
    for rid, dom, acc in frames.domains[["run_id", "domain", "final_accuracy"]].itertuples(index=False):
        domains.setdefault(rid, {})[dom] = acc
    led = frames.ledger[frames.ledger["category"] == "counted"]
    sums = led.assign(group=led["phase"].map(phase_group)).groupby(["run_id", "group", "kind"])["flops"].sum()
    groups: dict[str, dict[tuple[str, str], float]] = {}
    for (rid, group, kind), flops in sums.items():
        groups.setdefault(rid, {})[(group, kind)] = float(flops)
    return domains, groups


def _mean_tables(ids: list[str], domains: dict, groups: dict) -> tuple[dict[str, float], dict]:
    """Aggregate per-domain final accuracy, and mean FLOPs per (phase group, kind), over runs."""
    dom_values: dict[str, list[float]] = {}
    for rid in ids:
        for d, acc in domains.get(rid, {}).items():
            dom_values.setdefault(d, []).append(acc)
    total: dict[tuple[str, str], float] = {}
    for rid in ids:
        for k, v in groups.get(rid, {}).items():
            total[k] = total.get(k, 0.0) + v / len(ids)
    return {d: point(v) for d, v in sorted(dom_values.items())}, total


SUITE_ORDER = ("math_code", "four_domain", "math", "code")
DIFFICULTY_ORDER = ("easy", "medium", "hard")


def _board_order(key: BoardKey) -> tuple:
    """The paper's suites first, then easy -> hard, then anything else by name."""
    def rank(value: str, order: tuple[str, ...]) -> tuple[int, str]:
        return (order.index(value) if value in order else len(order), value)

    return (key.profile, rank(key.suite, SUITE_ORDER), rank(key.difficulty, DIFFICULTY_ORDER), key.suite_version,
            key.budget_flops)


def build_boards(frames: Frames) -> list[Board]:
    """One Board per (profile, suite, difficulty, suite version, budget), methods reference first."""
    curves = curves_by_run(frames.curves)
    domains, groups = _per_run_tables(frames)
    idx = {"curves": curves, "domains": domains, "groups": groups}
    boards = []
    for values, runs in frames.runs.groupby(BOARD_COLUMNS, sort=True):
        key = BoardKey(*(str(v) for v in values[:4]), float(values[4]))
        ref = _reference(runs, curves, key)
        results = [_method_result(m, g, idx, key, ref) for m, g in runs.groupby("method")]
        results.sort(key=lambda r: (not r.is_reference, -(r.final_accuracy.value or 0.0), r.method))
        board = Board(key, REFERENCE_METHOD if ref else None, ref.tau if ref else None, results,
                      n_domains=int(runs["n_domains"].max()))
        if ref is None:
            board.warnings.append(f"no {REFERENCE_METHOD} runs on this board: no target, savings or length ratio")
        seeds = {tuple(sorted(r.seeds)) for r in results}
        if len(seeds) > 1:
            board.warnings.append("methods were run on different seeds; intervals are not paired")
        boards.append(board)
    labels = [b.key.label for b in boards]
    for b in boards:
        if labels.count(b.key.label) > 1:
            b.label = f"{b.key.label} · v{b.key.suite_version} · {b.key.budget_flops:.2g} FLOPs"
    return sorted(boards, key=lambda b: _board_order(b.key))
