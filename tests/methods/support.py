"""Helpers for the method tests: run a method on the fast test profile and check its record."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

# Small batches so that a few steps of each phase fit a test's budget in seconds.
SMALL_GRPO = {"prompts_per_step": "8", "group_size": "4"}  # a GRPO step (flat in grpo's own config)
SMALL_DISTILL = {"distill.prompts_per_step": "8", "distill.samples": "4"}


def grouped(group: str, settings: dict | None = None, **more) -> dict:
    """A nested config's settings as dotted override keys: grouped("distill", lr=1) -> {"distill.lr": 1}."""
    return {f"{group}.{k}": v for k, v in {**(settings or {}), **more}.items()}


def run_config(profile, runs_dir: Path, method: str, budget: float, eval_every: float = 0.25, **overrides):
    from bench.run.config import RunConfig

    return RunConfig(
        method=method, profile=profile.name, budget_flops=budget, runs_dir=runs_dir, eval_size=16,
        eval_every=eval_every, overrides=tuple((k, str(v)) for k, v in overrides.items()),
    )


def run_method(profile, runs_dir: Path, method: str, budget: float, **overrides) -> dict:
    """Run `method` to completion on the fast profile; returns summary.json's record."""
    from bench.run.runner import Runner

    return Runner(run_config(profile, runs_dir, method, budget, **overrides), progress=False).run()


def phase_flops(summary: dict, phase: str, kind: str | None = None, model: str | None = None) -> float:
    return sum(r["flops"] for r in summary["ledger"] if r["category"] == "counted" and r["phase"] == phase
               and (kind is None or r["kind"] == kind) and (model is None or r["model"] == model))


def ledger_keys(summary: dict) -> set[tuple[str, str, str]]:
    """(phase, kind, model) of every counted ledger row."""
    return {(r["phase"], r["kind"], r["model"]) for r in summary["ledger"] if r["category"] == "counted"}


def check_curve(summary: dict) -> None:
    """Starts at 0 FLOPs, FLOPs never decrease, accuracies and lengths are sane."""
    curve = summary["curve"]
    assert curve[0]["flops"] == 0.0 and curve[0]["phase"] == "start"
    flops = [p["flops"] for p in curve]
    assert flops == sorted(flops)
    assert flops[-1] == pytest.approx(summary["flops"]["counted"])
    for point in curve:
        assert 0.0 <= point["accuracy"] <= 1.0
        assert all(0.0 <= a <= 1.0 for a in point["domain_accuracy"].values())
        assert set(point["domain_accuracy"]) == set(summary["domains"])
        assert math.isfinite(point["mean_length"]) and point["mean_length"] >= 0


def spent_budget(summary: dict) -> bool:
    return summary["flops"]["counted"] >= summary["budget_flops"]


# -- killing and resuming a run ----------------------------------------------------------------------
# Experts on 60% of the budget, then distillation that never converges: every phase gets steps.
OPD_RESUME = dict(expert_fraction=0.6, **grouped("distill", kl_threshold=0.0, use_reward_rule="false"),
                **grouped("expert", SMALL_GRPO), **SMALL_DISTILL)
OPD_RESUME_BUDGET = 8e10


class Killed(Exception):
    """Stands in for the process dying."""


def counting(steps: list, run_dir=None, base: type | None = None, phase: str = "distill") -> type:
    """`base` (default opd-multi) that appends to `steps` at each step; with `run_dir`, it dies in `phase`
    after a checkpoint there (one whose method state has `phase`), at a step that wrote none (so the
    resumed run has work to redo)."""
    if base is None:
        from methods.opd_multi import OPDMulti as base
    state_file = run_dir / "checkpoints" / "latest" / "state.json" if run_dir else None

    def stamp():
        return state_file.stat().st_mtime_ns if state_file and state_file.exists() else None

    class Counted(base):
        def run(self, ctx):
            done = ctx.step_done

            def step_done(**stats):
                before = stamp()
                done(**stats)
                steps.append(1)
                if before is not None and stamp() == before and phase in json.loads(state_file.read_text())["state"]:
                    raise Killed

            ctx.step_done = step_done
            super().run(ctx)

    return Counted


def comparable(summary: dict) -> dict:
    """What must not depend on the interruption: all that `bench compare` holds a rerun to, the whole
    record but its inputs, provenance and times (ledger, FLOP totals, curve, steps, accuracies,
    samples, recovery, the method's figures)."""
    from reports.compare import outcome

    return outcome(summary)
