"""The metrics of docs/metrics.md on hand-made curves whose answers are known (more: test_reports_matched)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.fit import fit_scaling_curve
from reports.metrics import (
    accuracy_at_fractions, area_under_curve, cut_at_budget, distillation_share, final_accuracy, flops_to_target,
    flops_to_target_batch, forgot_measurably, gain_per_pflop_spent, interpolate_curve, length_ratio,
    recovery_forgetting, run_forgot, savings, self_teacher_reduction, to_budget,
)
from reports.stats import curve_set

F = [0.0, 1e12, 1e14]
A = [0.2, 0.4, 0.8]


def test_to_budget_extends_a_curve_that_stopped_early_to_the_budget():
    f, a = to_budget([0, 1e12, 2e12], [0.2, 0.5, 0.6], budget_flops=1e13)
    assert f.tolist() == [0, 1e12, 2e12, 1e13] and a.tolist() == [0.2, 0.5, 0.6, 0.6]
    f, a = to_budget([0, 1e13], [0.2, 0.5], budget_flops=1e13)
    assert f.tolist() == [0, 1e13]
    assert final_accuracy([0, 1e12], [0.2, 0.55], 1e14) == 0.55


def test_to_budget_cuts_a_curve_whose_last_step_crossed_the_budget():
    # the last step went from 90 to 110 FLOPs; at 100 the curve is read as between evaluations
    f, a = to_budget([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7], budget_flops=100)
    at_budget = 0.5 + 0.2 * math.log10(100 / 90) / math.log10(110 / 90)
    assert f.tolist() == [0, 10, 90, 100] and a[-1] == pytest.approx(at_budget)
    assert final_accuracy([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7], 100) == pytest.approx(at_budget)
    assert cut_at_budget([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7], 100)[0].tolist() == [0, 10, 90, 100]
    assert cut_at_budget([0, 10], [0.1, 0.3], 100)[0].tolist() == [0, 10]  # cut, never carried


def test_a_target_reached_only_past_the_budget_is_not_reached():
    f, a = to_budget([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7], budget_flops=100)
    assert a[-1] < 0.68 and flops_to_target(f, a, 0.68) is None
    assert flops_to_target([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7], 0.68) > 100  # read uncut, it would be
    cs = curve_set([([0, 10, 90, 110], [0.1, 0.3, 0.5, 0.7])], budget_flops=100)
    assert cs.grid.max() == 100
    assert np.isnan(flops_to_target_batch(cs.grid, cs.values, np.array([0.68]))[0])


def test_of_evaluations_at_equal_flops_the_last_stands_everywhere():
    f, a = [0, 3, 3, 10, 100], [0.1, 0.2, 0.6, 0.7, 0.8]
    cut_f, cut_a = to_budget(f, a, 100)
    assert cut_f.tolist() == [0, 3, 10, 100] and cut_a.tolist() == [0.1, 0.6, 0.7, 0.8]
    assert accuracy_at_fractions(f, a, 100, (0.03, 1.0)).tolist() == pytest.approx([0.6, 0.8])
    assert area_under_curve(f, a, 100) == pytest.approx(area_under_curve(cut_f, cut_a, 100))
    cs = curve_set([(f, a)], budget_flops=100)
    assert interpolate_curve(cs.grid, cs.values[0], [3.0]).tolist() == [0.6]


def test_to_budget_rejects_mismatched_curves():
    with pytest.raises(ValueError):
        to_budget([0, 1], [0.1], 10)


def test_flops_to_target_interpolates_in_log_flops():
    # 0.6 is halfway from 0.4 to 0.8, and halfway from 1e12 to 1e14 in log10 is 1e13
    assert flops_to_target(F, A, 0.6) == pytest.approx(1e13, rel=1e-12)
    assert flops_to_target(F, A, 0.4) == pytest.approx(1e12)  # exactly on an evaluation
    assert flops_to_target(F, A, 0.8) == pytest.approx(1e14)


def test_flops_to_target_on_the_segment_from_zero_is_linear_in_flops():
    # log10(0) is undefined: from the base point the interpolation is linear in FLOPs
    assert flops_to_target([0, 1e12], [0.2, 0.6], 0.4) == pytest.approx(5e11)


def test_flops_to_target_base_reaching_tau_costs_zero_and_never_is_none():
    assert flops_to_target(F, A, 0.1) == 0.0
    assert flops_to_target(F, A, 0.2) == 0.0
    assert flops_to_target(F, A, 0.81) is None


def test_flops_to_target_takes_the_first_crossing_of_a_curve_that_dips():
    f = [0, 1e12, 1e13, 1e14]
    a = [0.2, 0.7, 0.3, 0.9]
    assert flops_to_target(f, a, 0.6) < 1e12
    assert flops_to_target(f, a, 0.8) == pytest.approx(10 ** (13 + 0.5 / 0.6))


def test_batch_form_matches_scalar_and_marks_unreached_as_nan():
    curves = np.array([A, [0.2, 0.3, 0.5], [0.5, 0.6, 0.7]])
    out = flops_to_target_batch(np.array(F), curves, np.array([0.6, 0.6, 0.45]))
    assert out[0] == pytest.approx(1e13) and math.isnan(out[1]) and out[2] == 0.0


def test_interpolate_curve_is_the_inverse_of_flops_to_target():
    grid = [0, 5e11, 1e12, 1e13, 1e14, 1e15]
    got = interpolate_curve(F, A, grid)
    assert got.tolist() == pytest.approx([0.2, 0.3, 0.4, 0.6, 0.8, 0.8])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=12), st.floats(0, 1))
def test_flops_to_target_reads_back_tau_where_the_curve_first_reaches_it(acc, tau):
    flops = [0.0] + [10.0 ** (10 + i) for i in range(1, len(acc))]
    f = flops_to_target(flops, acc, tau)
    if max(acc) < tau - 1e-12:
        assert f is None
        return
    first = next(i for i, a in enumerate(acc) if a >= tau - 1e-12)  # the first evaluation at tau or above
    if first == 0:
        assert f == 0.0  # the base model already reaches tau: no crossing to read
    else:
        # on the segment into the first evaluation that reaches tau, where the curve reads tau
        assert flops[first - 1] <= f <= flops[first] * (1 + 1e-9)
        assert interpolate_curve(flops, acc, [f])[0] == pytest.approx(tau, abs=1e-6)


def test_savings_at_matched_accuracy():
    got = savings(np.array([5e12, 2e13, np.nan, 5e12, 5e12]), np.array([1e13, 1e13, 1e13, 0.0, np.nan]))
    assert got[:2] == pytest.approx([0.5, -1.0])
    assert got[2] == -np.inf  # never reached the target: unbounded below
    assert np.isnan(got[3]) and np.isnan(got[4])  # the reference's base model already did; it never did


def test_gain_per_pflop_spent():
    assert gain_per_pflop_spent(0.5, 0.3, 2e15) == pytest.approx(0.1)
    assert gain_per_pflop_spent(0.5, 0.3, 0.0) is None


def _row(phase, flops, category="counted", kind="update"):
    return {"category": category, "phase": phase, "kind": kind, "model": "m", "flops": flops, "tokens": 1, "calls": 1}


def test_distillation_share_uses_counted_distill_over_expert_or_stage_rows():
    ledger = [_row("expert:math", 50.0), _row("expert:code", 30.0, kind="rollout"), _row("expert:code", 20.0),
              _row("distill", 4.0), _row("distill", 1.0, kind="score"), _row("distill", 99.0, category="eval")]
    assert distillation_share(ledger) == pytest.approx(0.05)
    assert distillation_share([_row("stage:math", 10.0), _row("distill", 1.0)]) == pytest.approx(0.1)
    assert distillation_share([_row("train", 10.0)]) is None
    assert distillation_share([_row("distill", 10.0)]) is None


def test_length_ratio_and_self_teacher_reduction():
    assert length_ratio(6.0, 4.0) == pytest.approx(1.5)
    assert length_ratio(6.0, 0.0) is None and length_ratio(None, 4.0) is None
    assert self_teacher_reduction({"domain": "math", "grpo_flops": 1e13, "opd_flops": 4e11}) == pytest.approx(25.0)
    assert self_teacher_reduction(None) is None
    # an arm that never reached the target counts against it (infinite FLOPs), it is not dropped
    assert self_teacher_reduction({"domain": "math", "grpo_flops": None, "opd_flops": 4e11}) == math.inf
    assert self_teacher_reduction({"domain": "math", "grpo_flops": 1e13, "opd_flops": None}) == 0.0
    assert self_teacher_reduction({"domain": "math", "grpo_flops": None, "opd_flops": None}) is None
    assert self_teacher_reduction({"domain": "math", "grpo_flops": 1e13, "opd_flops": 0}) is None


def test_scalerl_fit_recovers_known_parameters():
    r0, a, b, cmid = 0.3, 0.8, 1.2, 1e13
    c = np.logspace(11, 15, 12)
    acc = r0 + (a - r0) / (1 + (cmid / c) ** b)
    fit = fit_scaling_curve(np.r_[0.0, c], np.r_[r0, acc], base_accuracy=r0)
    assert fit is not None
    assert fit.asymptote == pytest.approx(a, abs=1e-4)
    assert fit.efficiency == pytest.approx(b, rel=1e-3)
    assert fit.midpoint_flops == pytest.approx(cmid, rel=1e-3)
    assert fit.rmse < 1e-6
    assert fit.predict([cmid])[0] == pytest.approx((r0 + a) / 2, abs=1e-4)


def test_scalerl_fit_returns_none_when_it_cannot_fit():
    assert fit_scaling_curve([0, 1e12, 1e13], [0.3, 0.4, 0.5], 0.3) is None  # two positive points
    assert fit_scaling_curve([0, 1e12, 1e13, 1e14], [0.3] * 4, 0.3) is None  # flat: B, Cmid meaningless


@settings(max_examples=15, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=4, max_size=11), st.floats(0, 1))
def test_scalerl_fit_never_raises_and_is_finite(acc, base):
    flops = [0.0] + [10.0 ** (11 + 0.3 * i) for i in range(1, len(acc))]
    fit = fit_scaling_curve(flops, acc, base)
    if fit is not None:
        assert all(map(math.isfinite, (fit.asymptote, fit.efficiency, fit.midpoint_flops, fit.rmse)))
        assert 0 <= fit.asymptote <= 1


def test_recovery_forgetting_against_two_standard_errors_of_one_check():
    lost, noise = recovery_forgetting({"teacher_accuracy": 0.6, "lost_accuracy": 0.5, "check_size": 300})
    assert lost == pytest.approx(0.1) and noise == pytest.approx(2 * (0.6 * 0.4 / 300) ** 0.5)
    assert recovery_forgetting({"teacher_accuracy": 0.6, "lost_accuracy": 0.5}) == (None, None)
    assert recovery_forgetting(None) == (None, None)
    assert forgot_measurably(lost, noise) and not forgot_measurably(0.05, noise)
    # at 0% a check has no binomial error, but nothing lost is still nothing to recover
    assert recovery_forgetting({"teacher_accuracy": 0.0, "lost_accuracy": 0.0, "check_size": 300}) == (0.0, 0.0)
    assert not forgot_measurably(0.0, 0.0)
    # a run of the runs frame: a missing value (None, or NaN in a float column) is no recovery check
    assert run_forgot(lost, noise) is True and run_forgot(0.05, noise) is False
    assert run_forgot(None, noise) is None and run_forgot(float("nan"), noise) is None and run_forgot(lost, None) is None
