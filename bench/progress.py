"""Progress of long work (a run's counted FLOPs against its budget, a warm-up's steps), with rich.

On a terminal: a bar with the counted FLOPs, the latest held-out accuracy, the time elapsed and an
estimate of the time left (from FLOPs spent against the budget). Each evaluation also writes one
plain line, to the run's log file (`progress.log` in the run directory) and, when stdout is not a
terminal (a batch job, a Ray worker, CI), to stdout instead of the bar:

    2026-11-30 21:40:02  3.20e+11/2.0e+12 FLOPs (16%)  acc 18.5%  elapsed 0:01:10  left ~0:06:08
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def clock(seconds: float) -> str:
    """H:MM:SS."""
    return str(datetime.timedelta(seconds=int(seconds)))


def progress_line(spent: float, budget: float, accuracy: float | None, elapsed: float) -> str:
    """One plain line of a run's progress; the time left is extrapolated from FLOPs per second so far."""
    acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
    share = min(spent / budget, 1.0) if budget > 0 else 1.0
    left = "?" if spent <= 0 else clock(elapsed * max(budget - spent, 0.0) / spent)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    return f"{stamp}  {spent:.2e}/{budget:.1e} FLOPs ({share:.0%})  acc {acc}  elapsed {clock(elapsed)}  left ~{left}"


def news_line(text: str, log: Path | None, console: Console | None) -> None:
    """`text`, stamped with the time, appended to `log` and printed as plain text (not markup)."""
    stamped = f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}  {text}"
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as f:
            f.write(stamped + "\n")
    if console is not None:
        console.print(stamped, markup=False, highlight=False, soft_wrap=True)


class _Bar:
    def __init__(self, progress: Progress | None, task: Any, budget: float, log: Path | None = None,
                 lines: Console | None = None, label: str = "") -> None:
        self.progress, self.task, self.budget = progress, task, budget
        self.log, self.lines, self.label = log, lines, label
        self._next_tenth = 0.1
        self.t0 = time.perf_counter()

    def update(self, spent: float, accuracy: float | None, evaluated: bool = False) -> None:
        """Counted FLOPs against the budget, and the latest held-out accuracy; `evaluated`: an evaluation
        just finished, which gets a line in the log (and on stdout when it is not a terminal)."""
        acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
        self.show(min(spent, self.budget), f"{spent:.2e}/{self.budget:.1e} FLOPs", f"acc {acc}")
        if evaluated:
            line = progress_line(spent, self.budget, accuracy, time.perf_counter() - self.t0)
            if self.log is not None:
                with open(self.log, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
            if self.lines is not None:
                self.lines.print(line, highlight=False, soft_wrap=True)

    def line(self, text: str) -> None:
        """A plain line of news (a parallel phase ended): to the log, and above the bar or on stdout."""
        news_line(text, self.log, self.progress.console if self.progress is not None else self.lines)

    def show(self, completed: float, amount: str, note: str) -> None:
        """Move the bar to `completed`, with the text of its amount and note columns."""
        if self.progress is not None:
            self.progress.update(self.task, completed=completed, flops=amount, acc=note)
        elif self.lines is not None and self.label and completed >= self._next_tenth * self.budget:
            # no terminal: a line at each tenth of the work (a run's evaluations have their own lines)
            while completed >= self._next_tenth * self.budget:
                self._next_tenth += 0.1
            self.lines.print(f"{self.label}: {amount}  {note}  elapsed {clock(time.perf_counter() - self.t0)}",
                             highlight=False, soft_wrap=True)


@contextlib.contextmanager
def progress(budget: float, enabled: bool = True, label: str = "training", log: Path | None = None) -> Iterator[_Bar]:
    """A rich bar of counted FLOPs against the budget (a plain line per evaluation when stdout is not a
    terminal), with the latest held-out accuracy; `log`: a file that gets a line per evaluation."""
    console = Console()
    if not enabled or not console.is_terminal:
        # a run (with a log) prints a line per evaluation; other work (a warm-up) one per tenth
        yield _Bar(None, None, budget, log, console if enabled else None, "" if log is not None else label)
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
        yield _Bar(bar, task, budget, log)
