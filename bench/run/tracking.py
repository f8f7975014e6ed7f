"""Mirroring a run to an experiment tracker while it trains (`bench run --report-to tensorboard`).

The run directory stays the record of truth (ledger, curve, step trace, summary); a tracker gets a
copy of each row as it is written, for watching a run live in a familiar tool. The x axis of every
scalar is the counted FLOPs at that point, the benchmark's own axis, not the step number.

    tracker = make_tracker(("tensorboard",), run_dir)
    tracker.step(row)          # a steps.jsonl row: train/<stat>
    tracker.evaluation(point)  # a curve point: heldout/accuracy, heldout/<domain>, length/...
    tracker.close(summary)     # the ledger by category and phase, then flush

A resumed run opens a new event file beside the first; steps between its last checkpoint and the
kill appear twice in TensorBoard (the run directory's trace keeps them once).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import RunError, unknown

TRACKERS = ("tensorboard",)


class Tracker:
    """No tracker: every call does nothing."""

    def step(self, row: dict[str, Any]) -> None:
        pass

    def evaluation(self, point: dict[str, Any]) -> None:
        pass

    def close(self, summary: dict[str, Any] | None = None) -> None:
        pass


class TensorBoardTracker(Tracker):
    """Event files under `<run_dir>/tensorboard/` (`tensorboard --logdir runs/`)."""

    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch's writer needs the tensorboard package
            raise RunError("--report-to tensorboard needs the tensorboard package: pip install 'opd-bench[tracking]'") from exc
        self.writer = SummaryWriter(str(log_dir))

    def step(self, row: dict[str, Any]) -> None:
        x = int(row["flops"])
        for key, value in row.items():
            if key not in ("step", "flops", "phase") and isinstance(value, (int, float)):
                self.writer.add_scalar(f"train/{key}", value, x)

    def evaluation(self, point: dict[str, Any]) -> None:
        x = int(point["flops"])
        self.writer.add_scalar("heldout/accuracy", point["accuracy"], x)
        for domain, accuracy in point.get("domain_accuracy", {}).items():
            self.writer.add_scalar(f"heldout/{domain}", accuracy, x)
        self.writer.add_scalar("length/mean", point["mean_length"], x)
        for domain, length in point.get("domain_mean_length", {}).items():
            self.writer.add_scalar(f"length/{domain}", length, x)

    def close(self, summary: dict[str, Any] | None = None) -> None:
        if summary is not None:
            rows = ["| category | phase | kind | model | FLOPs |", "| --- | --- | --- | --- | --- |"]
            rows += [f"| {r['category']} | {r['phase']} | {r['kind']} | {r['model']} | {r['flops']:.3e} |"
                     for r in summary["ledger"]]
            self.writer.add_text("ledger", "\n".join(rows))
            for category, flops in summary["flops"].items():
                self.writer.add_scalar(f"flops/{category}", flops, int(summary["flops"]["counted"]))
        self.writer.close()


def make_tracker(names: tuple[str, ...], run_dir: Path) -> Tracker:
    """The tracker for `--report-to` (an empty tuple: none)."""
    for name in names:
        if name not in TRACKERS:
            raise unknown("tracker", name, list(TRACKERS))
    return TensorBoardTracker(run_dir / "tensorboard") if "tensorboard" in names else Tracker()
