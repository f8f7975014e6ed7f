"""Mirroring a run to an experiment tracker while it trains (`bench run --report-to tensorboard|wandb`).

The run directory stays the record of truth (ledger, curve, step trace, summary); a tracker gets a
copy of each row as it is written, for watching a run live in a familiar tool. The x axis of every
scalar is the counted FLOPs at that point, the benchmark's own axis, not the step number.

    tracker = make_tracker(("tensorboard", "wandb"), run_dir, name=run_id, config=fingerprint)
    tracker.step(row)          # a steps.jsonl row: train/<stat>           (train_scalars)
    tracker.evaluation(point)  # a curve point: heldout/accuracy, ...      (heldout_scalars)
    tracker.close(summary)     # the ledger by category and phase, then flush

A resumed run opens a new event file beside the first; steps between its last checkpoint and the
kill appear twice in TensorBoard (the run directory's trace keeps them once).

Weights & Biases runs offline unless `WANDB_MODE` says otherwise: its files go under
`<run_dir>/wandb/` and `wandb sync <run_dir>/wandb/offline-run-*` uploads them later.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.errors import RunError, unknown

TRACKERS = ("tensorboard", "wandb")


def train_scalars(row: dict[str, Any]) -> dict[str, float]:
    """A steps.jsonl row's numbers as `train/<stat>`."""
    return {f"train/{key}": value for key, value in row.items()
            if key not in ("step", "flops", "phase") and isinstance(value, (int, float))}


def heldout_scalars(point: dict[str, Any]) -> dict[str, float]:
    """A curve point as `heldout/accuracy`, `heldout/<domain>`, `length/mean`, `length/<domain>`."""
    values = {"heldout/accuracy": point["accuracy"], "length/mean": point["mean_length"]}
    values |= {f"heldout/{d}": a for d, a in point.get("domain_accuracy", {}).items()}
    values |= {f"length/{d}": n for d, n in point.get("domain_mean_length", {}).items()}
    return values


class Tracker:
    """No tracker: every call does nothing. A tracker implements `log` (and `close`)."""

    def log(self, values: dict[str, float], flops: int) -> None:
        """Scalars at `flops` counted FLOPs."""

    def step(self, row: dict[str, Any]) -> None:
        self.log(train_scalars(row), int(row["flops"]))

    def evaluation(self, point: dict[str, Any]) -> None:
        self.log(heldout_scalars(point), int(point["flops"]))

    def close(self, summary: dict[str, Any] | None = None) -> None:
        pass


class TensorBoardTracker(Tracker):
    """Event files under `<run_dir>/tensorboard/` (`tensorboard --logdir runs/`)."""

    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:  # torch's writer needs the tensorboard package
            raise RunError("--report-to tensorboard needs the tensorboard package: "
                           "pip install 'opd-bench[tracking]'") from exc
        self.writer = SummaryWriter(str(log_dir))

    def log(self, values: dict[str, float], flops: int) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, flops)

    def close(self, summary: dict[str, Any] | None = None) -> None:
        if summary is not None:
            rows = ["| category | phase | kind | model | FLOPs |", "| --- | --- | --- | --- | --- |"]
            rows += [f"| {r['category']} | {r['phase']} | {r['kind']} | {r['model']} | {r['flops']:.3e} |"
                     for r in summary["ledger"]]
            self.writer.add_text("ledger", "\n".join(rows))
            for category, flops in summary["flops"].items():
                self.writer.add_scalar(f"flops/{category}", flops, int(summary["flops"]["counted"]))
        self.writer.close()


class WandbTracker(Tracker):
    """A Weights & Biases run (offline by default) with counted FLOPs as every metric's x axis."""

    X = "counted_flops"

    def __init__(self, run_dir: Path, name: str, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise RunError("--report-to wandb needs the wandb package: pip install 'opd-bench[tracking]'") from exc
        self.wandb = wandb
        self.run = wandb.init(project="opd-bench", name=name, dir=str(run_dir), config=config,
                              mode=os.environ.get("WANDB_MODE", "offline"), reinit="create_new",
                              settings=wandb.Settings(quiet=True))
        self.run.define_metric(self.X)
        self.run.define_metric("*", step_metric=self.X)

    def log(self, values: dict[str, float], flops: int) -> None:
        self.run.log({self.X: flops, **values})

    def close(self, summary: dict[str, Any] | None = None) -> None:
        if summary is not None:
            columns = ["category", "phase", "kind", "model", "flops"]
            data = [[r[c] for c in columns] for r in summary["ledger"]]
            self.run.log({"ledger": self.wandb.Table(columns=columns, data=data)})
            for category, flops in summary["flops"].items():
                self.run.summary[f"flops/{category}"] = flops
        self.run.finish(exit_code=0 if summary is not None else 1)  # no summary: the run failed


class Trackers(Tracker):
    """Several trackers at once (`--report-to tensorboard --report-to wandb`)."""

    def __init__(self, trackers: list[Tracker]) -> None:
        self.trackers = trackers

    def log(self, values: dict[str, float], flops: int) -> None:
        for tracker in self.trackers:
            tracker.log(values, flops)

    def close(self, summary: dict[str, Any] | None = None) -> None:
        for tracker in self.trackers:
            tracker.close(summary)


def make_tracker(
    names: tuple[str, ...], run_dir: Path, *, name: str = "", config: dict[str, Any] | None = None
) -> Tracker:
    """The trackers for `--report-to` (an empty tuple: none); `name` and `config` label a wandb run."""
    for tracker in names:
        if tracker not in TRACKERS:
            raise unknown("tracker", tracker, list(TRACKERS))
    trackers: list[Tracker] = []
    if "tensorboard" in names:
        trackers.append(TensorBoardTracker(run_dir / "tensorboard"))
    if "wandb" in names:
        trackers.append(WandbTracker(run_dir, name or run_dir.name, config or {}))
    return Trackers(trackers)
