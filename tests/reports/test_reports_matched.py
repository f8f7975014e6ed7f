"""Matched-FLOP and matched-accuracy metrics (docs/metrics.md) on hand-made curves whose answers are known."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reports.metrics import (
    accuracy_at_fractions, area_under_curve, area_under_curve_batch, envelope_segments, evaluation_prompts,
    expert_tail_share, final_accuracy, interpolate_curve, interpolate_rows, plateau_distillation_share, savings,
    targets_from_gain, upper_envelope,
)

F = [0.0, 1e12, 1e14]
A = [0.2, 0.4, 0.8]


def test_accuracy_at_fractions_reads_the_curve_in_log_flops_and_carries_it_flat():
    # budget 1e14: 10% = 1e13 is halfway from 1e12 to 1e14 in log10, so halfway from 0.4 to 0.8
    assert accuracy_at_fractions(F, A, 1e14).tolist() == pytest.approx([0.6, 0.6 + 0.4 * math.log10(2.5) / 2,
                                                                         0.6 + 0.4 * math.log10(5) / 2, 0.8])
    # a run that stopped at 1e12 keeps 0.4 to the budget
    assert accuracy_at_fractions([0, 1e12], [0.2, 0.4], 1e14).tolist() == [0.4] * 4
    # below the first positive evaluation the curve is linear in FLOPs from the base point
    assert accuracy_at_fractions([0, 1e14], [0.2, 0.6], 1e14, (0.25,))[0] == pytest.approx(0.3)


def test_final_accuracy_is_read_at_the_budget_when_the_last_step_overshot_it():
    assert final_accuracy([0, 1e12, 1e14], [0.2, 0.4, 0.8], 1e13) == pytest.approx(0.6)
    assert final_accuracy([0, 1e12], [0.2, 0.55], 1e14) == 0.55


def test_interpolate_rows_takes_a_value_per_row_and_matches_the_one_curve_form():
    curves = np.array([A, [0.1, 0.3, 0.5]])
    out = interpolate_rows(F, curves, np.array([[1e13], [1e12]]))
    assert out[:, 0].tolist() == pytest.approx([0.6, 0.3])
    grid = [0, 5e11, 1e13, 1e15]
    assert interpolate_rows(F, curves, grid)[0].tolist() == pytest.approx(interpolate_curve(F, A, grid).tolist())


def test_targets_come_from_the_reference_gain():
    assert targets_from_gain(0.2, 0.6).tolist() == pytest.approx([0.4, 0.5, 0.56])
    reps = targets_from_gain(np.array([0.2, 0.3]), np.array([0.6, 0.5]))
    assert reps.shape == (2, 3) and reps[1].tolist() == pytest.approx([0.4, 0.45, 0.48])


def test_savings_is_one_vectorised_function_with_explicit_undefined_cases():
    out = savings(np.array([5e12, 2e13, np.nan, 5e12, 5e12]), np.array([1e13, 1e13, 1e13, 0.0, np.nan]))
    assert out[:2].tolist() == pytest.approx([0.5, -1.0])
    assert out[2] == -np.inf  # the method never reaches the target: unbounded below
    assert np.isnan(out[3]) and np.isnan(out[4])  # the reference reaches it at 0 FLOPs, or never


def test_area_under_the_curve_is_the_mean_accuracy_over_log_flops():
    # from 1e12 (1% of 1e14) to 1e14: one straight segment in log10 FLOPs from 0.4 to 0.8
    assert area_under_curve(F, A, 1e14) == pytest.approx(0.6)
    # a run that stops at 1e12 is carried flat: its mean is its last accuracy
    assert area_under_curve([0, 1e12], [0.2, 0.5], 1e14) == pytest.approx(0.5)


def test_area_under_the_curve_integrates_the_base_points_linear_stretch_exactly():
    # first evaluation at 1e13: from 1e12 to 1e13 the curve is 0.2 + 0.4 x / 1e13 (linear in FLOPs);
    # over log10 FLOPs that integrates to 0.2 + 0.4 x 0.9 / ln 10; then 0.6 flat for a decade
    expected = (0.2 + 0.4 * 0.9 / math.log(10) + 0.6) / 2
    assert area_under_curve([0, 1e13, 1e14], [0.2, 0.6, 0.6], 1e14) == pytest.approx(expected, rel=1e-12)
    dense = np.geomspace(1e12, 1e14, 200_001)
    numeric = np.trapezoid(interpolate_curve([0, 1e13, 1e14], [0.2, 0.6, 0.6], dense), np.log10(dense)) / 2
    assert numeric == pytest.approx(expected, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=2, max_size=8), st.floats(10.0, 12.0))
def test_area_under_the_curve_is_a_mean_of_accuracies(acc, first_exponent):
    flops = [0.0] + [10.0 ** (first_exponent + i) for i in range(1, len(acc))]
    budget = flops[-1]
    auc = area_under_curve_batch(flops, np.array([acc]), budget)[0]
    assert min(acc) - 1e-9 <= auc <= max(acc) + 1e-9


def test_upper_envelope_says_which_curve_is_on_top_and_ties_go_to_the_first():
    grid = np.array([1.0, 2.0, 3.0, 4.0])
    curves = np.array([[0.5, 0.5, 0.5, 0.5], [0.4, 0.6, 0.6, 0.5], [0.1, 0.2, 0.7, 0.3]])
    leader = upper_envelope(curves)
    assert leader.tolist() == [0, 1, 2, 0]
    assert envelope_segments(grid, leader) == [(0, 1.0, 2.0), (1, 2.0, 3.0), (2, 3.0, 4.0), (0, 4.0, 4.0)]
    assert envelope_segments([], []) == []


def test_a_curve_that_stops_early_below_another_is_never_on_the_envelope():
    grid = np.geomspace(1e12, 1e14, 50)
    above = interpolate_curve([0, 1e12, 1e13, 1e14], [0.2, 0.4, 0.5, 0.6], grid)
    early = interpolate_curve(*zip(*[(0, 0.2), (1e12, 0.35), (1e13, 0.45), (1e14, 0.45)]), grid)
    assert set(upper_envelope(np.stack([early, above])).tolist()) == {1}


def _point(flops, acc, phases, ledger_phase, label="milestone"):
    return {"flops": flops, "accuracy": acc, "mean_length": 3.0, "phase": label, "ledger_phase": ledger_phase,
            "phase_flops": phases}


def _opd_curve(distill_accuracy, boundary_ledger_phase="expert:code"):
    """Experts spend 100 FLOPs (50 each), then distillation 1 FLOP per evaluation."""
    curve = [_point(0, 0.3, {"expert:math": 0}, "expert:math", "start"),
             _point(50, 0.3, {"expert:math": 50, "expert:code": 0}, "expert:code"),
             _point(100, 0.3, {"expert:math": 50, "expert:code": 50}, boundary_ledger_phase, "boundary")]
    for i, acc in enumerate(distill_accuracy, 1):
        curve.append(_point(100 + i, acc, {"expert:math": 50, "expert:code": 50, "distill": float(i)}, "distill"))
    return curve


def test_plateau_distillation_share_on_a_hand_made_curve():
    # 2 domains x 100 prompts: N = 200; best 0.60, one standard error sqrt(0.6 x 0.4 / 200) = 0.0346
    curve = _opd_curve([0.45, 0.55, 0.58, 0.60, 0.59])
    # 0.55 is 0.05 below the best (> 1 SE); 0.58 is within it: the third distillation point, 3 FLOPs
    assert plateau_distillation_share(curve, 200) == pytest.approx(3 / 100)
    # more prompts, a tighter standard error (0.0110 for N = 2000): only 0.60 and 0.59 are within it
    assert plateau_distillation_share(curve, 2000) == pytest.approx(4 / 100)


def test_evaluation_prompts_of_domains_scored_on_different_numbers_of_prompts():
    assert evaluation_prompts(100, 2) == 200
    assert evaluation_prompts(None, 2) is None
    # equal sizes: the same N as eval_size x domains
    assert evaluation_prompts(100, 2, {"a": 100, "b": 100}) == pytest.approx(200)
    # HumanEval's 164 beside MBPP's 500 under eval_size 1,000: the variance of the mean of the two
    # accuracies is p (1 - p) (1/164 + 1/500) / 4, so N = 4 / (1/164 + 1/500) = 494, not 2,000
    assert evaluation_prompts(1000, 2, {"humaneval": 164, "mbpp": 500}) == pytest.approx(4 / (1 / 164 + 1 / 500))
    # on the hand-made curve below, 494 prompts put 0.58 within one standard error of 0.60 (0.022)
    curve = _opd_curve([0.45, 0.55, 0.58, 0.60, 0.59])
    assert plateau_distillation_share(curve, evaluation_prompts(1000, 2)) == pytest.approx(4 / 100)
    assert plateau_distillation_share(
        curve, evaluation_prompts(1000, 2, {"humaneval": 164, "mbpp": 500})) == pytest.approx(3 / 100)


def test_plateau_counts_the_evaluation_where_distillation_starts():
    # distillation bought nothing: the plateau is the end of the last expert, at 0 distillation FLOPs,
    # whether that point is booked to the last expert's phase or to distillation
    flat = [0.3, 0.29, 0.3]
    assert plateau_distillation_share(_opd_curve(flat), 2000) == 0.0
    assert plateau_distillation_share(_opd_curve(flat, boundary_ledger_phase="distill"), 2000) == 0.0


def test_plateau_share_is_none_without_the_fields_or_without_distillation():
    curve = _opd_curve([0.5, 0.6])
    assert plateau_distillation_share(curve, None) is None  # no evaluation size
    bare = [{k: v for k, v in p.items() if k != "phase_flops"} for p in curve]
    assert plateau_distillation_share(bare, 200) is None  # an old record: no per-evaluation phase FLOPs
    grpo = [_point(f, a, {"train": f}, "train") for f, a in ((0, 0.3), (10, 0.5))]
    assert plateau_distillation_share(grpo, 200) is None  # no distillation
    external = [_point(f, a, {"distill": f}, "distill") for f, a in ((0, 0.3), (10, 0.5))]
    assert plateau_distillation_share(external, 200) is None  # distillation, but no experts to divide by


def _row(phase, flops):
    return {"category": "counted", "phase": phase, "kind": "update", "model": "m", "flops": flops, "tokens": 1,
            "calls": 1}


def test_expert_tail_share():
    ledger = [_row("expert:math", 60.0), _row("expert:code", 40.0), _row("distill", 5.0)]
    assert expert_tail_share({"expert_tail_flops": 15.0}, ledger) == pytest.approx(0.15)
    assert expert_tail_share({}, ledger) is None and expert_tail_share(None, ledger) is None
    assert expert_tail_share({"expert_tail_flops": 15.0}, [_row("train", 10.0)]) is None


def test_distillation_share_is_undefined_without_a_distill_phase():
    """recover's stages train teachers but its distillation arm is booked `recover:opd`: no share, not 0."""
    from reports.metrics import distillation_share

    def row(phase: str, flops: float) -> dict:
        return {"category": "counted", "phase": phase, "flops": flops}

    assert distillation_share([row("stage:1", 1e12), row("recover:opd", 6e10)]) is None
    assert distillation_share([row("distill", 5e10)]) is None
    assert distillation_share([row("expert:math", 1e12), row("distill", 5e10)]) == pytest.approx(0.05)
