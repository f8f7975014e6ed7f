"""Each claim's verdict rests on the metric its rule names: matched accuracy or matched FLOPs, never gain per FLOP."""

from reports.boards import build_boards
from reports.findings import (
    CONTEXT, FAILS, HOLDS, NOT_MEASURED, UNSURE, claim_distillation_share, claim_external, claim_savings,
    claim_self_teachers,
)
from reports.records import to_frames
from tests.reports.factory import make_record

BUDGET = 1e14
FLOPS = [0.0, 1e12, 1e13, 1e14]


def _run(method, seed, acc, flops=FLOPS, counted=None, length=3.0, **kw):
    curve = [{"flops": f, "accuracy": a, "mean_length": length} for f, a in zip(flops, acc)]
    if counted is not None:
        kw["flops"] = {"counted": counted}
    return make_record(method, seed=seed, budget_flops=BUDGET, curve=curve, base_accuracy=acc[0],
                       final_accuracy=acc[-1], final_mean_length=length, **kw)


def _boards(records):
    return build_boards(to_frames(records))


REF = [[0.2, 0.3, 0.4 + 0.005 * s, 0.5 + 0.005 * s] for s in range(4)]


def test_claim_1_shows_every_target_and_its_verdict_reads_tau_09():
    # opd-multi is ahead up to tau_0.75 (0.425) but never reaches tau_0.9 (~0.47)
    records = [_run("grpo-joint", s, a) for s, a in enumerate(REF)]
    records += [_run("opd-multi", s, [0.2, 0.40 + 0.005 * s, 0.45, 0.46]) for s in range(4)]
    claim = claim_savings(_boards(records))
    assert [r.measure.split(",")[1].split("=")[0].strip() for r in claim.rows] == ["τ₀.₅", "τ₀.₇₅", "τ₀.₉"]
    assert [r.decides for r in claim.rows] == [False, False, True]
    assert claim.rows[0].estimate.value > 0 and claim.rows[0].verdict == CONTEXT
    assert claim.rows[2].verdict == FAILS and "never reaches τ₀.₉" in claim.rows[2].note
    assert claim.verdict == FAILS and "τ₀.₉" in claim.rule and "τ₀.₉" in claim.basis


def test_claim_1_reads_the_interval_where_the_aggregate_curve_never_reaches_tau_09():
    """Two of three opd-multi seeds reach tau_0.9 (0.37) early and one never does: the aggregate curve
    stays below it, but a third of the replicates draw no stuck seed, so the savings' interval runs
    from minus infinity to above 0 and the claim is inconclusive, not refuted by the point alone."""
    ref = [[0.10, 0.20, 0.30 + 0.005 * s, 0.40 + 0.005 * s] for s in range(3)]
    records = [_run("grpo-joint", s, a) for s, a in enumerate(ref)]
    records += [_run("opd-multi", s, [0.10, 0.45, 0.46, 0.46]) for s in range(2)]
    records.append(_run("opd-multi", 2, [0.10, 0.10, 0.10, 0.10]))
    row = claim_savings(_boards(records)).rows[2]
    assert row.estimate.value is None and row.estimate.low == float("-inf") and row.estimate.high > 0
    assert row.verdict == UNSURE and "never reaches τ₀.₉" in row.note
    # the same with opd-multi's one stuck seed alone: one run, no interval, no verdict
    row = claim_savings(_boards(records[:3] + records[-1:])).rows[2]
    assert row.estimate.single_seed and row.verdict == UNSURE


def test_a_comparison_with_one_run_on_either_side_has_no_interval():
    records = [_run("grpo-joint", s, a) for s, a in enumerate(REF)]
    records.append(_run("opd-multi", 0, [0.2, 0.4, 0.5, 0.6]))
    m = _boards(records)[0].method("opd-multi")
    for est in (m.savings[0.9], m.relative.minus_reference_at_spend, m.relative.reference_at_spend, m.length_ratio):
        assert est.single_seed and est.low is None and est.high is None
    assert claim_savings(_boards(records)).rows[2].verdict == UNSURE


def test_claim_1_holds_on_savings_at_tau_09():
    records = [_run("grpo-joint", s, a) for s, a in enumerate(REF)]
    records += [_run("opd-multi", s, [0.2, 0.4, 0.5 + 0.005 * s, 0.6]) for s in range(4)]
    claim = claim_savings(_boards(records))
    assert claim.rows[2].estimate.low > 0 and claim.verdict == HOLDS


def test_claim_3_rests_on_matched_flops_not_on_gain_per_pflop():
    # opd-external stops at 1e12 after a small gain: per PFLOP spent it "wins" by far, yet at matched
    # FLOPs it is below grpo-joint from 10% of the budget on, and its area under the curve is smaller
    records = [_run("grpo-joint", s, a, counted=1e14) for s, a in enumerate(REF)]
    records += [_run("opd-external", s, [0.2, 0.33 + 0.002 * s], flops=FLOPS[:2], counted=1e12, length=4.5)
                for s in range(4)]
    boards = _boards(records)
    ext, ref = boards[0].method("opd-external"), boards[0].method("grpo-joint")
    assert ext.gain_per_pflop_spent.value > 10 * ref.gain_per_pflop_spent.value
    claim = claim_external(boards)
    per_flop = [r for r in claim.rows if "opd-external − grpo-joint" in r.measure]
    assert [r.measure.split(",")[0] for r in per_flop] == ["accuracy at 100% of the budget",
                                                           "area under the curve (mean accuracy over log FLOPs)"]
    assert all(r.verdict == HOLDS and r.estimate.high < 0 and r.unit == "pts" for r in per_flop)
    assert claim.verdict == HOLDS and "per pflop" not in (claim.rule + claim.basis).lower()


def test_claim_2_puts_the_plateau_and_the_stopping_rule_side_by_side():
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    claim = claim_distillation_share(_boards(records))
    measures = [r.measure for r in claim.rows]
    assert measures[:2] == ["distillation share at the stopping rule (2 domains)",
                            "distillation share at the held-out plateau (2 domains)"]
    assert [r.decides for r in claim.rows] == [True, True, False]  # the patience tail is context
    assert claim.rows[1].estimate.value < claim.rows[0].estimate.value and claim.verdict == HOLDS
    # records without per-evaluation phase FLOPs: the plateau row says so and the verdict reads the other
    for r in records:
        for p in r["curve"]:
            p.pop("phase_flops")
    claim = claim_distillation_share(_boards(records))
    assert claim.rows[1].verdict == NOT_MEASURED and not claim.rows[1].decides and claim.verdict == HOLDS


def test_claim_2_says_a_plateau_share_of_0_is_a_distillation_that_bought_nothing():
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    for r in records[3:]:
        for p in r["curve"]:
            p["accuracy"] = 0.3  # a student distillation never moves
    row = claim_distillation_share(_boards(records)).rows[1]
    assert row.estimate.high == 0 and "a share of 0 says it bought nothing, not that it was cheap" in row.note
    default = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    assert "bought nothing" not in claim_distillation_share(_boards(default)).rows[1].note


def _recovery_run(seed, ratio, check_size=None, teacher=None, lost=None):
    r = make_record("self-grpo", seed=seed)
    r["recovery"] = {"domain": "math", "grpo_flops": 1e13, "opd_flops": 1e13 / ratio}
    if check_size is not None:
        r["recovery"]["check_size"] = check_size
    if teacher is not None:
        r["recovery"].update(teacher_accuracy=teacher, lost_accuracy=lost)
    return r


def test_claim_4_shows_per_seed_ratios_the_check_size_and_an_interval_spanning_1():
    records = [_recovery_run(s, v, 128) for s, v in enumerate([0.5, 2.0, 1.2, 0.8, 3.0])]
    row = claim_self_teachers(_boards(records)).rows[0]
    assert row.verdict == UNSURE and row.estimate.low < 1 < row.estimate.high
    assert "per seed: seed 0 0.5×, seed 1 2.0×, seed 2 1.2×, seed 3 0.8×, seed 4 3.0×" in row.note
    assert "checked on 128 held-out prompts (fewer than the 300" in row.note
    assert "spans 1" in row.note
    row = claim_self_teachers(_boards([_recovery_run(s, v) for s, v in enumerate([20, 25, 30])])).rows[0]
    assert row.verdict == HOLDS and "spans 1" not in row.note and "do not say how many held-out prompts" in row.note


def test_claim_4_names_the_seeds_where_nothing_measurable_was_lost():
    # two standard errors of one check on 300 prompts at 60%: 5.7 points. Seed 1 lost 6.0 (measured),
    # seeds 0 and 2 lost 0.3 and 2.0 (not); a record without the accuracies is not judged
    runs = [_recovery_run(0, 1.4, 300, 0.6, 0.597), _recovery_run(1, 2.0, 300, 0.6, 0.54),
            _recovery_run(2, 3.0, 300, 0.6, 0.58), _recovery_run(3, 2.5, 300)]
    note = claim_self_teachers(_boards(runs)).rows[0].note
    assert ("on seeds 0 and 2 the student had lost 0.3 and 2.0 points of the domain, under two standard "
            "errors of one check (5.7 and 5.7): nothing measurable was lost, so their ratios measure no "
            "recovery") in note
    one = claim_self_teachers(_boards(runs[:2])).rows[0].note
    assert "on seed 0 the student had lost 0.3 points" in one and "its ratio measures no recovery" in one
    assert "nothing measurable" not in claim_self_teachers(_boards(runs[1:2] + runs[3:])).rows[0].note
    # a student that gained on the domain had lost a negative amount, which the note says is a gain
    gained = claim_self_teachers(_boards([_recovery_run(0, 1.4, 300, 0.6, 0.613), runs[1]])).rows[0].note
    assert "on seed 0 the student had lost -1.3 points of the domain (a negative loss is a gain)" in gained


def test_claim_4_names_a_seed_without_a_ratio():
    runs = [_recovery_run(0, 1.4), _recovery_run(1, 2.0), _recovery_run(2, 1.0)]
    runs[2]["recovery"].update(grpo_flops=None, opd_flops=None)  # neither arm recovered within the cap
    note = claim_self_teachers(_boards(runs)).rows[0].note
    assert "seed 2 has no ratio (neither arm reached the target)" in note


def test_claim_4_shows_beside_its_verdict_the_ratio_over_the_seeds_that_measurably_forgot():
    # seeds 1, 3 and 4 lost 6-12 points (measured, ratios 3, 4 and 5); seeds 0 and 2 lost 1 and 2 (ratios 0.5, 1)
    lost = {0: 0.59, 1: 0.48, 2: 0.58, 3: 0.54, 4: 0.50}
    ratio = {0: 0.5, 1: 3.0, 2: 1.0, 3: 4.0, 4: 5.0}
    runs = [_recovery_run(s, ratio[s], 300, 0.6, lost[s]) for s in range(5)]
    claim = claim_self_teachers(_boards(runs))
    main, context = claim.rows
    assert main.decides and main.estimate.n_seeds == 5
    assert not context.decides and context.verdict == CONTEXT and context.estimate.n_seeds == 3
    assert "seeds 1, 3 and 4" in context.note and "judged alone, holds" in context.note
    assert claim.verdict == main.verdict  # context never decides
    # exactly what a board of those three runs alone gives (benchmarks/recovery_readout.py reads that)
    alone = claim_self_teachers(_boards([runs[1], runs[3], runs[4]])).rows
    assert len(alone) == 1 and alone[0].estimate == context.estimate
    # where every seed with a ratio forgot measurably, or none did, there is nothing to add
    assert len(claim_self_teachers(_boards([runs[1], runs[3]])).rows) == 1
    assert len(claim_self_teachers(_boards([runs[0], runs[2]])).rows) == 1


def test_claim_4_is_not_measured_on_a_board_where_no_student_measurably_forgot():
    # ratios of 20-30x would hold, but every seed lost under two standard errors of one check (5.7
    # points): both arms reached a target within a check's noise, so nothing was recovered
    runs = [_recovery_run(s, v, 300, 0.6, lost) for s, v, lost in ((0, 20, 0.59), (1, 25, 0.58), (2, 30, 0.61))]
    claim = claim_self_teachers(_boards(runs))
    [row] = claim.rows
    assert row.verdict == NOT_MEASURED and not row.decides and claim.verdict == NOT_MEASURED
    assert "no seed's student measurably forgot the domain" in row.note and "judged alone, holds" in row.note
    assert claim.world_verdicts == {"tiny": NOT_MEASURED}
    # one seed that measurably forgot, or one whose record does not say, and the ratios decide as before
    forgot = runs[:2] + [_recovery_run(2, 30, 300, 0.6, 0.50)]
    assert claim_self_teachers(_boards(forgot)).verdict == HOLDS
    unknown = runs[:2] + [_recovery_run(2, 30)]
    assert claim_self_teachers(_boards(unknown)).verdict == HOLDS
    # a study that decides over the seeds that forgot says the same, from its own rule
    assert claim_self_teachers(_boards(runs), over="forgot").verdict == NOT_MEASURED
