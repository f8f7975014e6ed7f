"""self-grpo: sequential GRPO stages on one student, then OPD from its own end-of-stage snapshots."""

from __future__ import annotations

import pytest

from methods.self_grpo import SelfGRPOConfig
from tests.methods.support import (
    SMALL_DISTILL, SMALL_GRPO, check_curve, grouped, ledger_keys, phase_flops, run_method, spent_budget,
)

BUDGET = 8e10


def test_stages_then_self_distillation(fast_profile, tmp_path):
    # Distillation must run to the budget: the KL estimate is noisy and can dip below any threshold,
    # so the rule is given a patience no run of this size reaches.
    summary = run_method(fast_profile, tmp_path, "self-grpo", BUDGET, stage_fraction=0.6, order="code,math",
                         **grouped("distill", kl_threshold=0.0, patience=1000, use_reward_rule="false"),
                         **grouped("stage", SMALL_GRPO), **SMALL_DISTILL)
    keys = ledger_keys(summary)
    for domain in ("math", "code"):
        assert {(f"stage:{domain}", "rollout", "student"), (f"stage:{domain}", "update", "student")} <= keys
        assert 0.3 * BUDGET <= phase_flops(summary, f"stage:{domain}") < 0.4 * BUDGET
        # The self-teacher is a frozen snapshot: it only scores, and only in distillation.
        assert {(p, k) for p, k, m in keys if m == f"self:{domain}"} == {("distill", "score")}
    assert {("distill", "rollout", "student"), ("distill", "update", "student")} <= keys
    assert spent_budget(summary)
    check_curve(summary)


def test_order_must_name_each_domain_once(fast_profile, tmp_path):
    from bench.errors import RunError

    with pytest.raises(ValueError, match="order"):
        run_method(fast_profile, tmp_path, "self-grpo", BUDGET, order="math")
    with pytest.raises(RunError, match="repeats"):
        run_method(fast_profile, tmp_path / "b", "self-grpo", BUDGET, order="math,math")


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        SelfGRPOConfig(stage_fraction=1.0)
