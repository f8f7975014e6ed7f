"""The Ray executor: a sweep on a local Ray instance, and opd-multi's experts as parallel Ray tasks.

One Ray instance (2 CPUs, 80 MB object store, no dashboard) serves the module. The sweep runs
grpo-joint and opd-multi (whose two experts become nested Ray tasks) plus one run that must fail: a
plugin whose `run` raises, inside its Ray task.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install 'opd-bench[ray]' (the dev extra has it)")

from bench.cli import app  # noqa: E402
from bench.run.config import RunConfig  # noqa: E402
from bench.run.runner import Runner  # noqa: E402
from reports.schema import validate_record  # noqa: E402
from tests.bench.phases_support import assert_same_phases, run_phases, without_seconds  # noqa: E402

BOOM = Path(__file__).resolve().parents[1] / "fixtures" / "boom.py"  # a plugin whose run raises
BUDGET = 4e11  # the smoke profile's: opd-multi's experts take 90%, distillation runs on the merged experts


@pytest.fixture(scope="module")
def ray_instance():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # tests do not report usage anywhere
    started = time.perf_counter()
    ray.init(address="local", num_cpus=2, object_store_memory=80 * 1024 * 1024, include_dashboard=False,
             log_to_driver=False)
    print(f"ray.init: {time.perf_counter() - started:.1f} s")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def sweep_dir(ray_instance, tmp_path_factory):
    """A Ray sweep of grpo-joint and opd-multi, and a plugin's run that raises in its task."""
    runs = tmp_path_factory.mktemp("ray-runs")
    first = CliRunner().invoke(app, sweep_args(runs))
    return runs, first


def sweep_args(runs: Path) -> list[str]:
    return ["sweep", "--methods", f"grpo-joint,opd-multi,{BOOM}:Boom", "--suites", "math_code",
            "--seeds", "1", "--profile", "smoke", "--budget", str(BUDGET), "--runs", str(runs), "--executor", "ray"]


def record(runs: Path, method: str) -> dict:
    return json.loads((runs / f"{method}__math_code-easy__smoke__s0" / "summary.json").read_text())


def test_ray_sweep_completes_runs_reports_a_failure_and_skips_on_rerun(sweep_dir):
    runs, first = sweep_dir
    assert first.exit_code == 1, first.output  # one failed run: exit 1, the others complete
    assert "2 runs done, 0 already complete, 1 failed" in first.output
    failure = [line for line in first.output.splitlines() if "] failed " in line]
    assert len(failure) == 1 and "boom.py:Boom/math_code/s0: " in failure[0], first.output
    assert "ValueError: the plugin's own bug" in failure[0]
    for method in ("grpo-joint", "opd-multi"):
        rec = record(runs, method)
        assert validate_record(rec) == [], method
        assert rec["budget_flops"] == BUDGET and rec["flops"]["counted"] >= BUDGET
        assert rec["provenance"]["phase_executor"] == "ray"
    before = {m: record(runs, m)["provenance"]["created"] for m in ("grpo-joint", "opd-multi")}
    again = CliRunner().invoke(app, sweep_args(runs))
    assert "0 runs done, 2 already complete, 1 failed" in again.output, again.output
    assert {m: record(runs, m)["provenance"]["created"] for m in before} == before  # untouched


def test_opd_multi_ray_experts_book_what_isolated_experts_book(sweep_dir, tmp_path):
    """Ray tasks and in-process child contexts give the same ledger to the FLOP, distillation included.

    Against the sequential path the numbers legitimately differ: sequential experts share one
    sampling generator (the second expert samples where the first left it), parallel ones cannot and
    each gets its own, so completions, lengths and FLOPs differ, and so may the step at which an
    expert's reward stops improving (it then ends before its share). What must hold against it: the
    same ledger keys, and each expert phase spends something and at most its share of the budget
    (90% / 2 domains) plus one step, well under 1.5 shares (a phase booked twice, or lost, fails this).
    """
    ray_rec = record(sweep_dir[0], "opd-multi")
    runs = {}
    for executor in ("isolated", "sequential"):
        config = RunConfig(method="opd-multi", suite="math_code", profile="smoke", budget_flops=BUDGET,
                           runs_dir=tmp_path / executor, phase_executor=executor)
        runs[executor] = Runner(config, progress=False).run()
    assert without_seconds(ray_rec["ledger"]) == without_seconds(runs["isolated"]["ledger"])
    share = 0.9 * BUDGET / 2
    keys = {}
    for name, rec in (("ray", ray_rec), ("sequential", runs["sequential"])):
        counted = [r for r in rec["ledger"] if r["category"] == "counted"]
        keys[name] = {(r["phase"], r["kind"], r["model"]) for r in counted}
        for domain in ("math", "code"):
            spent = sum(r["flops"] for r in counted if r["phase"] == f"expert:{domain}")
            assert 0 < spent < 1.5 * share, (name, domain, spent)
    assert keys["ray"] == keys["sequential"]
    assert {"expert:math", "expert:code", "distill"} <= {phase for phase, _, _ in keys["ray"]}


def test_ray_phases_book_exactly_what_sequential_phases_book(ray_instance):
    """A deterministic phase (no sampling) gives the sequential path's rows, weights and state."""
    ref, ref_results, _ = run_phases("sequential")
    ctx, results, steps = run_phases("ray")
    assert_same_phases(ctx, results, ref, ref_results)
    assert len(steps) == 1


def test_a_file_plugins_phases_run_as_ray_tasks(ray_instance, tmp_path):
    """The task loads the plugin's file before it unpickles what the phase refers to in it."""
    from tests.bench.test_phases import EXPERTS_PLUGIN

    plugin = tmp_path / "experts.py"
    plugin.write_text(EXPERTS_PLUGIN)
    config = RunConfig(method=f"{plugin}:Experts", suite="math_code", profile="smoke", budget_flops=BUDGET,
                       runs_dir=tmp_path / "runs", phase_executor="ray")
    summary = Runner(config, progress=False).run()
    assert summary["method_metrics"]["experts"] == ["code", "math"]


def test_phases_on_cuda_without_room_for_their_gpus_are_refused_not_left_waiting(ray_instance):
    from types import SimpleNamespace

    from bench.run.phases import _child_gpus

    cpu = SimpleNamespace(student=SimpleNamespace(device="cpu"))
    cuda = SimpleNamespace(student=SimpleNamespace(device="cuda"))
    assert _child_gpus(ray, cpu) == 0.0
    with pytest.raises(RuntimeError, match="would wait forever"):
        _child_gpus(ray, cuda)  # this instance has no GPU at all


def test_a_sweeps_runs_on_a_gpu_run_their_phases_in_their_own_task(tmp_path, monkeypatch):
    """A run's task keeps its GPUs while it waits for its phases, so phases that asked for GPUs of
    their own would wait forever once every GPU is held by a run: on a GPU they run `isolated`."""
    from bench.run.executors import task_config

    monkeypatch.chdir(tmp_path)
    cpu = task_config(RunConfig(method="opd-multi", suite="math_code", profile="smoke", runs_dir=Path("runs")))
    gpu = task_config(RunConfig(method="opd-multi", suite="math_code", profile="gpu-small", runs_dir=Path("runs")))
    assert (cpu.phase_executor, gpu.phase_executor) == ("ray", "isolated")
    assert cpu.runs_dir == gpu.runs_dir == tmp_path / "runs"


def test_a_sweep_stopped_early_cancels_its_runs_on_the_cluster(ray_instance, tmp_path, monkeypatch):
    """Ctrl-C while a sweep waits on a cluster it did not start (here the module's instance, which
    stays up): its runs' tasks are cancelled, not left training and holding their run locks; each
    keeps its last checkpoint for the same command to continue."""
    import fcntl

    from bench.run import checkpoint
    from bench.run.executors import RayExecutor

    configs = [RunConfig(method=m, suite="math_code", profile="smoke", budget_flops=1e13, runs_dir=tmp_path)
               for m in ("grpo-joint", "sft")]
    dirs = [tmp_path / Runner.run_id_for(c) for c in configs]
    wait = ray.wait

    def interrupted_wait(*args, **kwargs):
        deadline = time.monotonic() + 240
        while not all((checkpoint.folder(d) / "state.json").exists() for d in dirs):
            assert time.monotonic() < deadline, "the runs never checkpointed"
            time.sleep(0.2)
        raise KeyboardInterrupt

    monkeypatch.setattr(ray, "wait", interrupted_wait)
    with pytest.raises(KeyboardInterrupt):
        list(RayExecutor().run([(c, False) for c in configs]))
    monkeypatch.setattr(ray, "wait", wait)
    deadline = time.monotonic() + 60
    for run_dir in dirs:
        with open(run_dir / ".lock") as lock:
            while True:  # the cancelled task's process dies and its lock is freed
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{run_dir.name} is still locked"
                    time.sleep(0.2)
        assert not (run_dir / "summary.json").exists()
    assert ray.is_initialized()  # a cluster this sweep did not start stays up


def test_a_sweep_stopped_before_its_first_outcome_cancels_every_task(ray_instance, tmp_path, monkeypatch):
    """Stopped between submitting and waiting (an iterator never started has nothing to close): the
    sweep's `stop` still cancels every task it submitted, and the cluster stays up."""
    from bench.run.executors import RayExecutor

    configs = [RunConfig(method=m, suite="math_code", profile="smoke", budget_flops=1e13, runs_dir=tmp_path)
               for m in ("grpo-joint", "sft")]
    cancelled, cancel = [], ray.cancel
    monkeypatch.setattr(ray, "cancel", lambda ref, **kwargs: (cancelled.append(ref), cancel(ref, **kwargs)))
    executor = RayExecutor()
    outcomes = executor.run([(c, False) for c in configs])
    submitted = list(executor._pending)
    outcomes.close()  # never started: runs nothing
    assert cancelled == []
    executor.stop()
    assert sorted(map(str, cancelled)) == sorted(map(str, submitted)) and len(submitted) == 2
    for ref in submitted:
        with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
            ray.get(ref, timeout=60)
    assert ray.is_initialized()
