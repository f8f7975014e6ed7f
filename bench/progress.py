"""Progress of long work (a run's counted FLOPs against its budget, a warm-up's steps), with rich.

On a terminal: a bar with the counted FLOPs, the latest held-out accuracy, the time elapsed and an
estimate of the time left (from FLOPs spent against the budget). Each evaluation also writes one
plain line, to the run's log file (`progress.log` in the run directory) and, when stdout is not a
terminal (a batch job, a Ray worker, CI), to stdout instead of the bar; so does a minute without an
evaluation (the accuracy is then the last evaluation's):

    2026-11-30 21:40:02  3.20e+11/2.0e+12 FLOPs (16%)  acc 18.5%  elapsed 0:01:10  left ~0:06:08

A warm-up's steps get such lines at each tenth, and after a minute without one.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class PipeConsole(Console):
    """A console on stdout that goes quiet when its reader has gone (`bench run | head -1`), where rich's
    own ends the process (exit 1, no message) in the middle of a run: the work and its log go on."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # what is still buffered for stdout, and any later print
        os.close(devnull)


QUIET_S = 60.0  # the longest a log (or stdout without a terminal) goes without a line while work goes on


def clock(seconds: float) -> str:
    """H:MM:SS."""
    return str(datetime.timedelta(seconds=int(seconds)))


def progress_line(spent: float, budget: float, accuracy: float | None, elapsed: float, *, since: float = 0.0,
                  evaluated: bool = True) -> str:
    """One plain line of a run's progress; the time left is extrapolated from the FLOPs per second this
    process has spent (`since`: the counted FLOPs it started from, a resumed run's). A line between
    evaluations says its accuracy is the last evaluation's."""
    acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%" + ("" if evaluated else " (last evaluation)")
    share = spent / budget if budget > 0 else 1.0
    rate = (spent - since) / elapsed if elapsed > 0 else 0.0
    left = "?" if rate <= 0 else clock(max(budget - spent, 0.0) / rate)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}  {spent:.2e}/{budget:.1e} FLOPs ({share:.0%})  acc {acc}  elapsed {clock(elapsed)}  left ~{left}"


def news_line(text: str, log: Path | None, console: Console | None) -> None:
    """`text`, stamped with the time, appended to `log` and printed as plain text (not markup)."""
    _emit(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}  {text}", log, console)


def _emit(line: str, log: Path | None, console: Console | None) -> None:
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    if console is not None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


class _Bar:
    def __init__(self, progress: Progress | None, task: Any, budget: float, log: Path | None = None,
                 lines: Console | None = None, label: str = "", *, tenths: bool = False, since: float = 0.0) -> None:
        self.progress, self.task, self.budget = progress, task, budget
        self.log, self.lines, self.label, self.tenths, self.since = log, lines, label, tenths, since
        self._tenths_done = 0
        self.t0 = self._last_line = time.perf_counter()

    def update(self, spent: float, accuracy: float | None, evaluated: bool = False) -> None:
        """Counted FLOPs against the budget, and the latest held-out accuracy; `evaluated`: an evaluation
        just finished. Each evaluation gets a line in the log (and on stdout when it is not a terminal),
        and so does a stretch of `QUIET_S` without one (a long phase, parallel experts)."""
        acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
        self.show(min(spent, self.budget), f"{spent:.2e}/{self.budget:.1e} FLOPs", f"acc {acc}")
        if evaluated or time.perf_counter() - self._last_line >= QUIET_S:
            _emit(progress_line(spent, self.budget, accuracy, time.perf_counter() - self.t0, since=self.since,
                                evaluated=evaluated), self.log, self.lines)
            self._last_line = time.perf_counter()

    def line(self, text: str) -> None:
        """A plain line of news (a parallel phase ended): to the log, and above the bar or on stdout."""
        news_line(text, self.log, self.progress.console if self.progress is not None else self.lines)
        self._last_line = time.perf_counter()

    def show(self, completed: float, amount: str, note: str) -> None:
        """Move the bar to `completed`, with the text of its amount and note columns. Work other than a run
        (`tenths`: a warm-up) also gets a stamped line at each tenth, and after `QUIET_S` without one."""
        if self.progress is not None:
            self.progress.update(self.task, completed=completed, flops=amount, acc=note)
        now = time.perf_counter()
        tenth = min(int(10 * completed // self.budget), 10) if self.budget > 0 else 10
        if self.tenths and (tenth > self._tenths_done or now - self._last_line >= QUIET_S):
            self._tenths_done = tenth
            left = "?" if completed <= 0 else clock((now - self.t0) * max(self.budget - completed, 0) / completed)
            news_line(f"{self.label}: {amount} of {self.budget:g}  {note}  elapsed {clock(now - self.t0)}  "
                      f"left ~{left}", self.log, self.lines)  # stdout only without a terminal: a bar is there
            self._last_line = time.perf_counter()


@contextlib.contextmanager
def progress(budget: float, enabled: bool = True, label: str = "training", log: Path | None = None, *,
             tenths: bool = False, since: float = 0.0) -> Iterator[_Bar]:
    """A rich bar of counted FLOPs against the budget, with the latest held-out accuracy; `log`: a file
    that gets a plain line per evaluation (`since`: the counted FLOPs a resumed run starts from). Where
    stdout is not a terminal (a batch job, a Ray worker, CI) the lines go there instead of the bar.
    `tenths`: work other than a run (a warm-up's steps), whose lines come at each tenth."""
    console = PipeConsole()
    if not enabled or not console.is_terminal:
        yield _Bar(None, None, budget, log, console if enabled else None, label, tenths=tenths, since=since)
        return
    columns = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        TextColumn("{task.fields[flops]}"),
        TextColumn("{task.fields[acc]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False, console=console) as bar:
        task = bar.add_task(label, total=budget, acc="", flops="")
        yield _Bar(bar, task, budget, log, label=label, tenths=tenths, since=since)
