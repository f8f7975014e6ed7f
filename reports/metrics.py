"""The metrics of docs/metrics.md, as pure functions on runs' numbers (no pandas, no I/O).

Curves are (flops, accuracy) sequences sorted by cumulative counted FLOPs, the first point at 0 FLOPs
(the base model). Conventions every metric here shares (docs/metrics.md, "Curves and interpolation"):

- Carried flat: a run that stopped before its budget keeps its last accuracy up to the budget.
- Cut at the budget: a run whose last step took it past the budget is read up to the budget only,
  its accuracy there read as between evaluations; of evaluations at equal FLOPs the last stands.
- Between two evaluations accuracy is linear in log10 FLOPs. log10 is undefined at 0, so on the
  segment that starts at the base point (0 FLOPs) it is linear in FLOPs instead; a curve whose base
  point already reaches the target reaches it at 0 FLOPs.
- "Not reached" is None for one run, NaN in the vectorised forms used by the bootstrap.

A per-FLOP comparison is made at matched FLOPs (`accuracy_at_fractions`, `area_under_curve`,
`upper_envelope`) or at matched accuracy (`flops_to_target`, `savings`), never by dividing a gain by
what a method chose to spend: `gain_per_pflop_spent` does that, and is kept for the downloads only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

PFLOP = 1e15
REFERENCE_METHOD = "grpo-joint"
# A finding's measurement protocol, not a way to post-train a model: `recover` learns one domain, loses
# it, then recovers it twice (GRPO on a clone, self-OPD on the student), so its curve is the protocol's
# student and its FLOPs include an arm that never reaches it. Its rows are shown but never ranked: no
# lead in a board's sentence, no place on the frontier.
PROTOCOL_METHODS = frozenset({"recover"})
BUDGET_FRACTIONS = (0.10, 0.25, 0.50, 1.00)  # accuracy at matched FLOPs: these fractions of the budget
TARGET_GAINS = (0.5, 0.75, 0.9)  # targets tau_k = base + k x (reference final - base)
FIRST_MILESTONE = 0.01  # the area under the curve runs from this fraction of the budget to the budget
EXPERT_PREFIXES = ("expert:", "stage:")  # ledger phases that train the teachers distillation reads
_TOL = 1e-12  # accuracy that equals tau up to float noise has reached it


def cut_at_budget(flops: Sequence[float], accuracy: Sequence[float],
                  budget_flops: float) -> tuple[np.ndarray, np.ndarray]:
    """The curve up to the budget: a run whose last step took it past the budget ends at the budget,
    with the accuracy read there (as between evaluations); of evaluations at equal FLOPs the last
    stands. Nothing past the budget is compared.

    Returns:
        flops [P' <= P], accuracy [same], as float arrays.
    """
    f = np.asarray(flops, dtype=float)
    a = np.asarray(accuracy, dtype=float)
    if f.shape != a.shape or f.ndim != 1 or f.size == 0:
        raise ValueError("flops and accuracy must be equal-length, non-empty 1-D sequences")
    last = np.r_[f[1:] != f[:-1], True]  # of evaluations at equal FLOPs, the last
    f, a = f[last], a[last]
    if f[-1] > budget_flops:
        inside = f < budget_flops
        at_budget = interpolate_curve(f, a, [budget_flops])
        f, a = np.r_[f[inside], budget_flops], np.r_[a[inside], at_budget]
    return f, a


def to_budget(flops: Sequence[float], accuracy: Sequence[float],
              budget_flops: float) -> tuple[np.ndarray, np.ndarray]:
    """The curve as every metric reads it, ending at the budget: cut there (`cut_at_budget`) if its
    last step crossed it, carried flat to it if the run stopped before.

    Returns:
        flops [P'], accuracy [same], as float arrays.
    """
    f, a = cut_at_budget(flops, accuracy, budget_flops)
    if f[-1] < budget_flops:
        f, a = np.append(f, budget_flops), np.append(a, a[-1])
    return f, a


def _segment_position(x: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
    """Where x lies between x0 and x1 (0..1): in log10 FLOPs, or in FLOPs when x0 is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        lin = x / np.where(x1 > 0, x1, 1.0)
        log = (np.log10(np.maximum(x, 1e-300)) - np.log10(np.maximum(x0, 1e-300))) / (
            np.log10(np.maximum(x1, 1e-300)) - np.log10(np.maximum(x0, 1e-300))
        )
    t = np.where(x0 > 0, log, lin)
    return np.where(x1 > x0, np.clip(t, 0.0, 1.0), 1.0)


def interpolate_rows(flops: Sequence[float], curves: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Each curve's accuracy at FLOP values x, interpolated as the module docstring says, flat past the end.

    Args:
        flops: [G] shared evaluation FLOPs, sorted, the first may be 0.
        curves: [R, G] accuracies.
        x: [X] FLOP values for every curve, or [R, X] a row of values per curve.
    Returns:
        [R, X] accuracies.
    """
    f = np.asarray(flops, dtype=float)
    c = np.atleast_2d(np.asarray(curves, dtype=float))
    x = np.asarray(x, dtype=float)
    xb = np.broadcast_to(x, (c.shape[0], x.shape[-1])) if x.ndim <= 1 else x
    hi = np.clip(np.searchsorted(f, xb, side="left"), 0, f.size - 1)  # first point at or after x
    lo = np.maximum(hi - 1, 0)
    exact = f[hi] <= xb  # at or past the last point, or exactly on a point
    t = _segment_position(xb, f[lo], f[hi])
    a_lo, a_hi = np.take_along_axis(c, lo, axis=1), np.take_along_axis(c, hi, axis=1)
    return np.where(exact | (hi == lo), a_hi, a_lo + t * (a_hi - a_lo))


def interpolate_curve(flops: Sequence[float], accuracy: Sequence[float], grid: Sequence[float]) -> np.ndarray:
    """One curve's accuracy at each grid FLOP value (`interpolate_rows` for one curve); [len(grid)]."""
    return interpolate_rows(flops, np.asarray(accuracy, dtype=float)[None, :], np.atleast_1d(grid))[0]


def accuracy_at_fractions(flops: Sequence[float], accuracy: Sequence[float], budget_flops: float,
                          fractions: Sequence[float] = BUDGET_FRACTIONS) -> np.ndarray:
    """Accuracy at matched FLOPs: the curve to the budget (`to_budget`) at each fraction of it; [F]."""
    f, a = to_budget(flops, accuracy, budget_flops)
    return interpolate_curve(f, a, np.asarray(fractions, dtype=float) * budget_flops)


def final_accuracy(flops: Sequence[float], accuracy: Sequence[float], budget_flops: float) -> float:
    """Accuracy at the budget (100% of it): the last evaluation carried flat, or read on the curve
    at the budget when a run's last step took it past the budget."""
    return float(accuracy_at_fractions(flops, accuracy, budget_flops, (1.0,))[0])


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


def targets_from_gain(base: np.ndarray | float, reference_final: np.ndarray | float,
                      gains: Sequence[float] = TARGET_GAINS) -> np.ndarray:
    """Targets tau_k = base + k x (reference final - base), one per k in `gains`.

    Args:
        base, reference_final: scalars or [R] (bootstrap replicates of the reference's curve).
    Returns:
        [K] for scalars, [R, K] for [R] inputs.
    """
    k = np.asarray(gains, dtype=float)
    b, r = np.asarray(base, dtype=float), np.asarray(reference_final, dtype=float)
    return b[..., None] + k * (r - b)[..., None]


def savings(method_flops: np.ndarray, reference_flops: np.ndarray) -> np.ndarray:
    """Savings at matched accuracy, 1 - FLOPs_to_target(method) / FLOPs_to_target(reference), elementwise.

    Args:
        method_flops, reference_flops: arrays (broadcastable) of FLOPs to the same target; NaN where
            the curve never reaches it.
    Returns:
        the savings; -inf where the method never reaches the target (it would need unbounded
        FLOPs: a bootstrap interval then says "unbounded below"); NaN where the reference never
        does or reaches it at 0 FLOPs (its base model already did: the ratio is undefined).
    """
    m = np.asarray(method_flops, dtype=float)
    r = np.asarray(reference_flops, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 1.0 - np.where(np.isnan(m), np.inf, m) / r
    return np.where(np.isfinite(r) & (r > 0), out, np.nan)


def area_under_curve_batch(flops: Sequence[float], curves: np.ndarray, budget_flops: float,
                           first: float = FIRST_MILESTONE) -> np.ndarray:
    """Mean accuracy over log10 FLOPs from `first` x budget to the budget, for curves on one grid.

    The integral follows the interpolation exactly: trapezoids in log10 FLOPs between evaluations,
    and, on the stretch below a curve's first positive evaluation (linear in FLOPs from the base
    point), the closed form of that line integrated over log10 FLOPs.

    Args:
        flops: [G] shared evaluation FLOPs, sorted, the first may be 0.
        curves: [R, G] accuracies (flat past the last point, as carried flat).
    Returns:
        [R] normalised areas: accuracies in [0, 1].
    """
    f = np.asarray(flops, dtype=float)
    c = np.atleast_2d(np.asarray(curves, dtype=float))
    lo, hi = first * budget_flops, float(budget_flops)
    x = np.r_[lo, f[(f > lo) & (f < hi)], hi]  # [X] breakpoints, all > 0
    y = interpolate_rows(f, c, x)  # [R, X]
    lx = np.log10(x)
    seg = 0.5 * (y[:, 1:] + y[:, :-1]) * np.diff(lx)  # [R, X-1]
    positive = np.flatnonzero(f > 0)
    if positive.size and positive[0] > 0 and f[positive[0]] > lo:
        i1 = positive[0]  # the first segment lies inside the base point's linear stretch [0, f1]
        f1, v = f[i1], min(f[i1], hi)
        a0, a1 = c[:, i1 - 1], c[:, i1]
        seg[:, 0] = a0 * (math.log10(v) - math.log10(lo)) + (a1 - a0) * (v - lo) / (f1 * math.log(10))
    return seg.sum(axis=1) / (lx[-1] - lx[0])


def area_under_curve(flops: Sequence[float], accuracy: Sequence[float], budget_flops: float) -> float:
    """`area_under_curve_batch` for one run's curve, to the budget (`to_budget`)."""
    f, a = to_budget(flops, accuracy, budget_flops)
    return float(area_under_curve_batch(f, a[None, :], budget_flops)[0])


def upper_envelope(curves: np.ndarray) -> np.ndarray:
    """Which curve is on top at each FLOP value: the Pareto frontier of whole curves.

    Args:
        curves: [M, X] each method's aggregate accuracy on shared FLOP values.
    Returns:
        [X] the index of the highest curve at each value; a tie goes to the lower index (the
        method listed first), so a method is on the frontier only where it is strictly above the
        ones before it.
    """
    return np.argmax(np.asarray(curves, dtype=float), axis=0)


def envelope_segments(grid: Sequence[float], leader: Sequence[int]) -> list[tuple[int, float, float]]:
    """The envelope as runs of one leader: [(curve index, first FLOPs, last FLOPs)] in FLOP order.

    A segment ends where the next one starts (the leader changes between two grid values; the
    switch is placed at the later one), so the segments cover the grid without gaps.
    """
    g, lead = np.asarray(grid, dtype=float), np.asarray(leader)
    if g.size == 0:
        return []
    starts = np.flatnonzero(np.r_[True, lead[1:] != lead[:-1]])
    ends = np.r_[starts[1:], g.size - 1]
    return [(int(lead[s]), float(g[s]), float(g[e])) for s, e in zip(starts, ends)]


def gain_per_pflop_spent(final: float, base: float, counted_flops: float) -> float | None:
    """(final accuracy - base accuracy) per counted PFLOP; None for a run that counted nothing.

    Downloads only (docs/metrics.md, "Gain per PFLOP spent"): it divides by what a method chose to
    spend, so a run that stops early after a small gain beats one that goes on to a larger one.
    """
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


def expert_flops(phases: Mapping[str, float]) -> float:
    """The FLOPs of the phases that train the teachers distillation reads (`EXPERT_PREFIXES`), from
    `phase_flops`' per-phase totals."""
    return sum(v for k, v in phases.items() if k.startswith(EXPERT_PREFIXES))


def distillation_share(ledger: Iterable[Mapping[str, Any]]) -> float | None:
    """At the stopping rule: counted FLOPs of phase `distill` / those of phases `expert:*` and `stage:*`.

    None for a run with no expert or stage training, or none in phase `distill` (recover's stages,
    whose distillation arm measures recovery): the share is undefined, not zero.
    """
    phases = phase_flops(ledger)
    experts = expert_flops(phases)
    if experts <= 0 or "distill" not in phases:
        return None
    return phases.get("distill", 0.0) / experts


def _distillation_start(curve: Sequence[Mapping[str, Any]]) -> int | None:
    """Index of the evaluation at the start of distillation, None when the curve never distils.

    The first evaluation taken during distillation (ledger phase `distill`, or distillation FLOPs
    spent) or, when nothing but distillation was spent since it, the one before it: the end of
    the last expert is the student as distillation found it.
    """
    for i, p in enumerate(curve):
        if p.get("ledger_phase") == "distill" or p["phase_flops"].get("distill", 0.0) > 0:
            break
    else:
        return None
    if i > 0:
        spent = lambda q: sum(v for k, v in q["phase_flops"].items() if k != "distill")  # noqa: E731
        if spent(curve[i - 1]) >= spent(curve[i]) * (1 - 1e-9):
            return i - 1
    return i


def evaluation_prompts(eval_size: int | None, n_domains: int,
                       domain_eval_size: Mapping[str, int] | None = None) -> float | None:
    """N of one evaluation's binomial standard error, sqrt(p (1 - p) / N), for a suite accuracy that is
    the mean of its domains' accuracies: eval_size x n_domains, or, where domains scored different
    numbers of prompts (`domain_eval_size`), n_domains^2 / sum(1 / n_d), which the variance of a mean
    of proportions gives (and which is eval_size x n_domains when they are equal)."""
    if domain_eval_size:
        return len(domain_eval_size) ** 2 / sum(1.0 / n for n in domain_eval_size.values())
    return eval_size * n_domains if eval_size and n_domains >= 1 else None


def plateau_distillation_share(curve: Sequence[Mapping[str, Any]], prompts: float | None) -> float | None:
    """Distillation share at the held-out plateau (docs/metrics.md, "Distillation share").

    From the start of distillation on, the first evaluation whose accuracy is within one binomial
    standard error, sqrt(best (1 - best) / N), of the best of those evaluations; N = the held-out
    prompts of one evaluation (`evaluation_prompts`). The share is that point's distillation FLOPs /
    its expert (or stage) FLOPs, both from its `phase_flops`.

    Args:
        curve: the record's curve points; each needs `phase_flops` (and may have `ledger_phase`).
        prompts: N, from the record's `eval_size`, domains and `domain_eval_size`.
    Returns:
        the share, or None when the record lacks these fields, never distils, or has no experts.
    """
    if not prompts or not curve or any(not isinstance(p.get("phase_flops"), dict) for p in curve):
        return None
    start = _distillation_start(curve)
    if start is None:
        return None
    points = curve[start:]
    accuracy = np.array([p["accuracy"] for p in points], dtype=float)
    best = float(accuracy.max())
    se = math.sqrt(best * (1.0 - best) / prompts)
    plateau = points[int(np.argmax(accuracy >= best - se - _TOL))]
    experts = expert_flops(plateau["phase_flops"])
    if experts <= 0:
        return None
    return plateau["phase_flops"].get("distill", 0.0) / experts


def expert_tail_share(method_metrics: Mapping[str, Any] | None, ledger: Iterable[Mapping[str, Any]]) -> float | None:
    """FLOPs experts spent after they stopped improving (`method_metrics["expert_tail_flops"]`) / all
    expert (or stage) FLOPs; None where the record does not report it or has no expert FLOPs."""
    tail = (method_metrics or {}).get("expert_tail_flops")
    experts = expert_flops(phase_flops(ledger))
    if tail is None or experts <= 0:
        return None
    return float(tail) / experts


def length_ratio(mean_length: float | None, reference_mean_length: float | None) -> float | None:
    """Mean response length / the reference's; None when either is missing or the reference's is 0."""
    if mean_length is None or not reference_mean_length:
        return None
    return mean_length / reference_mean_length


def recovery_forgetting(recovery: Mapping[str, Any] | None) -> tuple[float | None, float | None]:
    """(forgetting, noise) of a recovery: the self-teacher's held-out accuracy on the domain minus the
    lost student's, and two binomial standard errors of one check at the self-teacher's accuracy,
    2 sqrt(p (1 - p) / check_size). Forgetting under the noise means nothing measurable was lost, so
    the run's reduction measures no recovery. (None, None) where the record lacks the numbers."""
    recovery = recovery or {}
    teacher, lost, size = (recovery.get(k) for k in ("teacher_accuracy", "lost_accuracy", "check_size"))
    if teacher is None or lost is None or not size:
        return None, None
    return float(teacher) - float(lost), 2.0 * math.sqrt(teacher * (1.0 - teacher) / size)


def forgot_measurably(forgetting: float, noise: float) -> bool:
    """Whether a recovery had something to recover: the student lost at least two standard errors of
    one check, and more than nothing (a check at 0% or 100% accuracy has no binomial error)."""
    return forgetting > 0 and forgetting >= noise


def run_forgot(forgetting: Any, noise: Any) -> bool | None:
    """`forgot_measurably` for one run's values as the runs frame holds them: None where the run has no
    recovery check (either value missing, None or NaN)."""
    if forgetting is None or noise is None or math.isnan(forgetting) or math.isnan(noise):
        return None
    return forgot_measurably(float(forgetting), float(noise))


def self_teacher_reduction(recovery: Mapping[str, Any] | None) -> float | None:
    """GRPO's recovery FLOPs / self-OPD's (record["recovery"]). An arm that did not reach the target
    within its cap needs more FLOPs than it was given, without bound, as a curve that never reaches a
    target: 0 where only self-OPD failed, inf where only GRPO did; None where neither recovered (or
    self-OPD needed no step), so that a failed seed counts against the arm that failed, not dropped."""
    if not recovery:
        return None
    grpo, opd = recovery.get("grpo_flops"), recovery.get("opd_flops")
    if grpo is None and opd is None:
        return None
    if opd is None:
        return 0.0
    if grpo is None:
        return math.inf
    if opd <= 0:
        return None
    return float(grpo) / float(opd)
