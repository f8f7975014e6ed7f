"""Sweeps: many runs (methods x suites x seeds) in parallel local processes or Ray tasks, resumable.

    bench sweep --methods grpo-joint,opd-multi --suites math_code --seeds 3 [--jobs 2]
    bench sweep ... --executor ray [--address HOST:6379] [--gpus-per-run 1]
    bench reproduce [--profile tiny] [--seeds 1] [--executor ray ...]

A sweep skips runs whose `summary.json` is complete, resumes runs that have a checkpoint, and starts
the rest, whichever executor runs them (`bench.run.executors`). Locally each run is one process with
one torch thread (two spin-waiting threads per run on a 2-core machine are slower than one), so
`--jobs` defaults to the number of cores. `bench reproduce` starts its runs longest first, by the wall
times of the records its site already holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from rich.progress import Progress

from bench.errors import RunError
from bench.registry import reproduce_protocol
from bench.run.config import RunConfig
from bench.run.executors import LocalExecutor, SweepExecutor
from bench.run.runner import Runner
from bench.world import prepare, reference
from bench.world.profiles import PROFILES


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
    """`bench reproduce`'s runs: the protocol of `methods.REPRODUCE` (through the registry), `seeds` each."""
    protocol = reproduce_protocol()
    configs = plan(list(protocol["methods"]), list(protocol["suites"]), seeds, base)
    for method, suite in protocol["extra"]:
        configs += plan([method], [suite], seeds, base)
    return configs


def _state(config: RunConfig) -> tuple[str, Path]:
    """('complete' | 'resume' | 'new', run dir) of a planned run."""
    run_dir = Path(config.runs_dir) / Runner.run_id_for(config)
    if (run_dir / "summary.json").exists():
        return "complete", run_dir
    if (run_dir / "config.json").exists():
        return "resume", run_dir
    return "new", run_dir


def run_sweep(
    configs: list[RunConfig], jobs: int | None = None, console: Console | None = None,
    executor: SweepExecutor | None = None, expected_s: Mapping[str, float] | None = None,
) -> SweepResult:
    """Run every config not yet complete on `executor` (default: `jobs` local processes);
    failures are collected, not fatal.

    `expected_s` (run id -> seconds, e.g. the wall times of earlier records of the same runs) starts
    the runs longest first, those it does not know before all others, so that no long run is left
    to end alone on one core. Each run's numbers do not depend on when it starts.
    """
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
    if expected_s:
        todo.sort(key=lambda item: -expected_s.get(Runner.run_id_for(item[0]), math.inf))
    # Prepare each world's base once, in this process, before the workers start, and its external
    # teacher where it is shipped (an install); an unshipped teacher (hours of training) is built only
    # if a run asks for it, under the cache entry's lock.
    for profile in {c.profile for c, _ in todo}:
        prepare.prepare(PROFILES[profile], teacher=reference.ships(profile, "external"))
    executor = executor or LocalExecutor(jobs)
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
