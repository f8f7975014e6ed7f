"""The shared OPD mechanics (methods.distill) on real tiny models: log-prob alignment, teacher routing."""

from __future__ import annotations

import pytest
import torch

from methods.distill import DistillConfig, _converged, distill_step, subset, teacher_logprobs


@pytest.fixture
def ctx(fast_profile):
    from bench.world import prepare
    from bench.context import RunContext
    from bench.accounting.ledger import Ledger
    from bench.policy import Policy
    from bench.registry import get_suite
    from bench.rollout.torch_engine import TorchRollout

    prepared = prepare.prepare(fast_profile, progress=False)
    ledger = Ledger()
    return RunContext(
        suite=get_suite("math_code", "easy", fast_profile.task_format), seed=0, budget_flops=1e12, ledger=ledger,
        student=Policy("student", *prepared.load_student(), ledger=ledger), backend=TorchRollout(),
        teacher_loader=lambda name: prepared.load_teacher(name, ledger), max_new_tokens=8, on_step=lambda s: None,
    )


def test_rollout_logprobs_are_the_students_own(ctx):
    batch = ctx.rollout(ctx.student, ctx.sampler("t").next(6), n=3)
    scored = ctx.score(ctx.student, batch)  # [B, T]
    mask = batch.completion_mask.bool()
    assert batch.logprobs.shape == scored.shape
    assert torch.allclose(batch.logprobs[mask], scored[mask], atol=1e-4)
    assert torch.all(batch.logprobs[~mask] == 0)


def test_each_row_is_scored_by_its_domains_teacher_only(ctx):
    external, self_teacher = ctx.teacher("external"), ctx.snapshot(ctx.student, "self")
    batch = ctx.rollout(ctx.student, ctx.sampler("t").next(8), n=2)
    domains = batch.domains()
    assert {"math", "code"} <= set(domains)
    before = {r["model"]: r["tokens"] for r in ctx._ledger.rows() if r["kind"] == "score"}
    assert not before
    mixed = teacher_logprobs(ctx, {"math": external, "code": self_teacher}, batch)  # [B, T]
    tokens = {r["model"]: r["tokens"] for r in ctx._ledger.rows() if r["kind"] == "score"}
    full_external, full_self = ctx.score(external, batch), ctx.score(self_teacher, batch)
    mask = batch.completion_mask.bool()
    for row, domain in enumerate(domains):
        want = full_external if domain == "math" else full_self
        assert torch.allclose(mixed[row][mask[row]], want[row][mask[row]], atol=1e-4)
    # Each teacher paid for its own rows only, trimmed to their own width.
    math_idx = [i for i, p in enumerate(batch.problems) if p.domain == "math"]
    code_idx = [i for i, p in enumerate(batch.problems) if p.domain == "code"]
    math_part, code_part = subset(batch, math_idx), subset(batch, code_idx)
    assert tokens == {"external": math_part.input_ids.numel(), "self": code_part.input_ids.numel()}
    assert math_part.size == len(math_idx) * batch.n and all(p.domain == "math" for p in math_part.problems)
    assert math_part.input_ids.shape[1] == int(math_part.attention_mask.sum(1).max())


def test_missing_teacher_is_a_clear_error(ctx):
    batch = ctx.rollout(ctx.student, ctx.sampler("t").next(8), n=1)
    with pytest.raises(KeyError, match="no teacher for domain"):
        teacher_logprobs(ctx, {"math": ctx.student}, batch)


def test_distilling_from_an_identical_teacher_has_zero_kl(ctx):
    teacher = ctx.snapshot(ctx.student, "self")
    config = DistillConfig(prompts_per_step=6, samples=2)
    stats = distill_step(ctx, ctx.student, {"math": teacher, "code": teacher}, ctx.sampler("d"), config)
    assert abs(stats["reverse_kl"]) < 1e-4
    assert 0.0 <= stats["reward"] <= 1.0
    assert stats["count:math"] + stats["count:code"] == 12
    # The update went through the student's policy-gradient step, charged as its update.
    assert ctx.student.updates == 1
    assert any(r["kind"] == "update" and r["model"] == "student" for r in ctx._ledger.rows())


def test_convergence_rules():
    config = DistillConfig(patience=2, reward_tolerance=0.05)
    progress = {"low_kl_steps": 2, "window": []}
    assert _converged(progress, config, None) == "kl"
    progress = {"low_kl_steps": 0, "window": [{"math": [5, 10]}, {"math": [6, 10]}]}
    assert _converged(progress, config, {"math": 0.6}) == "reward"  # 0.55 >= 0.6 - 0.05
    assert _converged(progress, config, {"math": 0.7}) is None
    assert _converged(progress, config, {"math": 0.5, "code": 0.1}) is None  # no code samples yet
    assert _converged({"low_kl_steps": 0, "window": progress["window"][:1]}, config, {"math": 0.1}) is None
    off = DistillConfig(patience=2, use_reward_rule=False)
    assert _converged(progress, off, {"math": 0.1}) is None
