"""Sweeps: many runs (methods x suites x seeds) in parallel local processes or Ray tasks, resumable.

    bench sweep --methods grpo-joint,opd-multi --suites math_code --seeds 3 [--jobs 2]
    bench sweep ... --executor ray [--address HOST:6379] [--gpus-per-run 1]
    bench reproduce [--profile tiny] [--seeds 1] [--executor ray ...]

A sweep skips runs whose `summary.json` is complete, resumes runs that have a checkpoint, and starts
the rest, whichever executor runs them (`bench.executors`). Locally each run is one process with
one torch thread (two spin-waiting threads per run on a 2-core machine are slower than one), so
`--jobs` defaults to the number of cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from bench.executors import LocalExecutor, SweepExecutor
from bench.errors import RunError
from bench.runner import RunConfig

# `bench reproduce`: every method that the paper's findings compare, on both multi-domain suites,
# plus the single-domain recovery protocol (finding 4) on math_code.
REPRODUCE_METHODS = ("grpo-joint", "opd-multi", "opd-external", "self-grpo", "sft")
REPRODUCE_SUITES = ("math_code", "four_domain")
RECOVERY = ("recover", "math_code")


@dataclass
class SweepResult:
    done: list[str]
    skipped: list[str]
    failed: list[tuple[str, str]]


def plan(methods: list[str], suites: list[str], seeds: int, base: RunConfig) -> list[RunConfig]:
    return [
        replace(base, method=m, suite=s, seed=seed, run_name=None)
        for seed in range(seeds)
        for s in suites
        for m in methods
    ]


def reproduce_plan(seeds: int, base: RunConfig) -> list[RunConfig]:
    configs = plan(list(REPRODUCE_METHODS), list(REPRODUCE_SUITES), seeds, base)
    return configs + plan([RECOVERY[0]], [RECOVERY[1]], seeds, base)


def _state(config: RunConfig) -> tuple[str, Path]:
    """('complete' | 'resume' | 'new', run dir) of a planned run."""
    from bench.runner import Runner

    run_dir = Path(config.runs_dir) / Runner.run_id_for(config)
    if (run_dir / "summary.json").exists():
        return "complete", run_dir
    if (run_dir / "config.json").exists():
        return "resume", run_dir
    return "new", run_dir


def _run_one(config: RunConfig, resume: bool, env: dict[str, str] | None = None) -> str:
    """One run in a worker (a local process or a Ray task); `env`: variables to set there first."""
    os.environ.update(env or {})
    import torch

    torch.set_num_threads(1)
    from bench.runner import Runner

    summary = Runner(config, resume=resume, progress=False).run()
    return f"{summary['run_id']}: {100 * summary['final_accuracy']:.1f}% at {summary['flops']['counted']:.2e} FLOPs"


def run_sweep(
    configs: list[RunConfig], jobs: int | None = None, console: Console | None = None,
    executor: SweepExecutor | None = None,
) -> SweepResult:
    """Run every config not yet complete on `executor` (default: `jobs` local processes);
    failures are collected, not fatal."""
    console = console or Console()
    result = SweepResult([], [], [])
    todo = []
    for config in configs:
        state, run_dir = _state(config)
        if state == "complete":
            result.skipped.append(run_dir.name)
        else:
            todo.append((config, state == "resume"))
    if not todo:
        return result
    # Prepare once, in this process, before the workers start: they would otherwise race to build it.
    from bench.world import prepare
    from bench.world.profiles import PROFILES

    for profile in {c.profile for c, _ in todo}:
        prepare.prepare(PROFILES[profile])
    executor = executor or LocalExecutor(jobs)
    from rich.progress import Progress

    outcomes = executor.run(todo)
    with Progress(console=console) as bar:
        task = bar.add_task(f"sweep ({executor.describe(len(todo))})", total=len(todo))
        for config, outcome in outcomes:
            name = f"{config.method}/{config.suite}/s{config.seed}"
            if isinstance(outcome, str):
                result.done.append(outcome)
                bar.console.print(outcome)
            elif isinstance(outcome, (RunError, ValueError, RuntimeError, OSError)):
                result.failed.append((name, str(outcome)))
                bar.console.print(f"[red]failed[/red] {name}: {escape(str(outcome))}", soft_wrap=True)
            else:
                raise outcome
            bar.advance(task)
    return result
