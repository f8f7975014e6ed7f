"""Boards and findings on hand-made runs whose metrics are known."""

import pytest

from reports.boards import build_boards, phase_group
from reports.findings import FAILS, HOLDS, NOT_MEASURED, UNSURE, direction, findings, within_factor
from reports.records import to_frames
from reports.stats import Estimate
from tests.reports.factory import make_record, make_sweep

BUDGET = 1e14
FLOPS = [0.0, 1e12, 1e13, 1e14]


def _run(method, seed, acc, flops=FLOPS, length=3.0, **kw):
    curve = [{"flops": f, "accuracy": a, "mean_length": length} for f, a in zip(flops, acc)]
    return make_record(method, seed=seed, budget_flops=BUDGET, curve=curve, base_accuracy=acc[0],
                       final_accuracy=acc[-1], final_mean_length=length, **kw)


def _board(records):
    boards = build_boards(to_frames(records))
    assert len(boards) == 1
    return boards[0]


def test_target_ftt_and_savings_match_a_hand_computation():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5]) for s in range(3)]
    records += [_run("opd-multi", s, [0.2, 0.4, 0.5, 0.6], length=4.5) for s in range(3)]
    board = _board(records)
    assert board.reference == "grpo-joint" and board.target == pytest.approx(0.5)
    ref, opd = board.method("grpo-joint"), board.method("opd-multi")
    assert board.methods[0] is ref  # the reference leads the table
    assert ref.flops_to_target.value == pytest.approx(1e14)
    assert opd.flops_to_target.value == pytest.approx(1e13)
    assert opd.savings.value == pytest.approx(0.9)
    assert (ref.savings.value, ref.savings.low, ref.savings.high) == (0.0, 0.0, 0.0)
    assert opd.length_ratio.value == pytest.approx(1.5)
    assert opd.final_accuracy.value == pytest.approx(0.6) and opd.final_accuracy.stat == "iqm"
    assert opd.accuracy_per_pflop.value == pytest.approx(0.4 / (opd.counted_flops.value / 1e15))
    assert opd.distillation_share.value == pytest.approx(0.052)


def test_seed_noise_gives_intervals_around_the_savings():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5 + 0.01 * s]) for s in range(5)]
    records += [_run("opd-multi", s, [0.2, 0.4, 0.5 + 0.01 * s, 0.6]) for s in range(5)]
    opd = _board(records).method("opd-multi")
    assert opd.savings.low <= opd.savings.value <= opd.savings.high
    assert opd.savings.n_seeds == 5 and opd.curve_low is not None


def test_a_run_that_stopped_early_is_carried_flat_to_the_budget():
    records = [_run("grpo-joint", 0, [0.2, 0.3, 0.4, 0.5])]
    records.append(_run("opd-multi", 0, [0.2, 0.45, 0.55], flops=FLOPS[:3]))
    opd = _board(records).method("opd-multi")
    assert opd.curves.grid[-1] == BUDGET and opd.curve_mid[-1] == pytest.approx(0.55)
    assert opd.flops_to_target.value == pytest.approx(10 ** (12 + 0.05 / 0.1))
    assert opd.flops_to_target.stat == "single" and opd.flops_to_target.low is None


def test_a_method_that_never_reaches_the_target_has_no_savings():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5]) for s in range(3)]
    records += [_run("sft", s, [0.2, 0.25, 0.3, 0.35]) for s in range(3)]
    sft = _board(records).method("sft")
    assert sft.flops_to_target.value is None and sft.savings.value is None


def test_a_board_without_the_reference_warns_and_leaves_relative_metrics_empty():
    board = _board([_run("opd-multi", s, [0.2, 0.4, 0.5, 0.6]) for s in range(3)])
    assert board.reference is None and board.target is None and board.warnings
    m = board.method("opd-multi")
    assert m.savings.value is None and m.length_ratio.value is None and m.final_accuracy.value == pytest.approx(0.6)


def test_boards_split_by_suite_difficulty_and_budget():
    records = [make_record(suite=s, difficulty=d, seed=0) for s in ("math", "math_code") for d in ("easy", "hard")]
    records.append(make_record(suite="math", difficulty="easy", seed=0, budget_flops=1e15, run_id="other-budget"))
    boards = build_boards(to_frames(records))
    assert [(b.key.suite, b.key.difficulty) for b in boards][:2] == [("math_code", "easy"), ("math_code", "hard")]
    assert len(boards) == 5
    labels = [b.label for b in boards]
    assert len(set(labels)) == 5 and "math · easy · tiny · v1 · 1e+15 FLOPs" in labels


def test_phase_groups():
    assert [phase_group(p) for p in ("expert:math", "stage:code", "distill", "train", "recover:opd", "weird")] == [
        "expert training", "self-GRPO stages", "distillation", "training", "recovery", "other"]


def test_verdict_rules():
    est = lambda v, lo, hi: Estimate(v, lo, hi, 3, "iqm")  # noqa: E731
    assert direction(est(0.4, 0.2, 0.5), 0.0, want_above=True) == HOLDS
    assert direction(est(-0.4, -0.5, -0.2), 0.0, want_above=True) == FAILS
    assert direction(est(0.1, -0.1, 0.3), 0.0, want_above=True) == UNSURE
    assert direction(est(-0.4, -0.5, -0.2), 0.0, want_above=False) == HOLDS
    assert direction(Estimate(0.4, None, None, 1, "single"), 0.0, want_above=True) == UNSURE
    assert direction(Estimate(None, None, None, 0, "none"), 0.0, want_above=True) == NOT_MEASURED
    assert within_factor(est(0.06, 0.05, 0.07), 0.052) == HOLDS
    assert within_factor(est(0.5, 0.4, 0.6), 0.052) == FAILS
    assert within_factor(est(0.1, 0.05, 0.2), 0.052) == UNSURE


def test_findings_on_a_sweep_shaped_like_the_paper_hold():
    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    claims = findings(build_boards(to_frames(records)))
    assert [c.number for c in claims] == [1, 2, 3, 4]
    assert [c.verdict for c in claims] == [HOLDS] * 4
    assert {r.board for r in claims[1].rows} == {"math_code · easy · tiny", "four_domain · easy · tiny"}


def test_findings_without_the_runs_are_not_measured_and_one_seed_is_inconclusive():
    only_ref = [make_record("grpo-joint", seed=s) for s in range(3)]
    assert {c.verdict for c in findings(build_boards(to_frames(only_ref)))} == {NOT_MEASURED}
    one_seed = [make_record("grpo-joint", seed=0), make_record("opd-multi", seed=0)]
    assert findings(build_boards(to_frames(one_seed)))[0].verdict == UNSURE
