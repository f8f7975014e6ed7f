"""`RunContext.map_phases` in child contexts books what the sequential path books; executor options.

A deterministic phase (supervised steps on sampler problems: no sampling generator involved) must
give the same ledger rows, weights, sampler positions and state whether it runs on the run's own
context (`sequential`) or in child contexts merged back (`isolated`, the path Ray tasks take without
Ray). The Ray variant of the same check is in test_ray.py.
"""

from __future__ import annotations

import sys

import pytest
import torch
from typer.testing import CliRunner

from bench.cli import app
from bench.context import RunContext
from bench.accounting.ledger import Ledger
from bench.world.models import TINY_SPECS, build_tiny
from bench.policy import Policy
from bench.registry import get_suite
from bench.run.phases import phase_runner
from bench.rollout.torch_engine import TorchRollout


def sft_expert(ctx: RunContext, domain: str) -> float:
    """A stand-in expert phase: two supervised steps on its domain's problems, booked `expert:<domain>`."""
    expert = ctx.clone(ctx.student, f"expert:{domain}")
    sampler = ctx.sampler(f"expert:{domain}", [domain])
    with ctx.phase(f"expert:{domain}"):
        for _ in range(2):
            problems = sampler.next(8)
            loss = ctx.sft_step(expert, [p.prompt for p in problems], [p.answer for p in problems], lr=1e-2)
    ctx.state.setdefault("losses", {})[domain] = loss
    return loss


def make_context(executor: str, steps: list) -> RunContext:
    ledger = Ledger()
    model, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    return RunContext(
        suite=get_suite("math_code", "easy", "tiny"), seed=3, budget_flops=1e12, ledger=ledger,
        student=Policy("student", model, tokenizer, ledger=ledger), backend=TorchRollout(),
        teacher_loader=lambda name: None, max_new_tokens=8, on_step=steps.append,
        phase_runner=phase_runner(executor),
    )


def run_phases(executor: str) -> tuple[RunContext, dict, list]:
    steps: list = []
    ctx = make_context(executor, steps)
    return ctx, ctx.map_phases(sft_expert, ctx.domains), steps


def without_seconds(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def assert_same_phases(ctx: RunContext, results: dict, ref: RunContext, ref_results: dict) -> None:
    """Everything the sequential path leaves behind, the child path leaves behind too, exactly."""
    assert results == ref_results
    assert without_seconds(ctx._ledger.rows()) == without_seconds(ref._ledger.rows())
    assert {r["phase"] for r in ctx._ledger.rows()} == {"expert:math", "expert:code"}
    assert ctx._sampler_positions() == ref._sampler_positions() == {"expert:math": 16, "expert:code": 16}
    assert ctx.state == ref.state
    base = ref.student._model.state_dict()
    for domain in ctx.domains:
        mine = ctx._policies[f"expert:{domain}"]
        theirs = ref._policies[f"expert:{domain}"]
        assert mine.updates == theirs.updates == 2
        for name, tensor in theirs._model.state_dict().items():
            assert torch.equal(mine._model.state_dict()[name], tensor), name
        assert not torch.equal(theirs._model.state_dict()["lm_head.weight"], base["lm_head.weight"])


def test_isolated_phases_book_exactly_what_sequential_phases_book():
    ref, ref_results, ref_steps = run_phases("sequential")
    ctx, results, steps = run_phases("isolated")
    assert_same_phases(ctx, results, ref, ref_results)
    assert (len(ref_steps), len(steps)) == (0, 1)  # the runner hears once, after the merge
    assert ctx._ledger.counted_flops > 0


def test_a_resumed_complete_phase_is_not_charged_again():
    ctx, _, _ = run_phases("isolated")
    spent = ctx._ledger.counted_flops
    again = ctx.map_phases(skip_if_done, ctx.domains)
    assert ctx._ledger.counted_flops == spent
    assert again["math"] > 0 and again["code"] > 0


def skip_if_done(ctx: RunContext, domain: str) -> float:
    # As grpo_phase does: a phase conditioned on the ledger sees the parent's prior rows.
    return ctx.phase_flops(f"expert:{domain}")


def test_a_failing_phase_fails_the_call():
    ctx = make_context("isolated", [])
    with pytest.raises(RuntimeError, match="not available inside a parallel phase"):
        ctx.map_phases(use_teacher, ["math"])


def use_teacher(ctx: RunContext, key: str) -> None:
    ctx.teacher("external")


def test_sweep_with_ray_executor_and_no_ray_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without Ray
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo-joint", "--executor", "ray", "--runs", str(tmp_path)])
    assert out.exit_code == 2
    message = out.stderr or out.output
    assert "pip install 'opd-bench[ray]'" in message and len(message.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, error", [
    (["--address", "127.0.0.1:6379"], "need --executor ray"),
    (["--gpus-per-run", "1"], "need --executor ray"),
    (["--executor", "slurm"], "unknown executor"),
])
def test_sweep_executor_options_are_checked_before_any_run(tmp_path, args, error):
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo-joint", "--runs", str(tmp_path), *args])
    assert out.exit_code == 2
    assert error in (out.stderr or out.output).lower()
    assert not any(tmp_path.iterdir())
