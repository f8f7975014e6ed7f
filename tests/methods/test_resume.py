"""A multi-phase method killed mid-run and resumed ends with the record of an uninterrupted run, times aside."""

from __future__ import annotations

import collections
import dataclasses
import json

import pytest

from bench.run.runner import Runner
from bench.api import RunContext
from methods.grpo import GRPOStepConfig, grpo_step
from tests.methods.support import OPD_RESUME as SETTINGS, OPD_RESUME_BUDGET as BUDGET
from tests.methods.support import SMALL_GRPO, Killed, comparable, counting, run_config


@pytest.mark.slow
def test_killed_in_distillation_resumes_to_the_same_record(fast_profile, tmp_path):
    whole_steps, killed_steps, resumed_steps = [], [], []
    runner = Runner(run_config(fast_profile, tmp_path / "a", "opd-multi", BUDGET, eval_every=0.1, **SETTINGS),
                    progress=False)
    runner.method_cls = counting(whole_steps)
    whole = runner.run()
    config = run_config(fast_profile, tmp_path / "b", "opd-multi", BUDGET, eval_every=0.1, **SETTINGS)
    runner = Runner(config, progress=False)
    runner.method_cls = counting(killed_steps, runner.dir)
    with pytest.raises(Killed):
        runner.run()
    state = json.loads((runner.dir / "checkpoints" / "latest" / "state.json").read_text())
    assert state["state"]["distill"]["steps"] >= 1  # the checkpoint is inside distillation
    assert state["phase_streams"] == whole["phase_streams"] == "shared"  # the experts ran in order
    assert not (runner.dir / "summary.json").exists()
    runner = Runner(config, resume=True, progress=False)
    runner.method_cls = counting(resumed_steps)
    resumed = runner.run()
    assert comparable(resumed) == comparable(whole)
    assert len(resumed["steps"]) == len(whole_steps)  # steps.jsonl was cut back to the checkpoint, then redone
    assert resumed["curve"][-1]["flops"] >= BUDGET
    # It continued from the checkpoint (a fresh start would redo every step), redoing the lost ones.
    assert len(killed_steps) < len(whole_steps) and len(resumed_steps) > len(whole_steps) - len(killed_steps)
    assert len(resumed_steps) < len(whole_steps)


class SwitchesStudent:
    """A plugin-style method whose deliverable is a clone (`set_student`), trained with GRPO."""

    name = "switches-student"
    Config = GRPOStepConfig

    def __init__(self, config: GRPOStepConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        ctx.set_student(ctx.clone(ctx.student, "alt"))
        sampler = ctx.sampler("train")
        with ctx.phase("train"):
            while not ctx.should_stop():
                grpo_step(ctx, ctx.student, sampler, self.config)
                ctx.state["alt_steps"] = ctx.state.get("alt_steps", 0) + 1
                ctx.step_done()


def test_a_clone_declared_the_student_is_evaluated_again_after_resume(fast_profile, tmp_path):
    config = run_config(fast_profile, tmp_path, "grpo", 4e10, eval_every=0.1, **SMALL_GRPO)
    whole_steps, killed_steps, resumed_steps = [], [], []
    runner = Runner(dataclasses.replace(config, run_name="whole"), progress=False)
    runner.method_cls = counting(whole_steps, base=SwitchesStudent)
    whole = runner.run()
    runner = Runner(config, progress=False)
    runner.method_cls = counting(killed_steps, runner.dir, base=SwitchesStudent, phase="alt_steps")
    with pytest.raises(Killed):
        runner.run()
    runner = Runner(config, resume=True, progress=False)
    runner.method_cls = counting(resumed_steps, base=SwitchesStudent)
    resumed = runner.run()
    assert 0 < len(resumed_steps) < len(whole_steps)
    assert comparable(resumed) == comparable(whole)
    assert runner.ctx.student.name == "alt"
    assert {r["model"] for r in resumed["ledger"] if r["phase"] == "train"} == {"alt"}


class DeliversItsStart:
    """Supervised steps (which move the weights whatever the rewards), then the student it started from
    declared the deliverable after its last step, as a method that keeps its best checkpoint would."""

    name = "delivers-its-start"
    Config = GRPOStepConfig

    def __init__(self, config: GRPOStepConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        start = ctx.snapshot(ctx.student, "start")
        with ctx.phase("train"):
            while not ctx.should_stop():
                ctx.sft_step(ctx.student, ["12+7="] * 8, ["19"] * 8, lr=1e-2)
                ctx.step_done()
        ctx.set_student(start)


def test_a_student_declared_after_the_last_step_is_the_one_the_record_scores(fast_profile, tmp_path):
    """The record's final accuracy is the deliverable's (`final/`), not the student's before `set_student`."""
    from bench.world.models import load_model, state_digest

    runner = Runner(run_config(fast_profile, tmp_path, "grpo", 4e10, eval_every=0.5, **SMALL_GRPO), progress=False)
    runner.method_cls = DeliversItsStart
    summary = runner.run()
    last, final = summary["curve"][-2:]
    assert last["phase"] != "final" and final["phase"] == "final" and final["flops"] == last["flops"]
    assert summary["final_accuracy"] == final["accuracy"] == summary["base_accuracy"]
    per_evaluation = collections.Counter(sample["flops"] for sample in summary["samples"])
    assert set(per_evaluation.values()) == {per_evaluation[final["flops"]]}  # the final's, not both at those FLOPs
    delivered, _ = load_model(runner.dir / "final")
    trained = runner.ctx._policies["student"]
    assert runner.ctx.student.name == "start" and trained.updates > 0
    assert state_digest(delivered) == state_digest(runner.ctx.student._model) != state_digest(trained._model)
