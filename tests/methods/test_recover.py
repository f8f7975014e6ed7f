"""recover: learn a domain, lose it, recover it by GRPO and by OPD from the earlier self; FLOPs of each."""

from __future__ import annotations

import pytest

from methods.recover import RecoverConfig, protocol_flops
from tests.methods.support import (
    SMALL_DISTILL, SMALL_GRPO, check_curve, grouped, ledger_keys, phase_flops, run_method, spent_budget,
)

SMALL = {**grouped("grpo", SMALL_GRPO), **SMALL_DISTILL}

BUDGET = 6e10


def _check_phases(summary: dict) -> None:
    recovery = summary["recovery"]
    assert set(recovery) == {"domain", "target", "grpo_flops", "opd_flops", "check_size", "teacher_accuracy",
                             "lost_accuracy", "checks"}
    assert recovery["domain"] == "code" and 0.0 <= recovery["target"] <= 1.0
    assert recovery["check_size"] == 16
    keys = ledger_keys(summary)
    assert {("stage:code", "update", "student"), ("stage:math", "update", "student")} <= keys
    # The target and every held-out check are measurement, booked as evaluation and never counted.
    evaluated = {r["model"] for r in summary["ledger"] if r["category"] == "eval"}
    assert {"self:code", "student", "recover:grpo"} <= evaluated
    assert not any(p == "recover:target" for p, _, _ in keys)
    for how, model in (("grpo", "recover:grpo"), ("opd", "student")):
        assert (f"recover:{how}", "update", model) in keys or recovery[f"{how}_flops"] == 0.0
        # Every check in order: the arm's FLOPs so far (0 before its first step), its accuracy; the
        # last one reached the target exactly where the arm says it did, or none did.
        checks = recovery["checks"][how]
        assert checks and checks[0][0] == 0.0 and [f for f, _ in checks] == sorted(f for f, _ in checks)
        assert len(checks) == len({f for f, _ in checks})
        reached = [f for f, a in checks if a >= recovery["target"]]
        assert reached == ([] if recovery[f"{how}_flops"] is None else [recovery[f"{how}_flops"]])
        if recovery[f"{how}_flops"] is not None:
            # Reached: the phase stopped right there, so its FLOPs are the recorded ones.
            assert recovery[f"{how}_flops"] == pytest.approx(phase_flops(summary, f"recover:{how}"))
    assert not any(m == "recover:grpo" and p != "recover:grpo" for p, _, m in keys)
    # its own reads of held-out accuracy: the target's two, then every check of both arms
    assert summary["heldout_reads"] == 2 + sum(len(recovery["checks"][how]) for how in ("grpo", "opd"))
    check_curve(summary)


def test_unreachable_target_trains_both_ways_to_the_cap(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "recover", BUDGET, domain="code", target=1.0,
                         check_size=16, check_every=2, **SMALL)
    _check_phases(summary)
    assert summary["recovery"]["grpo_flops"] is None and summary["recovery"]["opd_flops"] is None
    keys = ledger_keys(summary)
    # GRPO recovery trains its own copy of the lost student; OPD trains the student from its self-teacher.
    assert {("recover:grpo", "update", "recover:grpo"), ("recover:opd", "update", "student"),
            ("recover:opd", "score", "self:code")} <= keys
    cap = 0.25 * BUDGET
    assert phase_flops(summary, "recover:grpo") >= cap
    assert phase_flops(summary, "recover:opd") >= cap or spent_budget(summary)


def test_relative_target_records_flops_where_reached(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "recover", BUDGET, domain="code", check_size=16,
                         **SMALL)
    _check_phases(summary)


def test_the_grpo_arm_steps_at_its_own_rate_and_the_stages_at_grpo_lr(fast_profile, tmp_path, monkeypatch):
    import methods.grpo
    import methods.recover

    rates: dict[str, list[float]] = {"stages": [], "arm": []}

    def spy(into: str, step):
        def recorded(ctx, policy, sampler, config):
            rates[into].append(config.lr)
            return step(ctx, policy, sampler, config)
        return recorded

    # the real steps run; the spies only note the rate each one was given
    monkeypatch.setattr(methods.grpo, "grpo_step", spy("stages", methods.grpo.grpo_step))
    monkeypatch.setattr(methods.recover, "grpo_step", spy("arm", methods.recover.grpo_step))
    run_method(fast_profile, tmp_path, "recover", BUDGET, grpo_arm_lr=5e-3, domain="code", target=1.0,
               check_size=16, check_every=2, **{**SMALL, "grpo.lr": "0.0005"})
    assert len(rates["stages"]) >= 2 and set(rates["stages"]) == {5e-4}
    assert len(rates["arm"]) >= 2 and set(rates["arm"]) == {5e-3}


def test_needs_a_second_domain_to_forget_with(fast_profile, tmp_path):
    with pytest.raises(ValueError, match="not in the suite"):
        run_method(fast_profile, tmp_path, "recover", BUDGET, domain="logic")


@pytest.mark.parametrize(
    "bad", [{"target_fraction": 0.0}, {"stage_fraction": 1.0}, {"check_every": 0}, {"target": 1.5},
            {"grpo_arm_lr": -1e-4}, {"forget_scale": 0.0}, {"forget_scale": float("inf")}]
)
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        RecoverConfig(**bad)


def test_the_budget_is_placed_as_before_at_forget_scale_1_and_in_proportion_above():
    for fraction, budget in ((0.5, 2e13), (0.3, 7.7e12), (0.9, 6e10)):
        stages = fraction * budget
        # bit for bit what the protocol placed before it had a forget_scale
        assert protocol_flops(RecoverConfig(stage_fraction=fraction), budget) == (
            stages / 2, stages / 2, (1 - fraction) / 2 * budget)
    # forget_scale 3 at 3e13: the domain's stage and each cap as at 1 and 2e13, the others' stages 3x
    assert protocol_flops(RecoverConfig(forget_scale=3), 3e13) == (5e12, 1.5e13, 5e12)
    learn, lose, cap = protocol_flops(RecoverConfig(stage_fraction=0.4, forget_scale=2.5), 1e13)
    assert learn + lose + 2 * cap == pytest.approx(1e13) and lose == pytest.approx(2.5 * learn)
    assert cap == pytest.approx(0.3 / 0.2 * learn)


def test_forget_scale_lengthens_only_the_other_domains_stage(fast_profile, tmp_path):
    """At forget_scale 2 and a budget raised by 1.25x the domain's stage is the default's, row for row."""
    quick = {"domain": "code", "check_size": 16, "target": 1e-9, **SMALL}  # both arms reach it at once
    default = run_method(fast_profile, tmp_path / "one", "recover", BUDGET, **quick)
    longer = run_method(fast_profile, tmp_path / "two", "recover", 1.25 * BUDGET, forget_scale=2, **quick)

    def rows(summary, phase):
        return [(r["kind"], r["model"], r["flops"], r["tokens"]) for r in summary["ledger"] if r["phase"] == phase]

    assert rows(longer, "stage:code") == rows(default, "stage:code")
    assert longer["recovery"]["teacher_accuracy"] == default["recovery"]["teacher_accuracy"]
    assert phase_flops(default, "stage:math") >= 0.25 * BUDGET
    assert phase_flops(longer, "stage:math") >= 0.5 * BUDGET > phase_flops(default, "stage:math")
