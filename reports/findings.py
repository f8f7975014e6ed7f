"""The preprint's four claims beside our measurements, each with a plain verdict (docs/metrics.md defines the metrics).

A verdict compares the 95% interval with the claim's direction, never a point estimate alone:

- holds: the whole interval is on the claim's side (e.g. OPD saves FLOPs: savings interval above 0);
- does not hold at this scale: the whole interval is on the other side, or the method never reaches
  the target the claim needs;
- inconclusive: the interval straddles the line, only one seed was run, or boards disagree;
- not measured: no board has the runs the claim needs.

Claim 2 is about a figure, not a direction: it holds when the interval lies within a factor of two of
the paper's share, and does not hold when it lies wholly outside that band.

A claim's verdict reads only the rows that decide it (each claim's `basis` names their metric and
interval); rows marked context (savings at the other targets, the experts' patience tail) are shown
beside them and judged by nothing. Per-FLOP verdicts rest on matched-FLOP or matched-accuracy
metrics, never on a gain divided by what a method chose to spend.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from reports.boards import Board
from reports.columns import tau_label
from reports.metrics import REFERENCE_METHOD, TARGET_GAINS, run_forgot
from reports.stats import Estimate, estimate_pair, rng_for

HOLDS, FAILS, UNSURE, NOT_MEASURED = "holds", "does not hold at this scale", "inconclusive", "not measured"
CONTEXT = "context"  # a row shown beside the deciding ones, judged by nothing
VERDICT_TARGET = 0.9  # claim 1's verdict reads the savings at tau_0.9
MIN_CHECK_SIZE = 300  # held-out prompts a recovery target should be checked on (docs/metrics.md)
PAPER_TITLE = "Unpacking the Compute Efficiency of Strong-to-Weak OPD against GRPO"
PAPER_ID = "arXiv:2611.08453"
PAPER = f"{PAPER_TITLE} ({PAPER_ID})"
PAPER_SHARE = {2: 0.052, 4: 0.080}  # claim 2: distillation's share of the experts' FLOPs, by number of domains


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
    decides: bool = True  # False: shown for context, not part of the claim's verdict

    @property
    def world(self) -> str:
        """The profile (world) of the row's board."""
        return str(self.board_slug_key[0])


@dataclass
class Claim:
    number: int
    title: str
    paper: str
    rule: str  # how the verdict is decided, shown on the page
    basis: str = ""  # the metric and interval the verdict rests on, shown beside it
    rows: list[Row] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return _combine(r.verdict for r in self.rows if r.decides)

    @property
    def world_verdicts(self) -> dict[str, str]:
        """The verdict on each world (profile) separately, in the order the rows name them: a claim
        can hold in one world and not in another, and that difference is a finding, not noise."""
        worlds = list(dict.fromkeys(r.world for r in self.rows))
        return {w: _combine(r.verdict for r in self.rows if r.decides and r.world == w) for w in worlds}


def _combine(verdicts: Any) -> str:
    """One verdict from its deciding rows': theirs when they agree, inconclusive when they do not."""
    found = set(verdicts)
    if not found:
        return NOT_MEASURED
    return found.pop() if len(found) == 1 else UNSURE


def direction(est: Estimate, line: float, want_above: bool) -> str:
    """Verdict for a claim that the quantity is above (or below) `line`, read off its interval; an
    undefined point with an interval (a target the aggregate curve never reaches) is judged by it."""
    if est.single_seed:
        return UNSURE  # one seed: no interval, no verdict
    if est.low is None or est.high is None:
        return NOT_MEASURED if est.value is None else UNSURE
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


def _row(b: Board, measure: str, paper: str, est: Estimate, unit: str, verdict: str, note: str = "",
         decides: bool = True) -> Row:
    return Row(b.label, tuple(vars(b.key).values()), measure, paper, est, unit, verdict, note, decides)


def claim_savings(boards: list[Board]) -> Claim:
    k = VERDICT_TARGET
    claim = Claim(1, "Multi-teacher OPD matches joint GRPO on math+code with fewer FLOPs",
                  "42% fewer total training FLOPs at matched held-out accuracy (math_code)",
                  f"the verdict reads the savings at {tau_label(k)}, the accuracy {k:.0%} of the way from the base "
                  "model to grpo-joint's final accuracy: holds when that interval lies above 0; does not hold when "
                  "it lies below 0 (a replicate whose curve never reaches it saves minus infinity). Savings at the "
                  "other targets are shown for context",
                  f"savings at matched accuracy at {tau_label(k)}, 1 − opd-multi's FLOPs to {tau_label(k)} / "
                  "grpo-joint's, with its 95% bootstrap interval over seeds (docs/metrics.md, "
                  "\"FLOPs to target and savings\")")
    for b, m, ref in _pairs(boards, "opd-multi", ("math_code",)):
        if ref is None or not b.targets:  # no reference, or one with no gain: no targets to reach
            continue
        for gain in TARGET_GAINS:
            est, decides = m.savings[gain], gain == k
            measure = f"savings at matched accuracy, {tau_label(gain)} = {b.targets[gain]:.3f}"
            verdict, note = direction(est, 0.0, want_above=True), ""
            if m.flops_to_target[gain].value is None:
                note = f"opd-multi never reaches {tau_label(gain)}"
            # the paper reports one matched accuracy; at the other targets its claim is the direction
            paper = "42%" if decides else "above 0 (42% at its matched accuracy)"
            claim.rows.append(_row(b, measure, paper, est, "pct", verdict if decides else CONTEXT, note, decides))
    return claim


def claim_distillation_share(boards: list[Board]) -> Claim:
    claim = Claim(2, "Distillation is a small fraction of the experts' training FLOPs",
                  "5.2% of the specialists' FLOPs with two domains, 8.0% with four",
                  "holds when the interval of the share at the held-out plateau and that at the stopping rule "
                  "both lie within a factor of 2 of the paper's share; does not hold when both lie wholly outside "
                  "that band. The experts' patience tail is shown for context",
                  "opd-multi's distillation share at the held-out plateau (where the records carry per-evaluation "
                  "phase FLOPs) and at the stopping rule, each with its 95% bootstrap interval over seeds "
                  "(docs/metrics.md, \"Distillation share\")")
    paper = PAPER_SHARE
    for b, m, _ in _pairs(boards, "opd-multi"):
        if b.n_domains not in paper:
            continue
        target, n = paper[b.n_domains], b.n_domains
        claim.rows.append(_row(b, f"distillation share at the stopping rule ({n} domains)", f"{target:.1%}",
                               m.distillation_share, "pct", within_factor(m.distillation_share, target)))
        plateau = m.distillation_share_plateau
        if plateau.value is None:
            claim.rows.append(_row(b, f"distillation share at the held-out plateau ({n} domains)", f"{target:.1%}",
                                   plateau, "pct", NOT_MEASURED, "the records carry no per-evaluation phase FLOPs "
                                   "or eval_size", decides=False))
        else:
            # 0: the plateau is where distillation began; within one standard error of the best it ever
            # reached, so distillation bought nothing measurable, not that it was cheap
            still = ("distillation never took held-out accuracy measurably past where it began (the plateau is "
                     "its first evaluation): a share of 0 says it bought nothing, not that it was cheap"
                     if plateau.high == 0 else "")
            claim.rows.append(_row(b, f"distillation share at the held-out plateau ({n} domains)", f"{target:.1%}",
                                   plateau, "pct", within_factor(plateau, target), still))
        if m.expert_tail_share.value is not None:
            claim.rows.append(_row(b, "share of expert FLOPs spent after the experts stopped improving",
                                   f"not reported; context for its {target:.1%}",
                                   m.expert_tail_share, "pct", CONTEXT, decides=False))
    return claim


def claim_external(boards: list[Board]) -> Claim:
    claim = Claim(3, "OPD from an external teacher loses to GRPO per FLOP and lengthens responses",
                  "opd-external buys less accuracy per FLOP than GRPO, and its students answer at greater length",
                  "per FLOP, compared at matched FLOPs: holds when opd-external's accuracy at 100% of the budget "
                  "minus grpo-joint's, and its area under the curve minus grpo-joint's, both have intervals below 0; "
                  "length: holds when the length ratio's interval lies above 1",
                  "opd-external − grpo-joint in accuracy at 100% of the budget and in area under the curve, and the "
                  "length ratio, each with its 95% bootstrap interval over seeds (docs/metrics.md, \"Accuracy at "
                  "matched FLOPs\", \"Area under the curve\", \"Length ratio\")")
    for b, m, ref in _pairs(boards, "opd-external"):
        if ref is None:
            continue
        for column, measure, seed in (("accuracy_at_100pct", "accuracy at 100% of the budget", "claim3"),
                                      ("auc", "area under the curve (mean accuracy over log FLOPs)", "claim3-auc")):
            diff = estimate_pair(m.per_run[column], ref.per_run[column], rng_for(b.label, seed), op="difference")
            claim.rows.append(_row(b, f"{measure}, opd-external − grpo-joint", "below 0", diff, "pts",
                                   direction(diff, 0.0, want_above=False)))
        claim.rows.append(_row(b, "mean response length / grpo-joint's", "above 1", m.length_ratio, "ratio",
                               direction(m.length_ratio, 1.0, want_above=True)))
    return claim


def _ratio_text(value: float) -> str:
    """A per-run reduction: 0× and ∞× name the arm that never recovered."""
    if value == 0:
        return "0× (self-OPD never recovered)"
    if math.isinf(value):
        return "∞× (GRPO never recovered)"
    return f"{value:.1f}×"


def _known(value: Any) -> bool:
    return value is not None and value == value


def _listed(noun: str, values, scale: float | None = None) -> str:
    """"seed 2", "seeds 0 and 1", "1.7, 1.0 and 1.0" (values times `scale`, one decimal)."""
    texts = [f"{scale * v:.1f}" if scale else str(v) for v in values]
    text = texts[0] if len(texts) == 1 else f"{', '.join(texts[:-1])} and {texts[-1]}"
    return f"{noun}{'s' if noun and len(texts) > 1 else ''} {text}".strip()


def _recovery_note(m, est: Estimate) -> str:
    """Per-seed ratios, seeds where nothing measurable was lost, the prompts the target was checked on,
    and whether the interval spans 1."""
    per_seed = [(s, v) for s, v in zip(m.seeds, m.per_run["self_teacher_reduction"]) if _known(v)]
    parts = ["per seed: " + ", ".join(f"seed {s} {_ratio_text(v)}" for s, v in per_seed)] if per_seed else []
    if none := [s for s, v in zip(m.seeds, m.per_run["self_teacher_reduction"]) if not _known(v)]:
        parts.append(f"{_listed('seed', none)} {'has' if len(none) == 1 else 'have'} no ratio (neither arm "
                     "reached the target), so the estimate rests on the others")
    if any(v == 0 for _, v in per_seed):
        parts.append("a seed where self-OPD did not reach the target within its cap counts as 0× (it needed more "
                     "FLOPs than it was given)")
    if any(math.isinf(v) for _, v in per_seed):
        parts.append("a seed where GRPO did not reach it counts as ∞×")
    unmeasured = [(seed, lost, noise) for seed, lost, noise, forgot in _forgetting(m) if not forgot]
    if unmeasured:
        seeds, lost, noise = zip(*unmeasured)
        one = len(unmeasured) == 1
        gained = " (a negative loss is a gain)" if any(x < 0 for x in lost) else ""
        parts.append(f"on {_listed('seed', seeds)} the student had lost {_listed('', lost, 100)} points of the "
                     f"domain{gained}, under two standard errors of one check ({_listed('', noise, 100)}): nothing "
                     f"measurable was lost, so {'its ratio measures' if one else 'their ratios measure'} no recovery")
    sizes = sorted({int(c) for c in m.per_run["check_size"] if _known(c)})
    if sizes:
        text = "/".join(map(str, sizes))
        short = f" (fewer than the {MIN_CHECK_SIZE} docs/metrics.md asks for)" if sizes[0] < MIN_CHECK_SIZE else ""
        parts.append(f"recovery target checked on {text} held-out prompts{short}")
    else:
        parts.append("the records do not say how many held-out prompts the recovery target was checked on")
    if est.low is not None and est.high is not None and est.low <= 1.0 <= est.high:
        parts.append(f"the 95% interval [{est.low:.2f}, {est.high:.2f}] spans 1: these runs do not show that "
                     "self-OPD needs fewer FLOPs")
    return "; ".join(parts)


EVERY, FORGOT = "every", "forgot"  # claim 4 decided over every seed with a ratio, or over those that forgot


def claim_self_teachers(boards: list[Board], over: str = EVERY) -> Claim:
    """Claim 4. over: EVERY (a board: every seed with a ratio decides, those that measurably forgot are
    context) or FORGOT (a study that said so before it ran: the seeds that forgot decide, every seed is
    context)."""
    if over not in (EVERY, FORGOT):
        raise ValueError(f"claim 4 is decided over {EVERY!r} or {FORGOT!r} seeds, not {over!r}")
    seeds = "the seeds whose student measurably forgot" if over == FORGOT else "seeds"
    claim = Claim(4, "Self-GRPO teachers cut the FLOPs needed to recover a domain",
                  "up to 50x fewer FLOPs than GRPO to recover single-domain accuracy",
                  "holds when the reduction's interval lies above 1 (self-OPD recovers with fewer FLOPs); an "
                  "interval that spans 1 is inconclusive; a board on which no seed's student measurably forgot "
                  "the domain is not measured, since nothing was recovered",
                  f"recovery FLOPs, GRPO / self-OPD, aggregated over {seeds} with its 95% bootstrap interval "
                  "(docs/metrics.md, \"Self-teacher reduction\")")
    # The recovery protocol runs as its own method (`recover`); a self-grpo record carrying a
    # `recovery` block counts too.
    pairs = [*_pairs(boards, "recover"), *_pairs(boards, "self-grpo")]
    for b, m, _ in pairs:
        est = m.self_teacher_reduction
        if est.value is None:
            continue
        values = [v for v in m.per_run["self_teacher_reduction"] if _known(v)]
        note = (f"largest single run: {_ratio_text(max(values))}; " if values else "") + _recovery_note(m, est)
        every = direction(est, 1.0, want_above=True)
        if over == EVERY and _nothing_lost(m):
            # every ratio is one step's cost against another's: there is no recovery for a verdict to read
            claim.rows.append(_row(b, "recovery FLOPs, GRPO / self-OPD", "up to 50x", est, "ratio", NOT_MEASURED,
                                   f"no seed's student measurably forgot the domain, so nothing was recovered and "
                                   f"no verdict is read (judged alone, {every}); {note}", decides=False))
            continue
        claim.rows.append(_row(b, "recovery FLOPs, GRPO / self-OPD", "up to 50x", est, "ratio",
                               every if over == EVERY else CONTEXT,
                               note if over == EVERY else f"judged alone, {every}; {note}", decides=over == EVERY))
        forgot = m.forgot_reduction
        if over == FORGOT or (forgot.value is not None and forgot.n_seeds < est.n_seeds):
            seeds = [seed for seed, _, _, measured in _forgetting(m) if measured]
            judged = direction(forgot, 1.0, want_above=True)
            which = (f"{_listed('seed', seeds)}: the seeds whose ratio measures a recovery" if seeds
                     else "no seed's student measurably forgot")
            claim.rows.append(_row(
                b, "the same, over the seeds whose student measurably forgot", "up to 50x", forgot, "ratio",
                judged if over == FORGOT else CONTEXT, which if over == FORGOT else f"{which}; judged alone, {judged}",
                decides=over == FORGOT))
    return claim


def _nothing_lost(m) -> bool:
    """Every seed with a ratio has a record saying how much its student lost, and none lost anything
    measurable (`metrics.run_forgot`)."""
    ratio_seeds = {s for s, v in zip(m.seeds, m.per_run["self_teacher_reduction"]) if _known(v)}
    forgot = {seed: measured for seed, _, _, measured in _forgetting(m)}
    return bool(ratio_seeds) and all(forgot.get(s) is False for s in ratio_seeds)


def _forgetting(m) -> list[tuple[int, float, float, bool]]:
    """(seed, accuracy lost, two standard errors of one check, forgot measurably) for every run whose
    record has both accuracies (`metrics.run_forgot`: more than nothing, and at least that noise)."""
    return [(seed, lost, noise, forgot) for seed, lost, noise
            in zip(m.seeds, m.per_run["recovery_forgetting"], m.per_run["recovery_noise"])
            if (forgot := run_forgot(lost, noise)) is not None]


def findings(boards: list[Board], recovery_over: str = EVERY) -> list[Claim]:
    """The four claims, measured on every board that has the runs for them; claim 4 decided over
    `recovery_over` seeds (EVERY or FORGOT, claim_self_teachers)."""
    return [claim_savings(boards), claim_distillation_share(boards), claim_external(boards),
            claim_self_teachers(boards, recovery_over)]
