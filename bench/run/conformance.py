"""`bench check-adapter PLUGIN`: run a method for a few steps and prove every FLOP it spent was metered.

The method runs through the real runner on the `smoke` profile (the tiny models with a 30-step
warm-up and a small budget) under `torch.utils.flop_counter.FlopCounterMode` (with the audit's
causal SDPA formulas). The count is split at the ledger's held-out evaluations (the runner's and
`ctx.evaluate`, booked `eval` by the engine's evaluator): what the counter sees outside them must be
on the ledger as counted work, what it sees inside them must be what the evaluations charged, each
within 2%. A plugin that builds its own model, reaches a submodule past the meter hooks, or books
its training under another category (`eval`, `shared`) shows up as instrumented FLOPs the counted
ledger lacks, and the check fails; so does work run inside an evaluation without being charged
there. Evaluations are the engine's: a method that begins one itself (the ledger's `evaluation()`,
or an `Evaluator` of its own) is refused, since its work would be booked `eval`, uncounted. The
counter sees only the thread it runs in, so a method that starts a thread or a process is refused
too.

The ledger charges padding keys as compute while the counter counts only the keys a mask lets
through, so the two differ slightly on mixed-length batches; hence the 2%.
"""

from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench.context
import bench.evaluation
import bench.run.runner
from bench.world import prepare as prep
from bench.accounting import ledger as ledger_module
from bench.accounting.audit import TOLERANCE
from bench.accounting.counting import counted_so_far, counter
from bench.accounting.ledger import watch_evaluations
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
    metered_flops: float  # counted charges of the run: the method's own work
    instrumented_flops: float  # what FlopCounterMode saw during the run, outside held-out evaluations
    budget_flops: float
    eval_flops: float = 0.0  # charged inside the held-out evaluations (the runner's and ctx.evaluate)
    instrumented_eval_flops: float = 0.0  # what the counter saw inside them
    heldout_reads: int = 0  # the method's own evaluations of the held-out split (its record's `heldout_reads`)
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
    def eval_rel_diff(self) -> float:
        return (self.instrumented_eval_flops - self.eval_flops) / max(self.eval_flops, 1.0)

    @property
    def ok(self) -> bool:
        return self.metered_flops > 0 and abs(self.rel_diff) <= TOLERANCE and abs(self.eval_rel_diff) <= TOLERANCE


def check_adapter(plugin: str, suite: str = "math_code", budget_flops: float | None = None,
                  progress: bool = False, overrides: tuple[tuple[str, str], ...] = (),
                  teachers: tuple[tuple[str, str], ...] = ()) -> ConformanceResult:
    """Run `plugin` briefly under the instrumented counter and compare with its ledger; `progress`:
    the run's bar (or, without a terminal, a line per evaluation). `overrides` (method config
    key=value) and `teachers` (NAME=PATH, local model folders) are those of `bench run`."""
    cls = get_method(plugin)
    profile = smoke_profile()
    with tempfile.TemporaryDirectory(prefix="opd-check-") as tmp:
        config = RunConfig(
            method=plugin, suite=suite, profile=profile.name, budget_flops=budget_flops or profile.budget_flops,
            runs_dir=Path(tmp), eval_every=0.5, overrides=tuple(overrides), teachers=tuple(teachers),
        )
        # the method's config (its --set keys) and the suite are resolved first: a typo trains no teacher
        runner = Runner(config, progress=progress)
        prep.prepare(profile, progress=progress)  # outside the counter: its cost is booked shared/external
        mode, evaluations = counter(), _Evaluations(cls)
        refused: list[str] = []  # kept: a method may catch a refusal and go on, as a run unchecked would not
        with _no_threads_or_processes(cls, refused), watch_evaluations(evaluations.watcher(mode, refused)), mode:
            summary = runner.run()
    if refused:
        raise RunError(refused[0])
    return ConformanceResult(
        method=cls.name,
        metered_flops=summary["flops"]["counted"],
        instrumented_flops=float(counted_so_far(mode) - evaluations.flops),
        budget_flops=config.budget,
        eval_flops=runner.ledger.evaluation_flops,
        instrumented_eval_flops=float(evaluations.flops),
        heldout_reads=summary["heldout_reads"],
        counted_by_kind=runner.ledger.by_kind("counted"),
        counted_by_phase=runner.ledger.by_phase("counted"),
    )


class _Evaluations:
    """The counter's count inside the run's held-out evaluations, each of which must have been begun
    by the engine: the runner or `ctx.evaluate` (`bench.context`), through `bench.evaluation`."""

    ENGINE = frozenset(module.__file__ for module in (bench.context, bench.run.runner))
    BETWEEN = frozenset(module.__file__ for module in (bench.evaluation, ledger_module, contextlib,
                                                        sys.modules[__name__]))

    def __init__(self, cls: type) -> None:
        self.cls, self.flops, self._began = cls, 0, 0

    def watcher(self, mode: Any, refused: list[str]) -> Callable[[bool], None]:
        def watch(entering: bool) -> None:
            if entering:
                self._refuse_if_not_the_engine(refused)
                self._began = counted_so_far(mode)
            else:
                self.flops += counted_so_far(mode) - self._began

        return watch

    def _refuse_if_not_the_engine(self, refused: list[str]) -> None:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename in self.BETWEEN:
            frame = frame.f_back
        if frame is None or frame.f_code.co_filename not in self.ENGINE:
            where = f" ({frame.f_code.co_filename}:{frame.f_lineno})" if frame else ""
            refused.append(f"{self.cls.name} begins a held-out evaluation itself{where}; its work would be booked "
                           "eval, outside the budget. Evaluations are the engine's: use ctx.evaluate")
            raise RunError(refused[-1])


@contextlib.contextmanager
def _no_threads_or_processes(cls: type, refused: list[str]) -> Iterator[None]:
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
                refused.append(f"{cls.name} starts {what}; the conformance check counts FLOPs in the run's own "
                               "thread only, so methods must not start threads or processes")
                raise RunError(refused[-1])
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
