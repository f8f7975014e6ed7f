"""Leaderboards: the runs of one comparison, aggregated per method with intervals (docs/metrics.md).

A board is every run with the same profile, suite, difficulty, suite version and budget: the runs
that may be compared. Within a board the reference is `grpo-joint`: its gain over the base model
sets the targets tau_k of "FLOPs to target" and "savings" (reports.relative). Every method is
compared at matched FLOPs (accuracy at fractions of the budget, area under the curve, the Pareto
frontier of whole curves) and at matched accuracy (FLOPs to each target, savings).

    boards = build_boards(to_frames(records))
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from reports.fit import CurveFit, fit_scaling_curve
from reports.metrics import (
    BUDGET_FRACTIONS, FIRST_MILESTONE, PROTOCOL_METHODS, REFERENCE_METHOD, TARGET_GAINS, envelope_segments,
    interpolate_curve, run_forgot, upper_envelope,
)
from reports.records import ACCURACY_AT, BOARD_COLUMNS, Frames
from reports.relative import Reference, Relative, at_spend, empty_relative, reference_bootstrap, targets_and_savings
from reports.stats import CURVE_REPS, NONE, CurveSet, Estimate, curve_set, estimate, estimate_pair, point, \
    resample_indices, rng_for

PHASE_GROUPS = (("expert:", "expert training"), ("stage:", "self-GRPO stages"), ("distill", "distillation"),
                ("train", "training"), ("recover:", "recovery"))
FRONTIER_POINTS = 257  # log-spaced FLOP values the frontier is read at, besides every evaluation


def phase_group(phase: str) -> str:
    """Coarse phase for the stacked bars: expert training, self-GRPO stages, distillation, ..."""
    for prefix, name in PHASE_GROUPS:
        if phase == prefix or (prefix.endswith(":") and phase.startswith(prefix)):
            return name
    return "other"


# per-run columns of the runs frame a method keeps (in seed order) for figures and findings
_PER_RUN = ("final_accuracy", "base_accuracy", "counted_flops", "final_mean_length", "gain_per_pflop_spent",
            "distillation_share", "distillation_share_plateau", "expert_tail_share", "self_teacher_reduction",
            "check_size", "recovery_forgetting", "recovery_noise", "auc", *ACCURACY_AT)
# MethodResult attribute -> runs-frame column, for the metrics that are one number per run
_PER_RUN_ESTIMATES = {
    "auc": "auc", "base_accuracy": "base_accuracy", "gain_per_pflop_spent": "gain_per_pflop_spent",
    "distillation_share": "distillation_share", "distillation_share_plateau": "distillation_share_plateau",
    "expert_tail_share": "expert_tail_share", "self_teacher_reduction": "self_teacher_reduction",
    "counted_flops": "counted_flops",
}


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
    """One method on one board: its runs, metrics over seeds, aggregate curve and band.

    accuracy_at: fraction of the budget -> accuracy there (1.0: the final accuracy); flops_to_target
    and savings: target gain k -> the metric at tau_k; the other Estimates are one metric each.
    """

    method: str
    is_reference: bool
    run_ids: list[str]
    seeds: list[int]
    accuracy_at: dict[float, Estimate]
    relative: Relative
    auc: Estimate
    base_accuracy: Estimate
    gain_per_pflop_spent: Estimate
    mean_length: Estimate
    length_ratio: Estimate
    distillation_share: Estimate
    distillation_share_plateau: Estimate
    expert_tail_share: Estimate
    self_teacher_reduction: Estimate
    counted_flops: Estimate
    curves: CurveSet
    curve_mid: np.ndarray  # [G] aggregate accuracy on curves.grid
    band_grid: np.ndarray  # [B] the FLOPs of the band: curves.grid thinned (stats.CurveSet.thinned)
    curve_low: np.ndarray | None  # [B] 95% band, None for one seed
    curve_high: np.ndarray | None
    fit: CurveFit | None
    # self_teacher_reduction over the runs whose student measurably forgot, as a board of them alone gives it
    forgot_reduction: Estimate = NONE
    domain_accuracy: dict[str, float] = field(default_factory=dict)  # aggregate final, per domain
    flops_by_group: dict[tuple[str, str], float] = field(default_factory=dict)  # (phase group, kind) -> mean
    per_run: dict[str, list] = field(default_factory=dict)  # column of the runs frame -> values, seed order

    @property
    def is_protocol(self) -> bool:
        """A finding's measurement protocol (`PROTOCOL_METHODS`): shown, never ranked."""
        return self.method in PROTOCOL_METHODS

    @property
    def n_seeds(self) -> int:
        return len(self.run_ids)

    @property
    def final_accuracy(self) -> Estimate:
        return self.accuracy_at[1.0]

    @property
    def flops_to_target(self) -> dict[float, Estimate]:
        return self.relative.flops_to_target

    @property
    def savings(self) -> dict[float, Estimate]:
        return self.relative.savings

    def metrics(self) -> dict[str, Estimate]:
        """Every metric by its download name (results.json / results.csv; docs/metrics.md defines each)."""
        out = {"final_accuracy": self.final_accuracy}
        out.update({col: self.accuracy_at[f] for f, col in zip(BUDGET_FRACTIONS, ACCURACY_AT) if f != 1.0})
        out["auc"] = self.auc
        for k in TARGET_GAINS:
            out[f"flops_to_target_{gain_name(k)}"] = self.flops_to_target[k]
        for k in TARGET_GAINS:
            out[f"savings_{gain_name(k)}"] = self.savings[k]
        out["reference_accuracy_at_spend"] = self.relative.reference_at_spend
        out["accuracy_minus_reference_at_spend"] = self.relative.minus_reference_at_spend
        for name in ("mean_length", "length_ratio", "distillation_share", "distillation_share_plateau",
                     "expert_tail_share", "self_teacher_reduction", "counted_flops", "base_accuracy",
                     "gain_per_pflop_spent"):
            out[name] = getattr(self, name)
        return out


def gain_name(k: float) -> str:
    """A target's short name: 0.75 -> "k75" (tau at 75% of the reference's gain)."""
    return f"k{round(100 * k):d}"


@dataclass
class Frontier:
    """The upper envelope of the methods' aggregate curves from the first milestone to the budget.

    grid [X]: FLOP values; curves [M, X]: each method's aggregate curve there (board order); top [X]:
    the envelope's accuracy; leader [X]: the method on top at each; segments: (method, from FLOPs,
    to FLOPs), one per stretch with the same method on top.
    """

    grid: np.ndarray
    methods: list[str]  # the ranked methods, in the board's order: one row of `curves` each
    curves: np.ndarray
    top: np.ndarray
    leader: list[str]
    segments: list[tuple[str, float, float]]


@dataclass
class Board:
    key: BoardKey
    reference: str | None
    targets: dict[float, float]  # target gain k -> tau_k; empty without the reference
    methods: list[MethodResult]
    frontier: Frontier | None = None
    n_domains: int = 0
    warnings: list[str] = field(default_factory=list)
    label: str = ""  # key.label, plus version and budget where two boards would share it
    run_marks: dict[str, list[str]] = field(default_factory=dict)  # runs its warnings name: why, in a few words

    def __post_init__(self) -> None:
        self.label = self.label or self.key.label

    @property
    def odd_runs(self) -> set[str]:
        """The runs the board marks (another base, suite, settings, ..., or held-out reads)."""
        return set(self.run_marks)

    def method(self, name: str) -> MethodResult:
        return next(m for m in self.methods if m.method == name)


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


def _band(cs: CurveSet, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """(band grid [B], replicates [R, B] or None for one run, 95% band low [B], high [B])."""
    thin = cs.thinned()
    if cs.n_runs < 2:
        return thin.grid, None, None, None
    reps = thin.replicates(idx)
    low, high = np.quantile(reps, [0.025, 0.975], axis=0)
    return thin.grid, reps, low, high


def _reference(runs: pd.DataFrame, curves: dict, key: BoardKey) -> Reference | None:
    ref_runs = runs[runs["method"] == REFERENCE_METHOD].sort_values(["seed", "run_id"])
    if ref_runs.empty:
        return None
    cs = curve_set([curves[r] for r in ref_runs["run_id"]], key.budget_flops)
    rng = rng_for(*map(str, vars(key).values()), REFERENCE_METHOD)
    return reference_bootstrap(cs, key.budget_flops, ref_runs["final_mean_length"].to_numpy(float), rng)


def _method_result(method: str, runs: pd.DataFrame, frames_idx: dict, key: BoardKey,
                   ref: Reference | None) -> MethodResult:
    runs = runs.sort_values(["seed", "run_id"])  # a fixed order whatever the files are called
    ids = runs["run_id"].tolist()
    rng = rng_for(*map(str, vars(key).values()), method)

    def own(metric: str) -> np.random.Generator:
        """A metric's own bootstrap draws: its interval never moves because another metric's
        definition (or whether it is defined for these runs) changed."""
        return rng_for(*map(str, vars(key).values()), method, metric)

    cs = curve_set([frames_idx["curves"][r] for r in ids], key.budget_flops)
    same = method == REFERENCE_METHOD
    idx = ref.idx if same and ref is not None else resample_indices(len(ids), rng, CURVE_REPS)
    mid = cs.aggregate()
    band_grid, reps, low, high = _band(cs, idx)
    col = lambda name: runs[name].tolist()  # noqa: E731
    relative = empty_relative()
    if ref is not None:
        spend, spend_diff = at_spend(runs["counted_flops"].to_numpy(float), runs["accuracy_at_100pct"].to_numpy(float),
                                     idx, ref)
        relative = Relative(relative.flops_to_target, relative.savings, spend, spend_diff)
        if ref.has_targets:
            ftt, sav = targets_and_savings(cs, mid, reps, band_grid, ref, same)
            relative = Relative(ftt, sav, spend, spend_diff)
    lengths = col("final_mean_length")
    domain_accuracy, flops_by_group = _mean_tables(ids, frames_idx["domains"], frames_idx["groups"])
    single = {attr: estimate(col(column), own(attr)) for attr, column in _PER_RUN_ESTIMATES.items()}
    base = single["base_accuracy"]
    per_run = {c: col(c) for c in _PER_RUN}
    return MethodResult(
        method=method, is_reference=same, run_ids=ids, seeds=col("seed"),
        accuracy_at={f: estimate(col(c), own(c)) for f, c in zip(BUDGET_FRACTIONS, ACCURACY_AT)},
        relative=relative, mean_length=estimate(lengths, own("mean_length")),
        length_ratio=NONE if ref is None else estimate_pair(lengths, ref.lengths, own("length_ratio"), same_runs=same),
        curves=cs, curve_mid=mid, band_grid=band_grid, curve_low=low, curve_high=high,
        # fitted to the aggregate at the thinned grid's points: the same curve, a third of the work
        fit=fit_scaling_curve(band_grid, np.interp(band_grid, cs.grid, mid),
                              base.value if base.value is not None else float(mid[0])),
        domain_accuracy=domain_accuracy, flops_by_group=flops_by_group, per_run=per_run, **single,
    )


def _forgot_reduction(method: str, runs: pd.DataFrame, frames_idx: dict, key: BoardKey) -> Estimate:
    """The self-teacher reduction over the runs whose student measurably forgot the domain
    (`metrics.run_forgot`), exactly as a board of those runs alone would give it (its own
    bootstrap draws, no reference); NONE where no run did, or no run has a recovery."""
    lost, noise = runs["recovery_forgetting"].to_numpy(float), runs["recovery_noise"].to_numpy(float)
    kept = [bool(run_forgot(a, b)) for a, b in zip(lost, noise)]
    if not any(kept):
        return NONE
    return _method_result(method, runs[kept], frames_idx, key, None).self_teacher_reduction


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


def frontier(methods: list[MethodResult], budget_flops: float) -> Frontier | None:
    """The Pareto frontier of whole curves: which method's aggregate curve is on top at each FLOP value.

    Read at every evaluation of every method and at FRONTIER_POINTS log-spaced values from the first
    milestone (1% of the budget) to the budget; a tie goes to the method listed first. Protocols
    (`MethodResult.is_protocol`) are left out: they are not ranked.
    """
    methods = [m for m in methods if not m.is_protocol]
    if not methods:
        return None
    lo = FIRST_MILESTONE * budget_flops
    evals = np.concatenate([m.curves.grid for m in methods])
    inside = evals[(evals > lo) & (evals < budget_flops)]
    grid = np.unique(np.r_[np.geomspace(lo, budget_flops, FRONTIER_POINTS), inside])
    curves = np.stack([interpolate_curve(m.curves.grid, m.curve_mid, grid) for m in methods])  # [M, X]
    leader = upper_envelope(curves)
    ranked = [m.method for m in methods]
    segments = [(ranked[i], a, b) for i, a, b in envelope_segments(grid, leader)]
    return Frontier(grid, ranked, curves, curves[leader, np.arange(grid.size)], [ranked[i] for i in leader], segments)


PROFILE_ORDER = ("tiny", "direct")  # the default world's boards first
SUITE_ORDER = ("math_code", "four_domain", "math", "code")
DIFFICULTY_ORDER = ("easy", "medium", "hard")


def _board_order(key: BoardKey) -> tuple:
    """The default world first, the paper's suites first, then easy -> hard, then anything else by name."""
    def rank(value: str, order: tuple[str, ...]) -> tuple[int, str]:
        return (order.index(value) if value in order else len(order), value)

    return (rank(key.profile, PROFILE_ORDER), rank(key.suite, SUITE_ORDER), rank(key.difficulty, DIFFICULTY_ORDER),
            key.suite_version, key.budget_flops)


def _mark_odd_provenance(board: Board, runs: pd.DataFrame) -> None:
    """Runs whose base model (weights hash), suite content (its prompts and answers, hashed), world
    version, rollout engine or settings differ from the board's majority: a changed base or suite
    is detected here, never discovered by accident; on a GPU the
    engines charge the same tokens differently (the torch engine its padding); token caps and the
    evaluation schedule change the curve. A run evaluated on another number of held-out prompts, or
    whose base accuracy (its curve's first point: the same base, prompts and token cap give the same
    one) is not the board's, is not measured as the others are, whether or not its record says why
    (older records keep no settings). And runs of a method whose phases drew their samples
    otherwise than its other runs' (`phase_streams`: opd-multi's experts one after another or side
    by side give other numbers). Marked on the board and method pages."""
    for column, what, mark in (
            ("base_hash", "started from another base model (weights hash)", "another base model"),
            ("suite_hash", "drew their prompts from another suite (content hash)", "another suite"),
            ("eval_size", "were evaluated on another number of held-out prompts per domain", "another eval size"),
            ("base_accuracy", "started from another base accuracy (another base, evaluation or token cap)",
             "another base accuracy"),
            ("world_version", "started from another world version", "another world version"),
            ("rollout", "sampled with another rollout engine", "another rollout engine"),
            ("settings", "made with other settings (token caps, evaluation schedule, device)", "other settings")):
        _mark_odd(board, runs, column, what, "the board's majority", mark)
    for method, of_method in runs.groupby("method", sort=True):
        _mark_odd(board, of_method, "phase_streams", "drew their phases' samples otherwise",
                  f"the majority of {method}'s runs", "phases drew samples otherwise")


def _mark_odd(board: Board, runs: pd.DataFrame, column: str, what: str, majority_of: str, mark: str) -> None:
    known = runs[runs[column].notna()]
    if known.empty:
        return
    majority = known[column].value_counts().index[0]
    odd = known[known[column] != majority]
    if not odd.empty:
        _mark(board, odd["run_id"], mark)
        board.warnings.append(f"{len(odd)} run(s) {what} than {majority_of} ({majority}): "
                              + ", ".join(sorted(odd["run_id"])))


def _mark(board: Board, run_ids: Iterable[str], why: str) -> None:
    """Mark runs on the board, each with why (`run_marks`, shown on its method page)."""
    for run_id in run_ids:
        board.run_marks.setdefault(run_id, []).append(why)


def _mark_heldout_reads(board: Board, runs: pd.DataFrame) -> None:
    """Runs of a ranked method that read held-out accuracy while they ran (`heldout_reads`): whatever the
    method says it did with it, what it delivered may have been chosen on the prompts it is scored on.
    A protocol's reads (`PROTOCOL_METHODS`: a recovery target) are its measurement, and are not marked."""
    read = runs[(runs["heldout_reads"].fillna(0) > 0) & ~runs["method"].isin(PROTOCOL_METHODS)]
    if not read.empty:
        _mark(board, read["run_id"], "read held-out accuracy")
        board.warnings.append(f"{len(read)} run(s) read held-out accuracy while they ran, so what they delivered "
                              "may have been chosen on the prompts it is scored on: "
                              + ", ".join(sorted(read["run_id"])))


def _note_cpus(board: Board, runs: pd.DataFrame) -> None:
    """Runs made on more than one kind of CPU: a record is rebuilt value for value only on the kind it
    names (each CPU picks its own kernels, so the last bits differ), so the board says which made what."""
    counts = runs["cpu"].dropna().value_counts()
    if len(counts) > 1:
        kinds = ", ".join(f"{cpu}: {n}" for cpu, n in counts.items())
        board.warnings.append(f"runs were made on {len(counts)} kinds of CPU ({kinds}); a record is rebuilt "
                              "value for value only on the kind of CPU it names")


def build_boards(frames: Frames) -> list[Board]:
    """One Board per (profile, suite, difficulty, suite version, budget), methods reference first."""
    curves = curves_by_run(frames.curves)
    domains, groups = _per_run_tables(frames)
    idx = {"curves": curves, "domains": domains, "groups": groups}
    boards = []
    for values, runs in frames.runs.groupby(BOARD_COLUMNS, sort=True):
        key = BoardKey(*(str(v) for v in values[:4]), float(values[4]))
        ref = _reference(runs, curves, key)
        results = []
        for method, group in runs.groupby("method"):
            results.append(_method_result(method, group, idx, key, ref))
            results[-1].forgot_reduction = _forgot_reduction(method, group, idx, key)
        results.sort(key=lambda r: (not r.is_reference, r.is_protocol, -(r.final_accuracy.value or 0.0), r.method))
        targets = {} if ref is None or not ref.has_targets else dict(zip(TARGET_GAINS, map(float, ref.tau)))
        board = Board(key, REFERENCE_METHOD if ref else None, targets, results, frontier(results, key.budget_flops),
                      n_domains=int(runs["n_domains"].max()))
        if ref is None:
            board.warnings.append(f"no {REFERENCE_METHOD} runs on this board: no targets, savings or length ratio")
        elif not ref.has_targets:
            board.warnings.append(
                f"{REFERENCE_METHOD} does not improve on the base on this board (final − base = "
                f"{100 * ref.gain:+.1f} points): targets, FLOPs to target and savings are undefined")
        seeds = {tuple(sorted(r.seeds)) for r in results}
        if len(seeds) > 1:
            board.warnings.append("methods were run on different seeds; intervals are not paired")
        _mark_odd_provenance(board, runs)
        _mark_heldout_reads(board, runs)
        _note_cpus(board, runs)
        boards.append(board)
    labels = [b.key.label for b in boards]
    for b in boards:
        if labels.count(b.key.label) > 1:
            b.label = f"{b.key.label} · v{b.key.suite_version} · {b.key.budget_flops:.2g} FLOPs"
    return sorted(boards, key=lambda b: _board_order(b.key))
