"""The preprint's four claims (DESIGN section 1) beside our measurements, each with a plain verdict.

A verdict compares the 95% interval with the claim's direction, never a point estimate alone:

- holds: the whole interval is on the claim's side (e.g. OPD saves FLOPs: savings interval above 0);
- does not hold at this scale: the whole interval is on the other side, or the method never reaches
  the target the claim needs;
- inconclusive: the interval straddles the line, only one seed was run, or boards disagree;
- not measured: no board has the runs the claim needs.

Claim 2 is about a figure, not a direction: it holds when the interval lies within a factor of two of
the paper's share, and does not hold when it lies wholly outside that band.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reports.boards import Board
from reports.metrics import REFERENCE_METHOD
from reports.stats import Estimate, estimate_pair, rng_for

HOLDS, FAILS, UNSURE, NOT_MEASURED = "holds", "does not hold at this scale", "inconclusive", "not measured"
PAPER = "Unpacking the Compute Efficiency of Strong-to-Weak OPD against GRPO (arXiv:2611.08453)"


@dataclass
class Row:
    board: str  # board label
    board_slug_key: tuple  # BoardKey fields, for linking
    measure: str  # what was measured, in words
    paper: str  # the paper's figure, in words
    estimate: Estimate
    unit: str  # "pct", "ratio", "num": how to print the estimate
    verdict: str
    note: str = ""


@dataclass
class Claim:
    number: int
    title: str
    paper: str
    rule: str  # how the verdict is decided, shown on the page
    rows: list[Row] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        verdicts = {r.verdict for r in self.rows}
        if not verdicts:
            return NOT_MEASURED
        return verdicts.pop() if len(verdicts) == 1 else UNSURE


def direction(est: Estimate, line: float, want_above: bool) -> str:
    """Verdict for a claim that the quantity is above (or below) `line`."""
    if est.value is None:
        return NOT_MEASURED
    if est.low is None or est.high is None:
        return UNSURE  # single seed: no interval, no verdict
    above, below = est.low > line, est.high < line
    if (above and want_above) or (below and not want_above):
        return HOLDS
    if (below and want_above) or (above and not want_above):
        return FAILS
    return UNSURE


def within_factor(est: Estimate, target: float, factor: float = 2.0) -> str:
    """Verdict for "about `target`": the interval inside [target / factor, target * factor]."""
    if est.value is None:
        return NOT_MEASURED
    if est.low is None or est.high is None:
        return UNSURE
    lo, hi = target / factor, target * factor
    if lo <= est.low and est.high <= hi:
        return HOLDS
    if est.high < lo or est.low > hi:
        return FAILS
    return UNSURE


def _pairs(boards: list[Board], method: str, suites: tuple[str, ...] | None = None):
    for b in boards:
        if suites is not None and b.key.suite not in suites:
            continue
        names = {m.method for m in b.methods}
        if method in names:
            ref = b.method(REFERENCE_METHOD) if REFERENCE_METHOD in names else None
            yield b, b.method(method), ref


def _row(b: Board, measure: str, paper: str, est: Estimate, unit: str, verdict: str, note: str = "") -> Row:
    return Row(b.label, tuple(vars(b.key).values()), measure, paper, est, unit, verdict, note)


def claim_savings(boards: list[Board]) -> Claim:
    claim = Claim(1, "Multi-teacher OPD matches joint GRPO on math+code with fewer FLOPs",
                  "42% fewer total training FLOPs at matched held-out accuracy (math_code)",
                  "holds when the savings interval lies above 0; does not hold when it lies below 0 or "
                  "opd-multi never reaches grpo-joint's final accuracy")
    for b, m, ref in _pairs(boards, "opd-multi", ("math_code",)):
        if ref is None:
            continue
        if m.flops_to_target.value is None:
            verdict, note = FAILS, "opd-multi never reaches the reference's final accuracy"
        else:
            verdict, note = direction(m.savings, 0.0, want_above=True), ""
        claim.rows.append(_row(b, "savings at matched accuracy", "42%", m.savings, "pct", verdict, note))
    return claim


def claim_distillation_share(boards: list[Board]) -> Claim:
    claim = Claim(2, "Distillation is a small fraction of the experts' training FLOPs",
                  "5.2% of the specialists' FLOPs with two domains, 8.0% with four",
                  "holds when the interval lies within a factor of 2 of the paper's share; does not hold "
                  "when it lies wholly outside that band")
    paper = {2: 0.052, 4: 0.080}
    for b, m, _ in _pairs(boards, "opd-multi"):
        if b.n_domains not in paper:
            continue
        target = paper[b.n_domains]
        est = m.distillation_share
        claim.rows.append(_row(b, f"distillation share ({b.n_domains} domains)", f"{target:.1%}", est, "pct",
                               within_factor(est, target)))
    return claim


def claim_external(boards: list[Board]) -> Claim:
    claim = Claim(3, "OPD from an external teacher loses to GRPO per FLOP and lengthens responses",
                  "opd-external buys less accuracy per FLOP than GRPO, and its students answer at greater length",
                  "per FLOP: holds when opd-external's accuracy gain per PFLOP minus grpo-joint's has an "
                  "interval below 0; length: holds when the length ratio's interval lies above 1")
    for b, m, ref in _pairs(boards, "opd-external"):
        if ref is None:
            continue
        diff = estimate_pair(m.per_run["accuracy_per_pflop"], ref.per_run["accuracy_per_pflop"],
                             rng_for(b.label, "claim3"), op="difference")
        claim.rows.append(_row(b, "accuracy gain per PFLOP, opd-external minus grpo-joint", "below 0", diff, "num",
                               direction(diff, 0.0, want_above=False)))
        claim.rows.append(_row(b, "mean response length / grpo-joint's", "above 1", m.length_ratio, "ratio",
                               direction(m.length_ratio, 1.0, want_above=True)))
    return claim


def claim_self_teachers(boards: list[Board]) -> Claim:
    claim = Claim(4, "Self-GRPO teachers cut the FLOPs needed to recover a domain",
                  "up to 50x fewer FLOPs than GRPO to recover single-domain accuracy",
                  "holds when the reduction's interval lies above 1 (self-OPD recovers with fewer FLOPs)")
    # The recovery protocol runs as its own method (`recover`); a self-grpo record carrying a
    # `recovery` block counts too.
    pairs = [*_pairs(boards, "recover"), *_pairs(boards, "self-grpo")]
    for b, m, _ in pairs:
        est = m.self_teacher_reduction
        if est.value is None:
            continue
        values = [v for v in m.per_run["self_teacher_reduction"] if v is not None and v == v]
        note = f"largest single run: {max(values):.1f}x" if values else ""
        claim.rows.append(_row(b, "recovery FLOPs, GRPO / self-OPD", "up to 50x", est, "ratio",
                               direction(est, 1.0, want_above=True), note))
    return claim


def findings(boards: list[Board]) -> list[Claim]:
    """The four claims, measured on every board that has the runs for them."""
    return [claim_savings(boards), claim_distillation_share(boards), claim_external(boards),
            claim_self_teachers(boards)]
