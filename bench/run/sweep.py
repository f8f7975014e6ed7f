"""Sweeps: many runs (methods x suites x seeds) in parallel local processes or Ray tasks, resumable.

    bench sweep --methods grpo-joint,opd-multi --suites math_code --seeds 3 [--jobs 2]
    bench sweep ... --executor ray [--address HOST:6379] [--device cuda --gpus-per-run 1]
    bench reproduce [--profile tiny] [--seeds 1] [--executor ray ...]

A sweep skips runs whose `summary.json` is complete, resumes runs that have a checkpoint, and starts
the rest, whichever executor runs them (`bench.run.executors`); a run folder begun with another
configuration, or from other models than its world holds now, stops it before any run starts
(`_state`). Locally each run is one process with one torch thread (two spin-waiting threads per run
on a 2-core machine are slower than one), so `--jobs` defaults to the number of cores. `bench
reproduce` orders its runs by the wall times of the records its site already holds, so that its
workers end together (`start_order`). As each run ends the sweep prints a line with the count and an
estimate of the time left, and appends it to `<runs>/sweep.log` (`SweepLog`, `time_left`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from bench import store
from bench.errors import RunError
from bench.progress import PipeConsole, clock, news_line
from bench.registry import reproduce_protocol
from bench.run.config import RunConfig
from bench.run.executors import LocalExecutor, SweepExecutor
from bench.run.record import code_difference, models_difference, record_damage
from bench.run.runner import Runner
from bench.world import prepare, reference
from bench.world.profiles import PROFILES


SWEEP_LOG = "sweep.log"  # in the runs folder: the sweep's own lines, appended by every sweep into it


@dataclass
class SweepResult:
    done: list[str]
    skipped: list[str]
    failed: list[tuple[str, str]]


def plan(methods: list[str], suites: list[str], seeds: list[int], base: RunConfig) -> list[RunConfig]:
    """Every method on every suite at every seed, seed by seed."""
    return [
        replace(base, method=m, suite=s, seed=seed, run_name=None)
        for seed in seeds
        for s in suites
        for m in methods
    ]


def reproduce_plan(seeds: list[int], base: RunConfig) -> list[RunConfig]:
    """`bench reproduce`'s runs: the protocol of `methods.REPRODUCE` (through the registry), `seeds` each."""
    protocol = reproduce_protocol()
    configs = plan(list(protocol["methods"]), list(protocol["suites"]), seeds, base)
    for method, suite in protocol["extra"]:
        configs += plan([method], [suite], seeds, base)
    return configs


def start_order(expected: list[float | None], workers: int | None) -> list[int]:
    """The order to start runs in (indices into `expected`, their expected seconds, None: unknown) on
    `workers` workers that each take the next run when free, so that the workers end together.

    Runs with no expected time start first. The rest are shared out among the workers, longest to the
    least loaded (LPT), then improved by moving or swapping runs between the most loaded worker and
    another while that lowers the larger of the two loads; each worker's share runs longest first, and
    the runs start in the order of their planned start times. Runs of similar lengths on a few workers
    are where this matters: on two workers, LPT alone leaves one idle for about half a run at the end.
    Without a worker count, the known runs start longest first.
    """
    unknown = [i for i, e in enumerate(expected) if e is None]
    known = sorted((i for i, e in enumerate(expected) if e is not None), key=lambda i: -expected[i])
    if not workers or workers < 2 or len(known) <= workers:
        return unknown + known
    bins: list[list[int]] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for i in known:
        b = load.index(min(load))
        bins[b].append(i)
        load[b] += expected[i]
    for _ in range(100 * len(known)):  # each change strictly lowers the sorted loads: it ends
        top = load.index(max(load))
        best = None  # (pair's new larger load, other worker, run out of top, run into top or None, load moved)
        for other in range(workers):
            if other == top:
                continue
            for i in bins[top]:
                for j in [None, *bins[other]]:
                    delta = expected[i] - (expected[j] if j is not None else 0.0)
                    if delta <= 0:
                        continue
                    worst = max(load[top] - delta, load[other] + delta)
                    if worst < load[top] - 1e-9 and (best is None or worst < best[0]):
                        best = (worst, other, i, j, delta)
        if best is None:
            break
        _, other, i, j, delta = best
        bins[top].remove(i)
        bins[other].append(i)
        if j is not None:
            bins[other].remove(j)
            bins[top].append(j)
        load[top] -= delta
        load[other] += delta
    starts = []
    for b, share in enumerate(bins):
        t = 0.0
        for i in sorted(share, key=lambda i: -expected[i]):
            starts.append((t, b, i))
            t += expected[i]
    return unknown + [i for _, _, i in sorted(starts)]


def _state(config: RunConfig, hashes: dict[tuple, dict[str, str]]) -> tuple[str, Path]:
    """('complete' | 'resume' | 'new', run dir) of a planned run. A run folder begun with another
    configuration (another `--set`, budget or evaluation setting, a changed suite or world version) is
    a RunError that names the first value that differs (`Runner.difference`), and so is one begun or
    completed from other models than the world holds now (`models_difference`): neither its record nor
    its checkpoint is this run's. `hashes` keeps the models' hashes of each world the sweep has checked."""
    run_dir = Path(config.runs_dir) / Runner.run_id_for(config)
    if not (run_dir / "config.json").exists():
        return "new", run_dir
    runner = Runner(config, progress=False)
    written = store.read_json(run_dir / "config.json")  # one that cannot be read: CorruptRunError, one line
    if why := runner.difference(written):
        raise RunError(f"{run_dir} holds a run of another configuration ({why}); choose another --runs folder, or "
                       "move it away")
    complete = (run_dir / "summary.json").exists()
    made = store.read_json(run_dir / "summary.json") if complete else written
    if complete and (why := record_damage(made, run_dir.name)):
        raise RunError(f"{run_dir}/summary.json is not this run's record ({why}); choose another --runs folder, "
                       "or move it away")
    world = (config.profile, config.model, config.external, config.teachers, config.device)
    if world not in hashes:
        hashes[world] = runner.models().model_hashes()
    if why := models_difference(made, hashes[world]):
        raise RunError(f"{run_dir} holds a run made from other models ({why}); choose another --runs folder, or "
                       "move it away")
    if complete and (why := code_difference(made, runner.method_code)):
        raise RunError(f"{run_dir} holds a run made by other code of the plugin ({why}); choose another --runs "
                       "folder, or move it away")
    return ("complete" if complete else "resume"), run_dir


def run_sweep(
    configs: list[RunConfig], jobs: int | None = None, console: Console | None = None,
    executor: SweepExecutor | None = None, expected_s: Mapping[str, float] | None = None,
) -> SweepResult:
    """Run every config not yet complete on `executor` (default: `jobs` local processes);
    failures are collected, not fatal.

    `expected_s` (run id -> seconds, e.g. the wall times of earlier records of the same runs) orders
    the runs so that the executor's workers end together (`start_order`; those it does not know
    start first). Each run's numbers do not depend on when it starts.
    """
    console = console or PipeConsole()
    result = SweepResult([], [], [])
    todo, hashes = [], {}
    for config in configs:
        state, run_dir = _state(config, hashes)
        if state == "complete":
            result.skipped.append(run_dir.name)
        else:
            todo.append((config, state == "resume"))
    if not todo:
        return result
    executor = executor or LocalExecutor(jobs)
    workers = executor.workers(len(todo)) if hasattr(executor, "workers") else None
    ids = [Runner.run_id_for(c) for c, _ in todo]
    expected = [(expected_s or {}).get(i) for i in ids]
    if expected_s:
        order = start_order(expected, workers)
        todo, ids, expected = [todo[i] for i in order], [ids[i] for i in order], [expected[i] for i in order]
    # Prepare each world's base once, in this process, before the workers start, and its external
    # teacher where it is shipped (an install); an unshipped teacher (hours of training) is built only
    # if a run asks for it, under the cache entry's lock. The hf profile's runs load the folders they name.
    for profile in {c.profile for c, _ in todo if PROFILES[c.profile].task_format != "hf"}:
        prepare.prepare(PROFILES[profile], teacher=reference.ships(profile, "external"))
    outcomes = executor.run(todo)
    try:
        _report(outcomes, todo, ids, expected, workers, executor.describe(len(todo)), result, console)
    finally:  # ended, or stopped early (Ctrl-C, SIGTERM, an error): the executor stops its runs under way now
        for end in (getattr(outcomes, "close", None), getattr(executor, "stop", None)):
            if end:
                end()
    return result


def _report(outcomes: Iterator, todo: list, ids: list[str], expected: list[float | None], workers: int | None,
            where: str, result: SweepResult, console: Console) -> None:
    """Collect the outcomes into `result` as they come, with a progress bar and a line per run (`todo`
    in start order, with each run's id and expected seconds; `workers`: runs at once, where known)."""
    total = len(todo)
    log = Path(todo[0][0].runs_dir) / SWEEP_LOG
    with Progress(console=console) as bar:
        task = bar.add_task(f"sweep ({where})", total=total)
        news = SweepLog(bar.console, log, total, expected=expected, workers=workers)
        resuming = sum(resume for _, resume in todo)
        news.line(f"sweep: {total} runs on {where} ({len(result.skipped)} already complete"
                  f"{f', {resuming} to resume from their checkpoints' if resuming else ''}){news.forecast()}; "
                  f"each run's own progress is in {Path(todo[0][0].runs_dir)}/<run id>/progress.log")
        try:
            for config, outcome in outcomes:
                name = f"{config.method}/{config.suite}/s{config.seed}"
                index = ids.index(Runner.run_id_for(config))
                if isinstance(outcome, str):
                    result.done.append(outcome)
                    news.ended(outcome, index)
                elif isinstance(outcome, (RunError, ValueError, RuntimeError, OSError)):
                    result.failed.append((name, str(outcome)))
                    news.ended(f"failed {name}: {outcome}", index)
                else:
                    raise outcome
                bar.advance(task)
        except BaseException as exc:  # the log says how the sweep ended (the console: the command's line)
            news_line(f"sweep stopped ({type(exc).__name__}) after {news.ended_runs} of {total} runs", log, None)
            raise
    news_line(f"sweep ended: {len(result.done)} runs done, {len(result.skipped)} already complete, "
              f"{len(result.failed)} failed", log, None)


def time_left(now: float, expected: list[float | None], started: Mapping[int, float],
              took: Mapping[int, float], workers: int) -> float | None:
    """Seconds until the last run ends, or None with nothing to go on, if each of `workers` takes the
    next run (by index) as soon as it is free.

    `expected`: each run's expected seconds (None: unknown); `started`: index -> when it started (on
    the `now` clock); `took`: index -> seconds, for the runs that ended. The ended runs' times over
    their expected times scale every expected time (the machine may be faster or busier than the one
    the expectations came from); a run with no expected time counts as the mean of the ended runs
    (or of the scaled expected times before any ends); a run under way has its time so far taken off.
    """
    timed = [i for i in took if expected[i] is not None]
    expected_timed = sum(expected[i] for i in timed)
    scale = sum(took[i] for i in timed) / expected_timed if expected_timed > 0 else 1.0
    known = [scale * e for e in expected if e is not None]
    if took:
        fallback = sum(took.values()) / len(took)
    elif known:
        fallback = sum(known) / len(known)
    else:
        return None

    def length(i: int) -> float:
        return scale * expected[i] if expected[i] is not None else fallback

    free = [max(length(i) - (now - t), 0.0) for i, t in started.items() if i not in took]
    free += [0.0] * (workers - len(free))
    for i in range(len(expected)):
        if i not in started:
            k = free.index(min(free))
            free[k] += length(i)
    return max(free, default=0.0)


class SweepLog:
    """A sweep's news, one plain stamped line each, on the console (above its bar) and appended to
    `log`: when it starts, and as each run ends, `[k/N] <run>; sweep 0:21:40, ~0:43:20 left` (their
    own logs have the evaluations).

    With the number of `workers` (a local pool), the runs are taken to start in index order, each as
    a worker comes free, and the time left is `time_left`'s, from the `expected` seconds of each run
    and the times of those that ended, or unknown when the runs left are under way past their expected
    times; without it (Ray), the time so far extrapolated over the runs left."""

    def __init__(self, console: Console, log: Path, total: int, expected: list[float | None] | None = None,
                 workers: int | None = None) -> None:
        self.console, self.log, self.total = console, log, total
        self.expected = list(expected) if expected is not None else [None] * total
        self.workers = workers
        self.ended_runs, self.t0 = 0, time.perf_counter()
        self.started = {i: self.t0 for i in range(min(workers or 0, total))}
        self.took: dict[int, float] = {}

    def line(self, text: str) -> None:
        news_line(text, self.log, self.console)

    def forecast(self) -> str:
        """`, ~0:43:20 expected` when the runs' expected times give an estimate before any ends."""
        left = self._left(time.perf_counter()) if any(e is not None for e in self.expected) else None
        return f", ~{clock(left)} expected" if left is not None else ""

    def ended(self, text: str, index: int | None = None) -> None:
        now = time.perf_counter()
        self.ended_runs += 1
        if self.workers and index is not None and index in self.started:
            self.took[index] = now - self.started[index]
            waiting = [i for i in range(self.total) if i not in self.started]
            if waiting:
                self.started[waiting[0]] = now
        elapsed = now - self.t0
        left = self._left(now)
        if left is None:
            left = elapsed * (self.total - self.ended_runs) / self.ended_runs
        if left < 1 and self.ended_runs < self.total:  # the runs under way are past their expected times
            estimate = "time left unknown (runs past their expected times: see their progress.log)"
        else:
            estimate = f"~{clock(left)} left"
        self.line(f"[{self.ended_runs}/{self.total}] {text}; sweep {clock(elapsed)}, {estimate}")

    def _left(self, now: float) -> float | None:
        if not self.workers or len(self.took) != self.ended_runs:  # no worker count, or a run it lost track of
            return None
        return time_left(now, self.expected, self.started, self.took, self.workers)
