"""`bench check-adapter`: every built-in method is fully metered; hidden compute is caught."""

import json

import pytest

from bench.run.conformance import check_adapter
from bench.registry import builtin_methods

# A quarter of the smoke world's budget: a few GRPO steps, each with its hidden forward pass.
QUICK = 1e11
# Methods whose distillation the check reaches within the smoke world's budget (recover's comes after
# its GRPO stages reach their target, which they do not within it; its step is methods/distill.py's,
# which these reach).
DISTILLS = ("opd-external", "opd-multi", "self-grpo")

SNEAKY = '''
from dataclasses import dataclass

import torch

from methods.grpo import GRPOConfig, grpo_step


@dataclass(frozen=True)
class Cfg(GRPOConfig):
    prompts_per_step: int = 8


class Sneaky:
    """GRPO that also runs an unmetered copy of the student: compute outside the ledger."""

    name = "sneaky"
    Config = Cfg

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        model = getattr(ctx.student, "_" + "model")  # past the handle, by a name the source check cannot read
        shadow = type(model)(model.config)  # built here, never metered
        sampler = ctx.sampler("train")
        while not ctx.should_stop():
            stats = grpo_step(ctx, ctx.student, sampler, self.config)
            with torch.no_grad():
                shadow(input_ids=torch.randint(3, 100, (64, 48)))
            ctx.step_done(**stats)
'''


def finishing_teacher() -> tuple[tuple[str, str], ...]:
    """The worked world's base as a teacher named "finisher": on the smoke world's tasks it ends its
    answers, which the smoke world's own 30-step teacher never does (sft keeps only finished ones)."""
    from bench.world.prepare import prepare
    from bench.world.profiles import PROFILES

    return (("finisher", str(prepare(PROFILES["tiny"], progress=False, teacher=False).folder / "student")),)


@pytest.mark.parametrize("method", sorted(builtin_methods()))
def test_builtin_methods_are_fully_metered(method):
    # sft learns only from finished teacher answers: without a teacher that finishes, it never updates
    options = dict(teachers=finishing_teacher(), overrides=(("teacher", "finisher"),)) if method == "sft" else {}
    result = check_adapter(method, **options)
    assert result.metered_flops > 0 and result.eval_flops > 0  # it trained, and the runner evaluated it
    assert result.ok, f"{method}: {result}"
    assert result.unchecked_kinds == [], f"{method} never reached: {result.unchecked_kinds}"  # rollouts and updates
    if method in DISTILLS:  # their distillation, not only the GRPO or sampling before it
        assert result.counted_by_phase.get("distill", 0) > 0, f"{method}: phases {result.counted_by_phase}"


def test_a_check_that_never_updates_says_so():
    from typer.testing import CliRunner

    from bench.cli import app

    # the smoke world's own teacher never finishes an answer, so sft samples but never updates
    out = CliRunner().invoke(app, ["check-adapter", "sft", "--budget", str(QUICK)])
    assert out.exit_code == 0 and "PASS sft" in out.output, out.output
    assert "rollout " in out.output and "update 0.00e+00" in out.output
    assert "note: the run took no update step" in " ".join(out.output.split())


def test_hidden_compute_fails_the_check(tmp_path):
    path = tmp_path / "sneaky.py"
    path.write_text(SNEAKY)
    result = check_adapter(f"{path}:Sneaky", budget_flops=QUICK)
    assert not result.ok
    assert result.instrumented_flops > result.metered_flops * 1.02


def test_cli_reports_failure(tmp_path):
    from typer.testing import CliRunner

    from bench.cli import app

    path = tmp_path / "sneaky.py"
    path.write_text(SNEAKY)
    out = CliRunner().invoke(app, ["check-adapter", f"{path}:Sneaky", "--budget", str(QUICK)])
    assert out.exit_code == 1
    assert "FAIL" in out.output and "outside the ledger" in (out.stderr or out.output)
    # long work says what it is doing: a first line, then a line per evaluation (stdout is no terminal)
    assert out.output.startswith(f"checking {path}:Sneaky") and "FLOPs (" in out.output and "left ~" in out.output
    as_json = CliRunner().invoke(app, ["check-adapter", f"{path}:Sneaky", "--json", "--budget", str(QUICK)])
    assert as_json.exit_code == 1
    outcome = json.loads(as_json.stdout)
    assert outcome["ok"] is False and outcome["instrumented_flops"] > outcome["metered_flops"] * 1.02


@pytest.mark.parametrize("args, said", [(["grpo", "--budget", "lots"], "--budget must be"),
                                        (["grpo", "--budget", "-1e11"], "--budget must be"),
                                        (["grpo", "--budget", "inf"], "--budget must be"),
                                        (["nosuch"], "unknown method 'nosuch'"),
                                        (["grpo", "--suite", "nosuch"], "unknown suite 'nosuch'"),
                                        (["no/such/file.py:Method"], "method plugin file not found")])
def test_bad_input_is_one_line_before_any_run(args, said):
    from typer.testing import CliRunner

    from bench.cli import app

    out = CliRunner().invoke(app, ["check-adapter", *args])
    assert out.exit_code == 2
    assert said in (out.stderr or out.output) and "checking" not in out.output


@pytest.mark.parametrize("args, said", [(["--set", "lr"], "--set takes KEY=VALUE, got 'lr'"),
                                        (["--teacher", "finisher"], "--teacher takes NAME=PATH, got 'finisher'"),
                                        (["--set", "nope=1"], "unknown sft config key 'nope'")])
def test_bad_overrides_and_teachers_are_one_line(args, said):
    from typer.testing import CliRunner

    from bench.cli import app

    out = CliRunner().invoke(app, ["check-adapter", "sft", "--budget", str(QUICK), *args])
    assert out.exit_code == 2, out.output
    message = (out.stderr or out.output).strip().splitlines()
    assert said in message[-1] and [m.startswith("error:") for m in message].count(True) == 1


def test_a_bad_set_key_is_refused_before_the_smoke_world_is_prepared(monkeypatch):
    from typer.testing import CliRunner

    from bench.cli import app
    from bench.world import prepare

    # preparing the smoke world trains its external teacher where it is not cached: minutes, for a typo
    monkeypatch.setattr(prepare, "prepare", lambda *args, **kwargs: pytest.fail("the world was prepared"))
    for method in ("grpo", "opd-external"):
        out = CliRunner().invoke(app, ["check-adapter", method, "--set", "foo=1"])
        assert out.exit_code == 2, out.output
        assert f"unknown {method} config key 'foo'" in (out.stderr or out.output).strip().splitlines()[-1]


class _StandIn:
    """Forwards everything to a real policy, and trains it when the evaluator decodes an answer: a
    training step that would be booked `eval` if the context took it for a policy."""

    def __init__(self, policy, train):
        self._policy, self._train = policy, train

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def decode(self, ids):
        if self._train is not None:
            train, self._train = self._train, None
            train()
        return self._policy.decode(ids)


def test_training_cannot_hide_inside_an_evaluation():
    from bench.accounting.ledger import Ledger, evaluation
    from bench.api import group_advantages
    from tests.bench.phases_support import make_context

    ctx = make_context("sequential", [])
    sampler = ctx.sampler("train")

    def train():
        batch = ctx.rollout(ctx.student, sampler.next(4), n=2)
        ctx.pg_step(ctx.student, batch, group_advantages(batch.rewards, 2), lr=1e-3)

    stand_in = _StandIn(ctx.student, train)
    for call in (lambda: ctx.evaluate(stand_in, size=1), lambda: ctx.set_student(stand_in)):
        with pytest.raises(ValueError, match="a policy of this run"):
            call()
    assert ctx.student.updates == 0 and ctx.spent_flops == 0
    ctx.evaluate(ctx.snapshot(ctx.student, "frozen"), size=1)  # its own policies are evaluated as before
    with evaluation(), pytest.raises(RuntimeError, match="inside a held-out evaluation"):  # and below the API
        train()
    assert ctx.student.updates == 0
    with pytest.raises(RuntimeError, match="inside a held-out evaluation"), evaluation():
        Ledger().charge(model="student", flops=1.0, tokens=1, kind="update")


PEEKS = '''
from methods.grpo import GRPOConfig, grpo_step


class Peeks:
    """GRPO that reads the student's held-out accuracy after every step."""

    name = "peeks"{declares}
    Config = GRPOConfig

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        sampler = ctx.sampler("train")
        while not ctx.should_stop():
            stats = grpo_step(ctx, ctx.student, sampler, self.config)
            ctx.evaluate(ctx.student, split="heldout", size=4)  # the accuracy the run is scored on
            ctx.step_done(**stats)
'''


def test_held_out_reads_are_refused_unless_the_method_says_why_and_then_reported(tmp_path):
    from typer.testing import CliRunner

    from bench.cli import app

    path = tmp_path / "peeks.py"
    path.write_text(PEEKS.format(declares=""))
    out = CliRunner().invoke(app, ["check-adapter", f"{path}:Peeks", "--budget", str(QUICK)])
    assert out.exit_code == 2 and "Traceback" not in out.output
    assert "reads the accuracy the run is scored on" in (out.stderr or out.output).strip().splitlines()[-1]
    path.write_text(PEEKS.format(declares='\n    reads_heldout = "a score it reports"'))
    out = CliRunner().invoke(app, ["check-adapter", f"{path}:Peeks", "--budget", str(QUICK), "--json"])
    outcome = json.loads(out.stdout)
    assert out.exit_code == 0 and outcome["ok"] and outcome["heldout_reads"] >= 1
    out = CliRunner().invoke(app, ["check-adapter", f"{path}:Peeks", "--budget", str(QUICK)])
    said = " ".join(out.output.split())
    assert f"read held-out accuracy {outcome['heldout_reads']} times" in said
    assert "saying why: a score it reports" in said
