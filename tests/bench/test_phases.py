"""`RunContext.map_phases` in child contexts books what the sequential path books; executor options.

A deterministic phase (supervised steps on sampler problems: no sampling generator involved) must
give the same ledger rows, weights, sampler positions and state whether it runs on the run's own
context (`sequential`) or in child contexts merged back (`isolated`, the path Ray tasks take without
Ray; `processes`, local worker processes). The Ray variant of the same check is in test_ray.py.
"""

from __future__ import annotations

import os
import re
import signal
import sys

import pytest
import torch
from typer.testing import CliRunner

from bench.cli import app
from bench.context import RunContext
from bench.errors import RunError
from bench.policy import Policy
from bench.run.config import RunConfig
from bench.run.runner import Runner
from bench.world.models import TINY_SPECS, build_tiny
from tests.bench.phases_support import assert_same_phases, make_context, run_phases, sft_expert, without_seconds


def test_isolated_phases_book_exactly_what_sequential_phases_book():
    ref, ref_results, ref_steps = run_phases("sequential")
    ctx, results, steps = run_phases("isolated")
    assert_same_phases(ctx, results, ref, ref_results)
    assert (len(ref_steps), len(steps)) == (0, 1)  # the runner hears once, after the merge
    assert ctx._ledger.counted_flops > 0
    # one sampling stream in order, one each in child contexts: the record says which (`phase_streams`)
    assert (ref._phase_streams, ctx._phase_streams) == ("shared", "own")
    assert ctx._checkpoint()["phase_streams"] == "own"
    ctx.map_phases(sft_expert, ctx.domains[:1])
    ctx._phase_runner = None  # a resumed run's phases, one after another
    ctx.map_phases(sft_expert, ctx.domains[:1])
    assert ctx._phase_streams == "mixed"


def test_phases_in_processes_book_exactly_what_sequential_phases_book():
    ref, ref_results, _ = run_phases("sequential")
    news: list = []
    ctx = make_context("processes", [], news)
    results = ctx.map_phases(sft_expert, ctx.domains)
    assert_same_phases(ctx, results, ref, ref_results)
    done = [line for _, line in news if line]
    assert sorted(done) == sorted(f"{d}: done, 0 steps, {ctx.phase_flops(f'expert:{d}'):.2e} counted FLOPs"
                                  for d in ctx.domains)
    assert news[-1][0] == ctx._ledger.counted_flops  # the bar ends where the merged ledger starts


def test_a_checkpoint_holds_the_policies_the_run_made_not_its_teachers():
    """A teacher (the external one, or a named hf teacher, perhaps of billions of weights) is loaded
    again as it was when a run resumes: a checkpoint that saved it would only copy it every time."""
    ctx = make_context("sequential", [])
    teacher = Policy("math", *build_tiny(TINY_SPECS["tiny-llama"]), ledger=ctx._ledger, trainable=False)
    ctx._teacher_loader = {"math": teacher}.__getitem__
    assert ctx.teacher("math") is teacher
    ctx.clone(ctx.student, "expert:math")
    assert set(ctx._checkpoint()["policies"]) == {"student", "expert:math"}


def test_a_phase_runs_on_its_runs_gpu_in_process_and_on_its_own_gpu_remotely(monkeypatch):
    """A run on `cuda:1` keeps its `isolated` phases on cuda:1; a Ray task sees the GPU it was given
    as its first, so a remote child builds on `cuda`."""
    from bench.run import phases

    ctx = make_context("sequential", [])
    monkeypatch.setattr(Policy, "device", property(lambda self: torch.device("cuda", 1)))
    spec = phases.child_spec(ctx, sft_expert, 2)
    assert spec.student.device == "cuda:1"
    seen = []
    monkeypatch.setattr(phases, "run_child", lambda spec, key: seen.append(spec.student.device))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # this process's threads stay as they are
    phases._remote_child(spec, "math")
    assert seen == ["cuda"] and spec.student.device == "cuda:1"


def precision_phase(ctx: RunContext, domain: str) -> str:
    return torch.get_float32_matmul_precision()


def test_phases_in_processes_multiply_as_precisely_as_the_parent():
    """A world that trains with TF32 matmuls (`gpu-small`) sets it in the parent's process; a phase in
    a fresh worker process computes with the same precision, not torch's default."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        ctx = make_context("processes", [])
        assert ctx.map_phases(precision_phase, ctx.domains) == {"math": "high", "code": "high"}
    finally:
        torch.set_float32_matmul_precision(before)


def stepping_expert(ctx: RunContext, domain: str) -> None:
    """Supervised steps that tell the runner of each one, as a GRPO expert does."""
    expert = ctx.clone(ctx.student, f"expert:{domain}")
    sampler = ctx.sampler(f"expert:{domain}", [domain])
    with ctx.phase(f"expert:{domain}"):
        for step in range(2 if domain == "math" else 3):
            problems = sampler.next(4)
            ctx.step_done(loss=ctx.sft_step(expert, [p.prompt for p in problems], [p.answer for p in problems],
                                            lr=1e-2), index=step)


@pytest.mark.parametrize("executor", ["isolated", "processes"])
def test_the_steps_of_parallel_phases_are_traced_in_key_order(executor):
    replayed: list = []
    ctx = make_context(executor, [], replayed=replayed)
    ctx.map_phases(stepping_expert, ctx.domains)
    assert [(phase, stats["index"]) for _, phase, stats in replayed] == [
        ("expert:math", 0), ("expert:math", 1), ("expert:code", 0), ("expert:code", 1), ("expert:code", 2)]
    flops = [spent for spent, _, _ in replayed]
    assert flops == sorted(flops) and flops[0] > 0
    assert flops[1] == ctx.phase_flops("expert:math")  # math's last step, then code's on top of it
    assert flops[-1] == ctx._ledger.counted_flops


def budget_expert(ctx: RunContext, domain: str) -> int:
    """Supervised steps until the budget ends (at most 3); the number taken."""
    expert = ctx.clone(ctx.student, f"expert:{domain}")
    sampler = ctx.sampler(f"expert:{domain}", [domain])
    steps = 0
    with ctx.phase(f"expert:{domain}"):
        while steps < 3 and not ctx.should_stop():
            problems = sampler.next(4)
            ctx.sft_step(expert, [p.prompt for p in problems], [p.answer for p in problems], lr=1e-2)
            steps += 1
            ctx.step_done()
    return steps


def test_a_budget_that_ends_inside_parallel_phases_reruns_them_in_order():
    """Each child may take a step past its share; together that is past the run's budget by more than
    one step, so the processes executor discards them and runs the phases as `sequential` does."""
    runs = {}
    for executor in ("sequential", "processes"):
        replayed: list = []
        ctx = make_context(executor, [], replayed=replayed)
        ctx._budget_flops = 1e6  # less than one step
        runs[executor] = (ctx, ctx.map_phases(budget_expert, ctx.domains), replayed)
    (ref, ref_steps, _), (ctx, steps, replayed) = runs["sequential"], runs["processes"]
    assert steps == ref_steps == {"math": 1, "code": 0}  # one step past the budget, in all
    assert without_seconds(ctx._ledger.rows()) == without_seconds(ref._ledger.rows())
    assert replayed == []  # the discarded children's steps are not traced
    assert ctx._phase_streams == "shared"  # run in order on the run's stream, as its numbers say
    assert ctx._reports["parallel_discarded_flops"] > ctx._ledger.counted_flops > 0


def test_opd_multi_experts_in_processes_book_what_isolated_experts_book(fast_profile, tmp_path):
    """Worker processes give the child contexts' numbers (each child on one thread, as here): the
    same ledger to the FLOP, curve and step trace, the experts' steps included."""
    runs = {}
    for executor in ("isolated", "processes"):
        config = RunConfig(method="opd-multi", profile=fast_profile.name, budget_flops=8e10, eval_size=16,
                           runs_dir=tmp_path / executor, phase_executor=executor,
                           overrides=(("expert.prompts_per_step", "8"), ("expert.group_size", "4")))
        runs[executor] = Runner(config, progress=False).run()
    ours, theirs = runs["processes"], runs["isolated"]
    assert without_seconds(ours["ledger"]) == without_seconds(theirs["ledger"])
    assert ours["steps"] == theirs["steps"]
    assert [{k: v for k, v in p.items() if k != "wall_s"} for p in ours["curve"]] == \
        [{k: v for k, v in p.items() if k != "wall_s"} for p in theirs["curve"]]
    phases = [row["phase"] for row in ours["steps"]]
    assert phases.index("expert:code") > phases.index("expert:math") and "distill" in phases
    assert ours["provenance"]["phase_executor"] == "processes"
    assert ours["phase_streams"] == theirs["phase_streams"] == "own"
    log = (tmp_path / "processes" / ours["run_id"] / "progress.log").read_text()
    assert "math: done" in log and "code: done" in log


def test_a_resumed_complete_phase_is_not_charged_again():
    ctx, _, steps = run_phases("isolated")
    spent, stepped = ctx._ledger.counted_flops, len(steps)
    again = ctx.map_phases(skip_if_done, ctx.domains)
    assert ctx._ledger.counted_flops == spent
    assert again["math"] > 0 and again["code"] > 0
    assert len(steps) == stepped  # nor stepped: a resumed run's trace gains no empty row


def test_a_resumed_runs_next_checkpoint_keeps_the_policies_not_yet_made_again():
    def resume(checkpoint: dict) -> RunContext:
        return make_context("sequential", [], policy_states={n: s for n, s in checkpoint.items() if n != "student"})

    first = make_context("sequential", [])
    teacher = first.snapshot(first.student, "self:math")
    resumed = resume(first._checkpoint()["policies"])
    second = resumed._checkpoint()["policies"]  # killed again before the method made its snapshot again
    assert set(second) == {"student", "self:math"}
    again = resume(second)
    again.sft_step(again.student, ["1+1="], ["2"], lr=1e-1)  # the student moves away from the snapshot's weights
    made = again.snapshot(again.student, "self:math")  # the saved weights, not a copy of the student
    for (name, mine), theirs in zip(made._model.state_dict().items(), teacher._model.state_dict().values()):
        assert torch.equal(mine, theirs), name


def skip_if_done(ctx: RunContext, domain: str) -> float:
    # As grpo_phase does: a phase conditioned on the ledger sees the parent's prior rows.
    return ctx.phase_flops(f"expert:{domain}")


@pytest.mark.parametrize("executor", ["isolated", "processes"])
def test_a_failing_phase_fails_the_call(executor):
    ctx = make_context(executor, [])
    with pytest.raises(RuntimeError, match="not available inside a parallel phase"):
        ctx.map_phases(use_teacher, ["math"])


def use_teacher(ctx: RunContext, key: str) -> None:
    ctx.teacher("external")


@pytest.mark.timeout(180)
def test_a_killed_phase_worker_fails_the_call_at_once():
    """A worker process killed from outside (the kernel's OOM killer, say) fails the run with one line,
    which then ends and frees its lock, rather than waiting for ever for the lost phase."""
    ctx = make_context("processes", [])
    with pytest.raises(RunError, match="a worker process of the parallel phases died .* before (math, )?code ended"):
        ctx.map_phases(killed_unless_math, ["math", "code"])


def killed_unless_math(ctx: RunContext, key: str) -> None:
    if key != "math":
        os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize("args, executor", [
    ([], "processes"), (["--profile", "gpu-small"], "sequential"),
    (["--phase-executor", "isolated", "--profile", "gpu-small"], "isolated")])
def test_bench_runs_default_phase_executor_is_processes_only_for_cpu_torch_runs(args, executor, tmp_path,
                                                                                monkeypatch):
    """A world whose models live on a GPU (`gpu-small`, with `--device` left at cpu) runs its phases in
    order: the processes executor refuses a CUDA student."""
    chosen = []

    def stop(self):
        chosen.append(self.config.phase_executor)
        raise RunError("stopped here")

    monkeypatch.setattr(Runner, "run", stop)
    out = CliRunner().invoke(app, ["run", "--method", "opd-multi", "--runs", str(tmp_path), *args])
    assert "stopped here" in (out.stderr or out.output) and chosen == [executor]


def test_copies_of_a_bf16_policy_compute_what_it_computes():
    """A model loaded in bf16 (the hf profile on a GPU) keeps RoPE's `inv_freq` in fp32; a clone (an
    expert, a self-teacher) and a parallel phase's copy of it must too, or the same weights give
    other logits (rounded rotary angles, off by 0.5 rad at position 512)."""
    from bench.accounting.ledger import Ledger
    from bench.policy import Policy
    from bench.run.phases import PolicySpec
    from bench.world.models import load_model

    model, tokenizer = load_model("tiny-llama", dtype=torch.bfloat16)
    source = Policy("student", model, tokenizer, ledger=Ledger())
    ids = torch.randint(3, 200, (2, 200), generator=torch.Generator().manual_seed(0))
    buffers = {name: (b.dtype, b) for name, b in model.named_buffers()}
    with torch.no_grad():
        want = model(ids).logits
        for copied in (source._clone("expert"), PolicySpec.of(source).build(Ledger())):
            assert {name: b.dtype for name, b in copied._model.named_buffers()} == \
                {name: dtype for name, (dtype, _) in buffers.items()} == {name: torch.float32 for name in buffers}
            assert torch.equal(copied._model(ids).logits, want)


def test_sweep_with_ray_executor_and_no_ray_says_how_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without Ray
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo-joint", "--executor", "ray", "--runs", str(tmp_path)])
    assert out.exit_code == 2
    message = out.stderr or out.output
    assert "pip install 'opd-bench[ray]'" in message and len(message.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("args, error", [
    (["--address", "127.0.0.1:6379"], "need --executor ray"),
    (["--gpus-per-run", "1"], "need --executor ray"),
    (["--executor", "slurm"], "unknown executor"),
    (["--executor", "ray", "--gpus-per-run", "1"], "runs on a cpu no --gpus-per-run"),
    (["--executor", "ray", "--profile", "gpu-small"], "need --gpus-per-run above 0 under ray"),
    (["--device", "tpu"], "--device must be cpu, cuda or cuda:n"),
    (["--device", "cuda"], "no cuda device is available here"),
])
def test_sweep_executor_options_are_checked_before_any_run(tmp_path, args, error):
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo-joint", "--runs", str(tmp_path), *args])
    assert out.exit_code == 2
    assert error in (out.stderr or out.output).lower()
    assert not any(tmp_path.iterdir())


def test_a_sampler_is_asked_for_with_the_domains_it_was_made_for():
    ctx = make_context("sequential", [])
    math = ctx.sampler("experts", ["math"])
    assert ctx.sampler("experts", ["math"]) is math and {p.domain for p in math.next(8)} == {"math"}
    with pytest.raises(ValueError, match="sampler 'experts' draws from math, not code: name another sampler"):
        ctx.sampler("experts", ["code"])  # was: the math stream, silently
    ctx.sampler("train")
    with pytest.raises(ValueError, match="draws from every domain, not math"):
        ctx.sampler("train", ["math"])


EXPERTS_PLUGIN = '''
from dataclasses import dataclass
from functools import partial

from bench.api import group_advantages


@dataclass(frozen=True)
class Cfg:
    samples: int = 4


def train_expert(config, ctx, domain):  # module-level, in the plugin's own file
    expert = ctx.clone(ctx.student, f"expert:{domain}")
    sampler = ctx.sampler(f"expert:{domain}", [domain])
    with ctx.phase(f"expert:{domain}"):
        batch = ctx.rollout(expert, sampler.next(4), n=config.samples)
        ctx.step_done(**ctx.pg_step(expert, batch, group_advantages(batch.rewards, config.samples), lr=1e-3))
    return domain


class Experts:
    name = "file-experts"
    Config = Cfg

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        ctx.report("experts", sorted(ctx.map_phases(partial(train_expert, self.config), list(ctx.domains))))
'''


@pytest.mark.parametrize("executor", ["isolated", "processes"])
def test_a_file_plugins_phases_run_in_child_contexts(executor, tmp_path):
    """What a file plugin's `map_phases` ships to a worker refers to the plugin's module, which the
    worker loads from the file first (it failed to unpickle there: no module of that name)."""
    import json

    plugin = tmp_path / "experts.py"
    plugin.write_text(EXPERTS_PLUGIN)
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", "--method", f"{plugin}:Experts", "--profile", "direct-smoke",
                                      "--budget", "4e11", "--phase-executor", executor, "--no-progress",
                                      "--runs", str(runs)])
    assert result.exit_code == 0, result.output
    (summary,) = runs.glob("*/summary.json")
    record = json.loads(summary.read_text())
    assert record["method_metrics"]["experts"] == ["code", "math"]
    assert {"expert:math", "expert:code"} <= {row["phase"] for row in record["ledger"] if row["category"] == "counted"}


@pytest.mark.parametrize("executor", ["isolated", "processes"])
def test_a_phase_that_does_not_stop_at_its_share_is_stopped(executor, tmp_path):
    """A child context holds its phase to its share of the budget as the run holds a method to its
    budget (the run's own check sees a child's steps only replayed, after the merge)."""
    plugin = tmp_path / "experts.py"
    plugin.write_text(EXPERTS_PLUGIN.replace("    with ctx.phase(f\"expert:{domain}\"):\n",
                                             "    while True:  # never asks ctx.should_stop()\n"))
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", "--method", f"{plugin}:Experts", "--profile", "direct-smoke",
                                      "--budget", "1e11", "--phase-executor", executor, "--no-progress",
                                      "--runs", str(runs)])
    message = (result.stderr or result.output).strip().splitlines()[-1]
    assert result.exit_code == 2 and re.search(r"phase '(math|code)' went on past its budget", message), result.output
    assert not list(runs.glob("*/summary.json"))
