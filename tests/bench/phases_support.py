"""Phases that run the same on every executor, and the check that two runs of them left the same
behind: shared by the executor tests (test_phases.py) and the Ray tests (test_ray.py).

A deterministic phase (supervised steps on sampler problems: no sampling generator involved) must
give the same ledger rows, weights, sampler positions and state whatever ran it.
"""

from __future__ import annotations

import torch

from bench.accounting.ledger import Ledger
from bench.context import RunContext
from bench.policy import Policy
from bench.registry import get_suite
from bench.rollout.torch_engine import TorchRollout
from bench.run.phases import phase_runner
from bench.world.models import TINY_SPECS, build_tiny


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


def make_context(executor: str, steps: list, news: list | None = None, replayed: list | None = None,
                 **restored) -> RunContext:
    """A context on a fresh tiny student; `restored`: what a resumed run's context is given (policy_states, ...)."""
    ledger = Ledger()
    model, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    return RunContext(
        suite=get_suite("math_code", "easy", "tiny"), seed=3, budget_flops=1e12, ledger=ledger,
        student=Policy("student", model, tokenizer, ledger=ledger), backend=TorchRollout(),
        teacher_loader=lambda name: None, max_new_tokens=8, on_step=steps.append,
        phase_runner=phase_runner(executor),
        on_progress=lambda spent, line: (news if news is not None else []).append((spent, line)),
        on_replay=lambda spent, phase, stats: (replayed if replayed is not None else []).append((spent, phase, stats)),
        **restored,
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
