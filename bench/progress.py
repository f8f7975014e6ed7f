"""The progress bar of long work (a run's counted FLOPs against its budget, a warm-up's steps), with rich."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class _Bar:
    def __init__(self, progress: Progress | None, task: Any, budget: float) -> None:
        self.progress, self.task, self.budget = progress, task, budget

    def update(self, spent: float, accuracy: float | None) -> None:
        """Counted FLOPs against the budget, and the latest held-out accuracy."""
        acc = "-" if accuracy is None else f"{100 * accuracy:.1f}%"
        self.show(min(spent, self.budget), f"{spent:.2e}/{self.budget:.1e} FLOPs", f"acc {acc}")

    def show(self, completed: float, amount: str, note: str) -> None:
        """Move the bar to `completed`, with the text of its amount and note columns."""
        if self.progress is not None:
            self.progress.update(self.task, completed=completed, flops=amount, acc=note)


@contextlib.contextmanager
def progress(budget: float, enabled: bool = True, label: str = "training") -> Iterator[_Bar]:
    """A rich bar of counted FLOPs against the budget, with the latest held-out accuracy."""
    if not enabled:
        yield _Bar(None, None, budget)
        return
    columns = (
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        TextColumn("{task.fields[flops]}"),
        TextColumn("{task.fields[acc]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(label, total=budget, acc="", flops="")
        yield _Bar(bar, task, budget)
