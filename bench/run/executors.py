"""Where a sweep's runs execute: local processes (default) or Ray tasks, on one machine or a cluster.

`bench.run.sweep.run_sweep` plans, skips complete runs, prepares models, reports and collects
failures; an executor only runs `(config, resume)` pairs and yields each outcome as it finishes: the
result line, or the exception that ended the run. Both executors run the same `run_one`.

    LocalExecutor(jobs=2)                      # a process pool, one torch thread per run
    RayExecutor(address="10.0.0.1:6379")       # one Ray task per run on an existing cluster
    RayExecutor()                              # a local Ray instance, started and stopped here

Under Ray each run is a task with 1 CPU and `gpus_per_run` GPUs, and on a CPU its `phase_executor` is
set to `ray`, so that a method's independent phases (opd-multi's experts) become parallel Ray tasks
too (`bench.run.phases`); on a GPU they run in the run's own task (`task_config`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import torch

from bench.errors import RunError, unknown
from bench.run.config import RunConfig
from bench.run.pools import kill_workers
from bench.run.ray_support import import_ray
from bench.run.runner import Runner

Outcome = tuple[RunConfig, "str | BaseException"]


def run_one(config: RunConfig, resume: bool, env: dict[str, str] | None = None) -> str:
    """One run in a worker (a local process or a Ray task); `env`: variables to set there first."""
    os.environ.update(env or {})
    torch.set_num_threads(1)
    summary = Runner(config, resume=resume, progress=False).run()
    return f"{summary['run_id']}: {100 * summary['final_accuracy']:.1f}% at {summary['flops']['counted']:.2e} FLOPs"


class SweepExecutor(Protocol):
    def describe(self, n_runs: int) -> str:
        """A few words for the progress bar: where `n_runs` runs will execute."""
        ...

    def run(self, todo: list[tuple[RunConfig, bool]]) -> Iterator[Outcome]:
        """Run each (config, resume) and yield (config, result line or exception) as each ends."""
        ...

    # optional: `workers(n_runs) -> int | None`, how many of `n_runs` runs execute at once, which
    # `run_sweep` uses to order runs of known lengths so that the workers end together; `stop()`,
    # called when the sweep ends or stops early, even before it has read an outcome, to end what
    # `run` started (closing the iterator it returned covers only an iterator already started)


class LocalExecutor:
    """`jobs` local processes (default: the CPU count), each with one torch thread, started by the
    platform's default method (fork, on Linux), or by `start_method`; where a run is on a GPU they are
    spawned: a forked child cannot use CUDA once its parent has (a fresh interpreter each, a few
    seconds of imports)."""

    def __init__(self, jobs: int | None = None, start_method: str | None = None) -> None:
        self.jobs = jobs
        self.start_method = start_method

    def workers(self, n_runs: int) -> int:
        return max(1, min(self.jobs or os.cpu_count() or 1, n_runs))

    def describe(self, n_runs: int) -> str:
        return f"{self.workers(n_runs)} jobs"

    def run(self, todo: list[tuple[RunConfig, bool]]) -> Iterator[Outcome]:
        """Each run in a worker process. If the sweep stops before every run has ended (Ctrl-C,
        SIGTERM, an error), the workers are killed with their runs, which keep their last checkpoints:
        nothing goes on writing to the runs folder, or holding a run's lock, after the sweep is gone."""
        os.environ.setdefault("OMP_NUM_THREADS", "1")
        pool = self._pool(todo)
        ended = False
        try:
            futures = {pool.submit(run_one, config, resume): config for config, resume in todo}
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as exc:  # noqa: BLE001  (the sweep decides which ones are run failures)
                    outcome = exc
                yield futures[future], outcome
            ended = True
        finally:
            if not ended:
                kill_workers(pool)
            # Waited for even when interrupted (its workers are dead by now, so it ends at once): a pool
            # thread still running at exit races the interpreter's own pool clean-up, which may then write
            # to a pipe the thread has just closed and print a traceback after the command's one line.
            pool.shutdown(wait=True, cancel_futures=True)

    def _pool(self, todo: list[tuple[RunConfig, bool]]) -> ProcessPoolExecutor:
        """The workers. On a GPU each run gets a fresh one: a worker that ran one run before would
        still hold its tensors on the device (its models, optimiser state, graph pools) until its
        garbage collector happened to free them, so the next run would see less free memory, keep
        fewer of the fused head's logits, and count other FLOPs than it does alone."""
        gpu = any(config.on_gpu for config, _ in todo)
        start = self.start_method or ("spawn" if gpu else None)
        return ProcessPoolExecutor(max_workers=self.workers(len(todo)), initializer=_worker_signals,
                                   mp_context=multiprocessing.get_context(start),
                                   max_tasks_per_child=1 if gpu else None)


def _worker_signals() -> None:
    """A sweep's worker leaves Ctrl-C to the sweep, which then stops it, and dies of SIGTERM (a forked
    worker would otherwise inherit the command's handler that turns SIGTERM into Ctrl-C)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def task_config(config: RunConfig) -> RunConfig:
    """A run's config as a Ray task runs it: its runs folder absolute (a task's working directory is
    the worker's, not this shell's) and its phases Ray tasks too on a CPU. On a GPU they run one after
    another in the run's own task (`isolated`, the same numbers): a run's task keeps its GPUs while
    it waits for its children, and with every run of a sweep holding GPUs no child could get one."""
    return replace(config, phase_executor="isolated" if config.on_gpu else "ray",
                   runs_dir=Path(config.runs_dir).resolve())


class RayExecutor:
    """One Ray task per run (1 CPU, `gpus_per_run` GPUs) on the cluster at `address`, or on a local
    instance started here (with `num_cpus`, default all cores) and shut down when the sweep ends.
    If this process is already connected to Ray (`ray.init` before), that connection is used."""

    def __init__(self, address: str | None = None, gpus_per_run: float = 0.0, num_cpus: int | None = None) -> None:
        if gpus_per_run < 0:
            raise RunError(f"--gpus-per-run must be >= 0, got {gpus_per_run}")
        self.ray = import_ray()
        self.address = address
        self.gpus_per_run = gpus_per_run
        self.num_cpus = num_cpus
        self._started = False  # a local instance this executor started, and must shut down
        self._pending: list = []  # the refs of the runs submitted and not yet ended

    def describe(self, n_runs: int) -> str:
        return f"Ray at {self.address}" if self.address else "local Ray instance"

    def run(self, todo: list[tuple[RunConfig, bool]]) -> Iterator[Outcome]:
        # Connect and submit now, not on the first `next()`: a bad address fails before any progress bar.
        self._started = self._connect()
        try:
            refs = self._submit(todo)
        except BaseException:
            self.stop()
            raise
        self._pending = list(refs)
        return self._results(refs)

    def stop(self) -> None:
        """End what this sweep still has under way (at its end, or when it stops early, even before its
        first outcome is read): a local instance this executor started is shut down, which ends its
        tasks; on a cluster, which stays up, the tasks not yet ended are cancelled."""
        pending, self._pending = self._pending, []
        if self._started:
            self._started = False
            self.ray.shutdown()
            return
        for ref in pending:
            with contextlib.suppress(Exception):  # one that ended meanwhile, or a lost connection
                self.ray.cancel(ref, force=True)

    def _submit(self, todo: list[tuple[RunConfig, bool]]) -> dict:
        task = self.ray.remote(num_cpus=1, num_gpus=self.gpus_per_run, max_retries=0)(run_one)
        env = _task_env()
        refs = {}
        for config, resume in todo:
            config = task_config(config)
            refs[task.remote(config, resume, env)] = config
        return refs

    def _results(self, refs: dict) -> Iterator[Outcome]:
        try:
            while self._pending:
                done, self._pending = self.ray.wait(self._pending, num_returns=1)
                yield refs[done[0]], self._outcome(done[0])
        finally:
            self.stop()

    def _connect(self) -> bool:
        """Connect (or start a local instance); True if this executor must shut it down."""
        ray = self.ray
        if ray.is_initialized():
            return False
        try:
            if self.address:
                ray.init(address=self.address, log_to_driver=False)
            else:
                # "local": a new instance even if `ray start` left one running on this machine
                ray.init(address="local", num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            if not self.address:
                raise RunError(f"cannot start a local Ray instance: {_first_line(exc)}") from exc
            raise RunError(f"cannot connect to the Ray cluster at {self.address}: {_first_line(exc)} (check the "
                           "address; a cluster with token authentication also needs RAY_AUTH_MODE=token here)") from exc
        return True

    def _outcome(self, ref: Any) -> str | BaseException:
        from ray.exceptions import RayError, RayTaskError

        try:
            return self.ray.get(ref)
        except RayTaskError as exc:
            # The run's own exception (RunError, ValueError, ...), as a local process pool gives it.
            return exc.cause if isinstance(exc.cause, BaseException) else RuntimeError(_first_line(exc))
        except RayError as exc:  # the worker died (out of memory, node lost): a failed run, not a crash
            return RuntimeError(f"Ray: {type(exc).__name__}: {_first_line(exc)}")


def make_executor(name: str, *, jobs: int | None = None, address: str | None = None,
                  gpus_per_run: float = 0.0, gpu: bool = False) -> SweepExecutor:
    """The executor the command line asked for, for runs on a GPU or not (`RunConfig.on_gpu`); options
    that do not apply to it are errors. Local runs on a GPU take it one at a time unless `jobs` says
    otherwise."""
    if jobs is not None and jobs < 1:
        raise RunError(f"--jobs must be at least 1, got {jobs}")
    if name == "local":
        if address or gpus_per_run:
            raise RunError("--address and --gpus-per-run need --executor ray")
        return LocalExecutor(1 if gpu and not jobs else jobs)
    if name == "ray":
        if address and jobs:
            raise RunError("--jobs sets the CPUs of a local Ray instance; with --address the cluster decides")
        if gpu != (gpus_per_run > 0):
            raise RunError("runs on a GPU (--device cuda, or a GPU world) need --gpus-per-run above 0 under Ray "
                           "(each task's share of a GPU), runs on a CPU no --gpus-per-run")
        return RayExecutor(address, gpus_per_run, num_cpus=jobs)
    raise unknown("executor", name, ["local", "ray"])


def _task_env() -> dict[str, str]:
    # The model cache is found through OPD_BENCH_CACHE; a cluster's workers do not inherit this shell.
    # Passed as an argument, not as a Ray runtime_env: tasks with a runtime_env get workers of their
    # own, and opd-multi's expert tasks (which need no cache) would then start a second pool.
    cache = os.environ.get("OPD_BENCH_CACHE")
    return {"OPD_BENCH_CACHE": str(Path(cache).resolve())} if cache else {}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
