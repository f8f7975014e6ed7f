"""`bench check-adapter PLUGIN`: run a method for a few steps and prove every FLOP it spent was metered.

The method runs through the real runner on the `smoke` profile (the tiny models with a 30-step
warm-up and a small budget) under `torch.utils.flop_counter.FlopCounterMode` (with the audit's
causal SDPA formulas). Whatever the counter sees during the run must be on the ledger as counted
work, apart from held-out evaluations (the runner's and `ctx.evaluate`, booked `eval` by the
engine's evaluator, which tallies them apart). A plugin that builds its own model, reaches a
submodule past the meter hooks, or books its training under another category (`eval`, `shared`)
shows up as instrumented FLOPs the counted ledger lacks, and the check fails. The counter sees only
the thread it runs in, so a method that starts a thread or a process is refused outright.

The ledger charges padding keys as compute while the counter counts only the keys a mask lets
through, so the two differ slightly on mixed-length batches; agreement within 2% is required.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.world import prepare as prep
from bench.accounting.audit import TOLERANCE
from bench.accounting.counting import count_flops
from bench.errors import RunError
from bench.world.profiles import PROFILES, Profile
from bench.registry import get_method
from bench.run.config import RunConfig
from bench.run.runner import Runner


def smoke_profile() -> Profile:
    """The `smoke` profile (`bench/world/profiles.py`): tiny models, a short warm-up, small budget and evaluation."""
    return PROFILES["smoke"]


@dataclass
class ConformanceResult:
    method: str
    metered_flops: float  # counted charges of the run, plus its held-out evaluations (runner's and ctx.evaluate)
    instrumented_flops: float  # what FlopCounterMode saw during the run
    budget_flops: float
    steps_flops: float  # counted FLOPs (the method's own work)
    counted_by_kind: dict[str, float] = field(default_factory=dict)  # rollout, score, update
    counted_by_phase: dict[str, float] = field(default_factory=dict)  # the method's phases the run reached

    @property
    def unchecked_kinds(self) -> list[str]:
        """Kinds of work the run never reached: what the check could not see. A method whose teacher
        never finishes an answer on the smoke world, say, may never take an update within the budget."""
        return [kind for kind in ("rollout", "update") if not self.counted_by_kind.get(kind)]

    @property
    def rel_diff(self) -> float:
        return (self.instrumented_flops - self.metered_flops) / max(self.metered_flops, 1.0)

    @property
    def ok(self) -> bool:
        return self.steps_flops > 0 and abs(self.rel_diff) <= TOLERANCE


def check_adapter(plugin: str, suite: str = "math_code", budget_flops: float | None = None,
                  progress: bool = False, overrides: tuple[tuple[str, str], ...] = (),
                  teachers: tuple[tuple[str, str], ...] = ()) -> ConformanceResult:
    """Run `plugin` briefly under the instrumented counter and compare with its ledger; `progress`:
    the run's bar (or, without a terminal, a line per evaluation). `overrides` (method config
    key=value) and `teachers` (NAME=PATH, local model folders) are those of `bench run`."""
    cls = get_method(plugin)
    profile = smoke_profile()
    prep.prepare(profile, progress=progress)  # outside the counter: its cost is booked shared/external
    with tempfile.TemporaryDirectory(prefix="opd-check-") as tmp:
        config = RunConfig(
            method=plugin, suite=suite, profile=profile.name, budget_flops=budget_flops or profile.budget_flops,
            runs_dir=Path(tmp), eval_every=0.5, overrides=tuple(overrides), teachers=tuple(teachers),
        )
        runner = Runner(config, progress=progress)
        summary: dict = {}

        def run() -> None:
            summary.update(runner.run())

        with _no_threads_or_processes(cls):
            split = count_flops(run)
    flops = summary["flops"]
    return ConformanceResult(
        method=cls.name,
        metered_flops=flops["counted"] + runner.ledger.evaluation_flops,
        instrumented_flops=float(split.total),
        budget_flops=config.budget,
        steps_flops=flops["counted"],
        counted_by_kind=runner.ledger.by_kind("counted"),
        counted_by_phase=runner.ledger.by_phase("counted"),
    )


@contextlib.contextmanager
def _no_threads_or_processes(cls: type) -> Iterator[None]:
    """Refuse a thread or a process the method's own code starts (directly or through a stdlib pool:
    `threading`, `os.fork`, `subprocess`, `multiprocessing`): the FLOP counter sees only the run's own
    thread, and a child's work dies with its copy of the ledger. Threads and processes of libraries
    it calls (a model loader's pool, the runner's `git`) are theirs."""
    stdlib = os.path.dirname(threading.__file__)

    def started_by_method() -> bool:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(stdlib):
            frame = frame.f_back
        return frame is not None and frame.f_globals.get("__name__") == cls.__module__

    def guard(owner: Any, name: str, what: str) -> None:
        original = getattr(owner, name)

        def checked(*args: Any, **kwargs: Any) -> Any:
            if started_by_method():
                raise RunError(f"{cls.name} starts {what}; the conformance check counts FLOPs in the run's "
                               "own thread only, so methods must not start threads or processes")
            return original(*args, **kwargs)

        patched.append((owner, name, original))
        setattr(owner, name, checked)

    patched: list[tuple[Any, str, Any]] = []
    guard(threading.Thread, "start", "a thread")
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            guard(os, name, f"a process (os.{name})")
    guard(subprocess.Popen, "__init__", "a process (subprocess)")
    guard(multiprocessing.process.BaseProcess, "start", "a process (multiprocessing)")
    try:
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)
