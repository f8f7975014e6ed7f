"""GRPO: the step's statistics, the per-step trace, and that it learns."""

from __future__ import annotations

import json

import pytest

from tests.methods.support import SMALL_GRPO, check_curve, run_method


def test_steps_are_traced_with_their_flops(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "grpo-joint", 4e10, **SMALL_GRPO)
    steps = summary["steps"]
    run_dir = tmp_path / summary["run_id"]
    on_disk = [json.loads(line) for line in (run_dir / "steps.jsonl").read_text().splitlines()]
    assert on_disk == steps and len(steps) >= 2
    assert [s["step"] for s in steps] == list(range(1, len(steps) + 1))
    assert steps[-1]["flops"] == pytest.approx(summary["flops"]["counted"])
    flops = [0.0] + [s["flops"] for s in steps]
    assert summary["max_step_flops"] == pytest.approx(max(b - a for a, b in zip(flops, flops[1:])))
    for s in steps:
        assert s["phase"] == "train"
        assert 0 <= s["reward"] <= 1 and 0 <= s["zero_adv_share"] <= 1 and s["mean_length"] > 0
        assert {"loss", "grad_norm", "clip_frac", "clip_region"} <= set(s)
    # overshoot is at most one step
    assert summary["flops"]["counted"] <= summary["budget_flops"] + summary["max_step_flops"]
    check_curve(summary)
    # each evaluation keeps the same first held-out prompts of each domain with their completions
    from bench.run.runner import SAMPLES_PER_DOMAIN
    from tasks import get_suite

    samples, curve = summary["samples"], summary["curve"]
    assert len(samples) == len(curve) * SAMPLES_PER_DOMAIN * len(summary["domains"])
    assert [s["flops"] for s in samples[::SAMPLES_PER_DOMAIN * len(summary["domains"])]] == [p["flops"] for p in curve]
    heldout = get_suite(summary["suite"], summary["difficulty"], fast_profile.task_format).heldout("math")
    assert [s["prompt"] for s in samples if s["domain"] == "math"][:SAMPLES_PER_DOMAIN] == \
        [p.prompt for p in heldout[:SAMPLES_PER_DOMAIN]]
    assert all(s["reward"] in (0.0, 1.0) and isinstance(s["completion"], str) for s in samples)
    assert not any("samples" in p for p in curve)  # listed once, in the record's own field


def test_milestones_are_log_spaced_early(fast_profile, tmp_path):
    from bench.run.config import RunConfig

    config = RunConfig(method="grpo-joint", profile=fast_profile.name)
    assert config.milestones[:4] == [0.01, 0.02, 0.05, 0.1]
    assert config.milestones[-1] == 1.0 and len(config.milestones) == 13
    # a budget of many small steps: an evaluation lands at each early milestone, not at the first tenth
    summary = run_method(fast_profile, tmp_path, "grpo-joint", 3e11, eval_every=0.5, prompts_per_step=2,
                         group_size=2)
    budget = summary["budget_flops"]
    milestone_flops = [p["flops"] / budget for p in summary["curve"] if p["phase"] == "milestone"]
    for fraction in (0.01, 0.02, 0.05, 0.5):
        assert any(fraction <= f < fraction + 0.01 for f in milestone_flops), (fraction, milestone_flops)


def test_the_budget_is_read_only(fast_profile):
    from bench.api import RunContext

    ctx = RunContext.__new__(RunContext)
    ctx._budget_flops = 1.0
    with pytest.raises(AttributeError):
        ctx.budget_flops = 1e30
