"""opd-multi: per-domain GRPO experts, then multi-teacher OPD into the student, on real tiny models."""

from __future__ import annotations

import pytest

from methods.opd_multi import OPDMultiConfig
from methods.distill import DistillConfig
from methods.grpo import GRPOStepConfig
from tests.methods.support import (
    SMALL_DISTILL, SMALL_GRPO, check_curve, grouped, ledger_keys, phase_flops, run_method, spent_budget,
)

SMALL = {**grouped("expert", SMALL_GRPO), **SMALL_DISTILL}
NEVER_CONVERGES = grouped("distill", use_reward_rule="false", kl_threshold=0.0, patience=1000)

BUDGET = 8e10


def test_experts_then_distillation_until_the_budget(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "opd-multi", BUDGET, expert_fraction=0.6, expert_patience=0,
                         **NEVER_CONVERGES, **SMALL)
    keys = ledger_keys(summary)
    assert summary["phase_streams"] == "shared"  # its experts, one after another on the run's stream
    assert summary["heldout_reads"] == 0  # it declares reads (to score its experts) but, by default, makes none
    for domain in ("math", "code"):
        expert = f"expert:{domain}"
        assert {(expert, "rollout", expert), (expert, "update", expert)} <= keys
        # Each expert trains only in its own phase, on its own budget share (overshoot < one step).
        assert not any(model == expert and kind != "score" and phase != expert for phase, kind, model in keys)
        assert 0.3 * BUDGET <= phase_flops(summary, expert) < 0.3 * BUDGET + 0.1 * BUDGET
        # In distillation the experts only score the student's samples.
        assert ("distill", "score", expert) in keys
        assert ("distill", "update", expert) not in keys
    assert {("distill", "rollout", "student"), ("distill", "update", "student")} <= keys
    assert not any(model == "student" and phase != "distill" for phase, _, model in keys)
    assert spent_budget(summary)
    check_curve(summary)
    # The student does not train before distillation: every point before it equals the base.
    first_distill = summary["flops"]["counted"] - phase_flops(summary, "distill")
    before = [p for p in summary["curve"] if p["flops"] <= first_distill]
    assert all(p["domain_accuracy"] == summary["curve"][0]["domain_accuracy"] for p in before)


def test_experts_stop_when_converged_and_leave_the_budget_to_distillation(fast_profile, tmp_path):
    # A gain no step can make: after its first step, each expert stops `expert_patience` steps later.
    summary = run_method(fast_profile, tmp_path, "opd-multi", BUDGET, expert_fraction=0.6, expert_patience=2,
                         expert_min_gain=0.99, **NEVER_CONVERGES, **SMALL)
    for domain in ("math", "code"):
        expert = f"expert:{domain}"
        calls = [r["calls"] for r in summary["ledger"] if r["phase"] == expert and r["kind"] == "update"]
        assert calls == [6]  # 3 steps x (forward + backward)
        assert phase_flops(summary, expert) < 0.1 * BUDGET
    assert phase_flops(summary, "distill") > 0.5 * BUDGET and spent_budget(summary)
    check_curve(summary)


def test_distillation_stops_when_converged(fast_profile, tmp_path):
    # A KL threshold no batch can miss: the rule fires after `patience` distillation steps.
    summary = run_method(fast_profile, tmp_path, "opd-multi", BUDGET, expert_fraction=0.5,
                         **grouped("distill", kl_threshold=1e9, patience=2), **SMALL)
    update_calls = [r["calls"] for r in summary["ledger"]
                    if r["phase"] == "distill" and r["kind"] == "update" and r["model"] == "student"]
    assert update_calls == [4]  # 2 steps x (forward + backward)
    assert not spent_budget(summary)
    assert phase_flops(summary, "distill") < 0.25 * BUDGET
    check_curve(summary)


@pytest.mark.parametrize("bad", [{"expert_fraction": 1.0}, {"expert_fraction": 0.0},
                                 {"expert_patience": -1}, {"expert_min_gain": 1.0}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        OPDMultiConfig(**bad)


@pytest.mark.parametrize("bad", [lambda: DistillConfig(patience=0), lambda: DistillConfig(loss_type="ppo"),
                                 lambda: GRPOStepConfig(group_size=1), lambda: DistillConfig(lr=0.0),
                                 lambda: GRPOStepConfig(clip_eps=-1.0), lambda: GRPOStepConfig(clip_eps=0.0)])
def test_nested_configs_reject_bad_values(bad):
    with pytest.raises(ValueError):
        bad()


def test_overrides_set_nested_settings_by_dotted_keys():
    from bench.errors import RunError, UnknownNameError
    from bench.registry import get_method
    from bench.run.config import method_config

    cls = get_method("opd-multi")
    config = method_config(cls, (("distill.lr", "1e-3"), ("expert.group_size", "4"), ("expert_fraction", "0.5")))
    assert (config.distill.lr, config.expert.group_size, config.expert_fraction) == (1e-3, 4, 0.5)
    assert config.expert.lr == GRPOStepConfig().lr and config.distill.patience == DistillConfig().patience
    with pytest.raises(UnknownNameError, match="did you mean 'distill.lr'"):
        method_config(cls, (("distill_lr", "1e-3"),))
    with pytest.raises(RunError, match="expected float"):
        method_config(cls, (("distill.lr", "fast"),))
    with pytest.raises(RunError, match="distill: lr and temperature must be > 0"):
        method_config(cls, (("distill.lr", "0"),))
    with pytest.raises(RunError, match="group of settings"):
        method_config(cls, (("distill", "1"),))


def test_paper_protocol_validation_plateau_and_fixed_distillation_schedule(fast_profile, tmp_path):
    # Experts stop on a validation plateau: a check every 2 steps, patience 1 check. Distillation runs
    # exactly 3 steps (the fixed schedule), whatever its KL or accuracy.
    summary = run_method(fast_profile, tmp_path, "opd-multi", BUDGET, expert_fraction=0.6, expert_stop="validation",
                         expert_patience=1, expert_eval_every=2, expert_eval_size=8,
                         **grouped("distill", steps=3, kl_threshold=1e9, patience=1), **SMALL)
    steps = summary["steps"]
    distill_steps = [s for s in steps if s["phase"] == "distill"]
    assert len(distill_steps) == 3
    for domain in ("math", "code"):
        expert_steps = [s for s in steps if s["phase"] == f"expert:{domain}"]
        # checks at 0, 2, 4, ...: it stops at a multiple of 2 once a check fails to improve
        assert expert_steps and len(expert_steps) % 2 == 0
        # validation checks decide when an expert stops: counted in its phase, which keeps to its share
        assert phase_flops(summary, f"expert:{domain}") < 0.3 * BUDGET + 0.1 * BUDGET
    assert not any(r["category"] == "eval" and r["model"].startswith("expert:") for r in summary["ledger"])
    metrics = summary["method_metrics"]
    assert metrics["distill_stop_flops"] == pytest.approx(phase_flops(summary, "distill"))
    tails = [metrics[f"expert_tail_flops:{d}"] for d in ("math", "code")]
    assert metrics["expert_tail_flops"] == pytest.approx(sum(tails))
    for d, tail in zip(("math", "code"), tails):
        assert 0 <= tail <= phase_flops(summary, f"expert:{d}")


def test_a_budget_spent_by_the_first_expert_skips_the_next_experts_validation_check(fast_profile, tmp_path):
    """A validation check is counted work: where the first expert's last step spends the whole budget, the
    next expert does not check its starting point (that would be counted work past the budget)."""
    summary = run_method(fast_profile, tmp_path, "opd-multi", 1e9, expert_fraction=0.9, expert_stop="validation",
                         expert_patience=1, expert_eval_every=2, expert_eval_size=8, **SMALL)
    steps = summary["steps"]
    assert steps[-1]["flops"] >= 1e9 and {s["phase"] for s in steps} == {"expert:math"}
    assert summary["flops"]["counted"] == steps[-1]["flops"]  # nothing counted after the last step


def test_expert_and_distillation_boundaries_are_evaluated(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "opd-multi", BUDGET, expert_fraction=0.6, expert_patience=0,
                         **NEVER_CONVERGES, **SMALL)
    curve = summary["curve"]
    boundaries = [p["boundary"] for p in curve if p["phase"] == "boundary"]
    assert "end expert:math" in boundaries and "end expert:code" in boundaries
    for point in curve:
        assert sum(point["phase_flops"].values()) == pytest.approx(point["flops"])
    # the last point before distillation FLOPs appear is the end of the last expert: where distillation starts
    start = max(i for i, p in enumerate(curve) if not p["phase_flops"].get("distill"))
    assert curve[start].get("boundary") == "end expert:code"



def test_with_score_experts_each_expert_is_scored_on_its_own_domain_as_evaluation(fast_profile, tmp_path):
    """Each trained expert's held-out accuracy on its own domain is in the record, booked as evaluation
    (never counted), and training is what it is without the scoring; that it is the expert's own score
    is checked against its checkpoint on a world where experts learn (tests/bench/test_full_budget.py)."""
    settings = dict(expert_fraction=0.6, expert_patience=0, **NEVER_CONVERGES, **SMALL)
    summary = run_method(fast_profile, tmp_path / "scored", "opd-multi", BUDGET, score_experts="true", **settings)
    plain = run_method(fast_profile, tmp_path / "plain", "opd-multi", BUDGET, **settings)
    assert not any(k.startswith("expert_heldout_accuracy") for k in plain["method_metrics"])
    assert summary["steps"] == plain["steps"] and summary["flops"]["counted"] == plain["flops"]["counted"]
    assert summary["curve"][-1]["accuracy"] == plain["curve"][-1]["accuracy"]
    assert (summary["heldout_reads"], plain["heldout_reads"]) == (2, 0)  # one read per expert, in its record
    for domain in ("math", "code"):
        assert 0.0 <= summary["method_metrics"][f"expert_heldout_accuracy:{domain}"] <= 1.0
    # the experts' stopping rule is off (no validation checks), so these rows are the scoring alone
    evaluated = {r["model"] for r in summary["ledger"] if r["category"] == "eval"}
    assert {"expert:math", "expert:code"} <= evaluated
    assert not {r["model"] for r in plain["ledger"] if r["category"] == "eval"} & {"expert:math", "expert:code"}
    assert not any(r["model"].startswith("expert:") and r["phase"] == "distill" and r["kind"] != "score"
                   for r in summary["ledger"] if r["category"] == "counted")
