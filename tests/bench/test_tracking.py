"""`--report-to tensorboard`: the run's curve and step trace mirrored live, on the counted-FLOPs axis."""

from __future__ import annotations

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
