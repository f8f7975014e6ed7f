"""`--report-to tensorboard`: the run's curve and step trace mirrored live, on the counted-FLOPs axis."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from bench.cli import app
from tests.methods.support import SMALL_GRPO, run_method


def _scalars(log_dir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}, events


def test_tensorboard_mirrors_the_curve_and_the_trace(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "grpo-joint", 4e10, **SMALL_GRPO)
    assert not (tmp_path / summary["run_id"] / "tensorboard").exists()  # off unless asked for

    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    config = RunConfig(method="grpo-joint", profile=fast_profile.name, budget_flops=4e10, runs_dir=tmp_path / "tb",
                       eval_size=16, eval_every=0.25, overrides=tuple(SMALL_GRPO.items()), report_to=("tensorboard",))
    summary = Runner(config, progress=False).run()
    scalars, events = _scalars(tmp_path / "tb" / summary["run_id"] / "tensorboard")
    curve = summary["curve"]
    assert [s for s, _ in scalars["heldout/accuracy"]] == [int(p["flops"]) for p in curve]
    assert [v for _, v in scalars["heldout/accuracy"]] == pytest.approx([p["accuracy"] for p in curve], abs=1e-6)
    for domain in summary["domains"]:
        assert [v for _, v in scalars[f"heldout/{domain}"]] == pytest.approx(
            [p["domain_accuracy"][domain] for p in curve], abs=1e-6)
    steps = summary["steps"]
    assert [s for s, _ in scalars["train/reward"]] == [int(r["flops"]) for r in steps]
    assert [v for _, v in scalars["train/loss"]] == pytest.approx([r["loss"] for r in steps], rel=1e-5, abs=1e-6)
    assert scalars["flops/counted"][0][1] == pytest.approx(summary["flops"]["counted"], rel=1e-6)
    assert "ledger/text_summary" in events.Tags()["tensors"]  # the ledger table, as text


def test_an_unknown_tracker_is_one_line_and_exit_2(tmp_path):
    result = CliRunner().invoke(app, ["run", "--method", "grpo", "--report-to", "tensorbord", "--runs", str(tmp_path)])
    assert result.exit_code == 2
    message = (result.stderr or result.output).strip()
    assert "did you mean 'tensorboard'" in message and len(message.splitlines()) == 1
    assert not any(tmp_path.iterdir())


def _wandb_records(run_dir):
    """Every record of the run's offline `.wandb` file, parsed with wandb's own protobuf schema.

    The file is a LevelDB-style log: a 7-byte header, then 32 KiB blocks of chunks, each with a 7-byte
    header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, chunk, pos = [], b"", 7
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0 or pos + 7 + length > len(data):  # the end, or a chunk still being written
            break
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunk)
            records.append(record)
            chunk = b""
    return records


def test_wandb_offline_mirrors_the_curve_the_trace_and_the_ledger(fast_profile, tmp_path, monkeypatch):
    import json

    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default, no network needed
    config = RunConfig(method="grpo-joint", profile=fast_profile.name, budget_flops=4e10, runs_dir=tmp_path,
                       eval_size=16, eval_every=0.25, overrides=tuple(SMALL_GRPO.items()),
                       report_to=("wandb", "tensorboard"))
    summary = Runner(config, progress=False).run()
    run_dir = tmp_path / summary["run_id"]
    assert (run_dir / "tensorboard").is_dir()  # both trackers at once
    # wandb's service process writes the file; on a loaded machine its last writes can trail
    # `run.finish()`, so read until the run's closing `exit` record is there (at most a minute)
    deadline = time.monotonic() + 60
    records = _wandb_records(run_dir)
    while "exit" not in {r.WhichOneof("record_type") for r in records} and time.monotonic() < deadline:
        time.sleep(0.5)
        records = _wandb_records(run_dir)

    (run,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run.display_name == summary["run_id"]
    config_items = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config_items["method"] == "grpo-joint" and config_items["fingerprint"] == json.loads(
        (run_dir / "config.json").read_text())["fingerprint"]

    history = [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
               for r in records if r.WhichOneof("record_type") == "history"]
    evaluations = [h for h in history if "heldout/accuracy" in h]
    assert [h["counted_flops"] for h in evaluations] == [int(p["flops"]) for p in summary["curve"]]
    assert [h["heldout/accuracy"] for h in evaluations] == pytest.approx([p["accuracy"] for p in summary["curve"]])
    steps = [h for h in history if "train/loss" in h]
    assert [h["counted_flops"] for h in steps] == [int(r["flops"]) for r in summary["steps"]]
    assert [h["train/loss"] for h in steps] == pytest.approx([r["loss"] for r in summary["steps"]])
    final = {}
    for r in records:
        if r.WhichOneof("record_type") == "summary":
            final |= {item.key or "/".join(item.nested_key): item.value_json for item in r.summary.update}
    assert json.loads(final["flops/counted"]) == pytest.approx(summary["flops"]["counted"])
    assert json.loads(final["ledger/nrows"]) == len(summary["ledger"])  # the ledger, as a table


def test_a_failed_run_closes_its_tracker(fast_profile, tmp_path, monkeypatch):
    """A run that fails mid-way ends its tensorboard writer (a thread and an open file each, which a
    notebook's failed runs would pile up)."""
    import threading

    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from methods.grpo import GRPOJoint

    def fails(self, ctx):
        raise RuntimeError("the method broke")

    monkeypatch.setattr(GRPOJoint, "run", fails)
    before = threading.active_count()
    for k in range(2):
        config = RunConfig(method="grpo-joint", profile=fast_profile.name, budget_flops=4e10,
                           runs_dir=tmp_path / str(k), eval_size=16, report_to=("tensorboard",))
        with pytest.raises(RuntimeError, match="the method broke"):
            Runner(config, progress=False).run()
    assert threading.active_count() == before
