"""`bench sweep`: parallel local runs, skipping complete ones; typos fail before any run starts."""

import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from bench.cli import app
from bench.run.conformance import smoke_profile


def test_sweep_runs_in_parallel_then_skips_complete_runs(tmp_path):
    profile = smoke_profile()
    args = ["sweep", "--methods", "grpo-joint,sft", "--suites", "math_code", "--seeds", "1",
            "--profile", profile.name, "--budget", "1e11", "--runs", str(tmp_path), "--jobs", "2"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "2 runs done, 0 already complete, 0 failed" in first.output
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert sorted(r["method"] for r in records) == ["grpo-joint", "sft"]
    assert all(r["budget_flops"] == 1e11 for r in records)
    log = (tmp_path / "sweep.log").read_text().splitlines()
    assert "sweep: 2 runs on 2 jobs (0 already complete)" in log[0] and len(log) == 4
    assert "  [1/2] " in log[1] and "  [2/2] " in log[2]
    assert sorted(line.split("] ")[1].split(":")[0] for line in log[1:3]) == sorted(r["run_id"] for r in records)
    assert all(line in first.output for line in log[:3])  # the same lines on the console
    assert log[3].endswith("  sweep ended: 2 runs done, 0 already complete, 0 failed")  # the log's own tally
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0
    assert "0 runs done, 2 already complete, 0 failed" in again.output


def test_a_sweep_runs_a_range_of_seeds_with_one_override_for_every_run(tmp_path):
    profile = smoke_profile()
    args = ["sweep", "--methods", "grpo", "--suites", "math", "--seeds", "2-3", "--set", "lr=0.0007",
            "--profile", profile.name, "--budget", "2e10", "--runs", str(tmp_path), "--jobs", "2"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    records = [json.loads(p.read_text()) for p in tmp_path.glob("*/summary.json")]
    assert sorted(r["seed"] for r in records) == [2, 3]
    assert all(r["method_config"]["lr"] == 0.0007 for r in records)


def test_a_sweep_refuses_a_run_folder_of_another_configuration_before_any_run(tmp_path, monkeypatch):
    """A complete run is skipped only when it is this run: one made with another `--set` (or budget,
    evaluation setting or world version) under the same name is refused, naming the value, and stays
    as it was."""
    args = ["sweep", "--methods", "grpo", "--suites", "math", "--seeds", "1", "--profile", smoke_profile().name,
            "--budget", "2e10", "--runs", str(tmp_path), "--jobs", "1"]
    assert CliRunner().invoke(app, [*args, "--set", "lr=0.0007"]).exit_code == 0
    (record,) = tmp_path.glob("*/summary.json")
    made = record.stat().st_mtime_ns, record.read_bytes()
    out = CliRunner().invoke(app, [*args, "--set", "lr=0.0009"])
    assert out.exit_code == 2, out.output
    message = out.stderr or out.output
    assert f"{record.parent} holds a run of another configuration (method_config.lr is 0.0007 there, 0.0009 " \
           "here)" in " ".join(message.split())
    assert "Traceback" not in message
    assert (record.stat().st_mtime_ns, record.read_bytes()) == made
    again = CliRunner().invoke(app, [*args, "--set", "lr=0.0007", "--eval-every", "0.5"])
    assert again.exit_code == 2 and "eval_every is 0.1 there, 0.5 here" in " ".join(again.output.split())
    assert "0 runs done, 1 already complete" in CliRunner().invoke(app, [*args, "--set", "lr=0.0007"]).output
    # the same settings in a world whose models the code now builds otherwise
    from bench.world.profiles import PROFILES

    profile = smoke_profile()
    monkeypatch.setitem(PROFILES, profile.name, dataclasses.replace(profile, world_version="rebuilt"))
    rebuilt = CliRunner().invoke(app, [*args, "--set", "lr=0.0007"])
    assert rebuilt.exit_code == 2
    assert f"world_version is {profile.world_version} there, rebuilt here" in " ".join(rebuilt.output.split())
    assert (record.stat().st_mtime_ns, record.read_bytes()) == made


@pytest.mark.parametrize("written, needle", [
    ('{"fingerprint": "from an older schema"}', "holds a run of another configuration (method is (absent) there, "
                                                "grpo here)"),
    ("{not json", "config.json: cannot be read as JSON"),
])
def test_a_run_folder_whose_config_cannot_be_matched_is_refused(tmp_path, written, needle):
    folder = tmp_path / f"grpo__math-easy__{smoke_profile().name}__s0"
    folder.mkdir()
    (folder / "config.json").write_text(written)
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo", "--suites", "math", "--seeds", "1", "--profile",
                                   smoke_profile().name, "--runs", str(tmp_path)])
    assert out.exit_code == 2, out.output
    assert needle in " ".join(out.output.split()) and "Traceback" not in out.output
    assert [p.name for p in folder.iterdir()] == ["config.json"] and (folder / "config.json").read_text() == written


def test_spawned_sweep_workers_make_the_records_forked_ones_do(tmp_path):
    """Runs on a GPU are spawned, not forked (CUDA does not survive a fork): a spawned worker makes
    the same record, curve and ledger as a forked one."""
    from bench.run.config import RunConfig
    from bench.run.executors import LocalExecutor
    from bench.run.sweep import run_sweep

    records = {}
    for start in ("fork", "spawn"):
        config = RunConfig(method="grpo", suite="math", profile=smoke_profile().name, budget_flops=2e10,
                           runs_dir=tmp_path / start)
        result = run_sweep([config], executor=LocalExecutor(1, start_method=start))
        assert len(result.done) == 1 and not result.failed, result.failed
        (path,) = (tmp_path / start).glob("*/summary.json")
        records[start] = json.loads(path.read_text())
    fork, spawn = records["fork"], records["spawn"]
    assert spawn["curve"] and [p["accuracy"] for p in spawn["curve"]] == [p["accuracy"] for p in fork["curve"]]
    assert spawn["flops"] == fork["flops"]
    assert [row["flops"] for row in spawn["ledger"]] == [row["flops"] for row in fork["ledger"]]


def test_a_sweep_on_a_gpu_gives_each_run_a_fresh_spawned_worker(tmp_path):
    """A worker that ran a run on a GPU would still hold its tensors there when the next one starts."""
    from bench.run.config import RunConfig
    from bench.run.executors import LocalExecutor

    def pool(profile: str):
        config = RunConfig(method="grpo-joint", suite="math_code", profile=profile, runs_dir=tmp_path)
        made = LocalExecutor(jobs=2)._pool([(config, False)])
        made.shutdown()
        return made._mp_context.get_start_method(), made._max_tasks_per_child

    assert pool("gpu-small") == ("spawn", 1)
    assert pool("smoke") == ("fork", None)  # on a CPU, long-lived forked workers


def test_a_bad_override_stops_a_sweep_before_any_run(tmp_path):
    args = ["sweep", "--methods", "grpo,opd-multi", "--suites", "math", "--seeds", "1", "--set", "lr=0.001",
            "--profile", smoke_profile().name, "--runs", str(tmp_path)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 2, out.output
    assert "lr" in out.output and "Traceback" not in out.output
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_the_sweep_log_counts_runs_and_extrapolates_the_time_left(tmp_path, monkeypatch):
    from rich.console import Console

    from bench.run import sweep

    now = [100.0]
    monkeypatch.setattr(sweep.time, "perf_counter", lambda: now[0])
    news = sweep.SweepLog(Console(file=open(tmp_path / "console.txt", "w")), tmp_path / "runs" / "sweep.log", 4)
    now[0] = 700.0  # 10 minutes in, the first of four runs ends
    news.ended("a: 12.5% at 1.00e+11 FLOPs")
    now[0] = 1300.0
    news.ended("failed b [x]: no such teacher")  # brackets are text, not markup
    lines = (tmp_path / "runs" / "sweep.log").read_text().splitlines()
    assert lines[0].endswith("  [1/4] a: 12.5% at 1.00e+11 FLOPs; sweep 0:10:00, ~0:30:00 left")
    assert lines[1].endswith("  [2/4] failed b [x]: no such teacher; sweep 0:20:00, ~0:20:00 left")


def test_the_time_left_follows_the_workers_and_the_expected_times(tmp_path, monkeypatch):
    """Two workers, runs expected to take 10, 10, 5 and 5 minutes, on a machine twice as slow as the
    one the expectations came from: before any run ends the sweep expects 15 minutes; when the first
    ends at 20 the second is about to end too, and the last two then take 10 each, side by side:
    10 minutes left, where the time so far over the runs left would say 60."""
    from rich.console import Console

    from bench.run import sweep

    now = [0.0]
    monkeypatch.setattr(sweep.time, "perf_counter", lambda: now[0])
    news = sweep.SweepLog(Console(file=open(tmp_path / "console.txt", "w")), tmp_path / "sweep.log", 4,
                          expected=[600.0, 600.0, 300.0, 300.0], workers=2)
    assert news.forecast() == ", ~0:15:00 expected"
    now[0] = 1200.0
    news.ended("a", 0)
    assert (tmp_path / "sweep.log").read_text().rstrip().endswith("[1/4] a; sweep 0:20:00, ~0:10:00 left")
    # a run under way past its expected time: how much more it needs is not known here
    now[0] = 0.0
    late = sweep.SweepLog(Console(file=open(tmp_path / "console.txt", "w")), tmp_path / "late.log", 3,
                          expected=[60.0, 60.0, 60.0], workers=2)
    now[0] = 60.0
    late.ended("a", 0)
    now[0] = 120.0
    late.ended("c", 2)  # the second run, started at 0, is still running at 2 minutes
    assert (tmp_path / "late.log").read_text().splitlines()[-1].endswith(
        "[2/3] c; sweep 0:02:00, time left unknown (runs past their expected times: see their progress.log)")
    # no expected times: each run counts as the mean of those that ended
    assert sweep.time_left(600.0, [None] * 4, {0: 0.0, 1: 0.0, 2: 600.0}, {0: 600.0}, workers=2) == 600.0
    assert sweep.time_left(0.0, [None] * 4, {0: 0.0, 1: 0.0}, {}, workers=2) is None
    # one worker: everything left in a row, the run under way less its time so far
    assert sweep.time_left(100.0, [50.0, 200.0, 300.0], {0: 0.0, 1: 50.0}, {0: 50.0}, workers=1) == 450.0


def test_sweep_with_a_typo_fails_before_running(tmp_path):
    out = CliRunner().invoke(app, ["sweep", "--methods", "grpo-joint,opd-mult", "--runs", str(tmp_path)])
    assert out.exit_code == 2
    assert "did you mean 'opd-multi'" in (out.stderr or out.output)
    assert not any(tmp_path.iterdir())


def test_sweep_builds_no_unshipped_teacher_that_no_run_asks_for(tmp_path, monkeypatch):
    """A world whose external teacher is not shipped has it built on first use: a sweep of GRPO runs
    prepares the base alone (a teacher can take hours to train)."""
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache"))
    profile = smoke_profile()
    args = ["sweep", "--methods", "grpo-joint", "--suites", "math", "--seeds", "1", "--profile", profile.name,
            "--budget", "2e10", "--runs", str(tmp_path / "runs"), "--jobs", "1"]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output
    prepared = [p.parent for p in (tmp_path / "cache").rglob("prepared.json")]
    assert prepared and not any((p / "external.json").exists() for p in prepared)


def test_expected_times_start_the_longest_runs_first(tmp_path):
    """`bench reproduce` passes the wall times of the site's records: the longest runs start first,
    and a run with no time of its own before them, so that no long run ends alone on one core."""
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.run.sweep import plan, run_sweep

    class Recorder:
        def __init__(self):
            self.started = []

        def describe(self, n_runs):
            return "recorder"

        def run(self, todo):
            for config, _ in todo:
                self.started.append(Runner.run_id_for(config))
                yield config, "ok"

    profile = smoke_profile()
    configs = plan(["grpo-joint", "sft", "opd-multi"], ["math_code"], [0],
                   RunConfig(method="", suite="", profile=profile.name, runs_dir=tmp_path))
    ids = [Runner.run_id_for(c) for c in configs]
    recorder = Recorder()
    run_sweep(configs, executor=recorder, expected_s={ids[0]: 60.0, ids[1]: 600.0})
    assert recorder.started == [ids[2], ids[1], ids[0]]


def _makespan(order, seconds, workers):
    """When the last run ends if each of `workers` takes the next run in `order` as soon as it is free."""
    free = [0.0] * workers
    for i in order:
        free[free.index(min(free))] += seconds[i]
    return max(free)


def test_start_order_lets_the_workers_end_together():
    """On two workers, longest-first leaves one idle at the end (3+2+2 against 3+2); the planned
    order ends both together (3+3 and 2+2+2), and runs with no expected time start first."""
    from bench.run.sweep import start_order

    seconds = [2.0, 3.0, 2.0, 3.0, 2.0]
    longest_first = sorted(range(5), key=lambda i: -seconds[i])
    assert _makespan(longest_first, seconds, 2) == 7.0
    order = start_order(seconds, workers=2)
    assert sorted(order) == [0, 1, 2, 3, 4]
    assert _makespan(order, seconds, 2) == 6.0
    assert start_order([5.0, None, 1.0, None], workers=2)[:2] == [1, 3]
    assert start_order(seconds, workers=None) == longest_first  # no worker count: longest first
    # runs of similar lengths, as in `bench reproduce`: within 2% of the even split on 2 and 3 workers
    lengths = [922.0, 742.0, 736.0, 675.0, 639.0, 632.0, 631.0, 627.0, 592.0, 491.0, 453.0]
    for workers in (2, 3):
        assert _makespan(start_order(lengths, workers), lengths, workers) <= 1.02 * sum(lengths) / workers


@pytest.mark.parametrize("how", ["SIGTERM to the sweep", "Ctrl-C to its process group"])
def test_an_interrupted_sweep_stops_its_runs_and_says_how_to_continue(how, tmp_path):
    """A scheduler's SIGTERM to the sweep, or a terminal's Ctrl-C to it and its workers: one line,
    exit 130, and no worker left running its run (or holding its lock) after the sweep has gone; the
    runs under way keep their checkpoints for the same command to continue."""
    from bench.run import checkpoint

    profile = smoke_profile()
    args = [sys.executable, "-m", "bench.cli", "sweep", "--methods", "grpo-joint,sft,opd-multi", "--suites",
            "math_code", "--seeds", "1", "--profile", profile.name, "--budget", "1e13", "--runs", str(tmp_path),
            "--jobs", "2"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    # start_new_session: its own process group, as a terminal gives a command; SIGINT at its default
    # (a process started in the background inherits it ignored)
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        started = [d for d in tmp_path.iterdir() if (checkpoint.folder(d) / "state.json").exists()]
        if len(started) == 2:
            break
        time.sleep(0.2)
    assert len(started) == 2, proc.communicate(timeout=60)
    workers = [int((d / ".lock").read_text()) for d in started]
    if how == "SIGTERM to the sweep":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stderr, stdout[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "the same command continues" in lines[0], stderr
    for pid in workers:  # gone (or a zombie no one has reaped yet): not running a run
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    for run_dir in started:
        with open(run_dir / ".lock") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: raises BlockingIOError if still held
        assert (checkpoint.folder(run_dir) / "state.json").exists() and not (run_dir / "summary.json").exists()
    if how == "SIGTERM to the sweep":  # the same plan again (on an executor that runs nothing) says what it resumes
        from bench.run.config import RunConfig
        from bench.run.sweep import plan, run_sweep

        class Lists:
            def describe(self, n_runs):
                return "a list"

            def run(self, todo):
                return iter([])

        configs = plan(["grpo-joint", "sft", "opd-multi"], ["math_code"], [0],
                       RunConfig(method="", suite="", profile=profile.name, budget_flops=1e13, runs_dir=tmp_path))
        log = (tmp_path / "sweep.log").read_text().splitlines()
        run_sweep(configs, executor=Lists())
        assert "sweep stopped (KeyboardInterrupt) after 0 of 3 runs" in log[-1]  # the log says how it ended
        first = (tmp_path / "sweep.log").read_text().splitlines()[len(log)]
        assert "sweep: 3 runs on a list (0 already complete, 2 to resume from their checkpoints)" in first, first


def test_a_token_cap_that_moves_evaluations_is_part_of_the_fingerprint():
    # `--max-new-tokens` caps rollouts and evaluations; at the profile's rollout cap only the evaluations move
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.profiles import PROFILES

    tiny = PROFILES["tiny"]
    assert tiny.max_new_tokens != tiny.eval_max_new_tokens
    default = Runner(RunConfig(method="grpo-joint", profile="tiny"), progress=False)
    capped = Runner(RunConfig(method="grpo-joint", profile="tiny", max_new_tokens=tiny.max_new_tokens),
                    progress=False)
    assert "eval_max_new_tokens" not in default.fingerprint()  # a default run's, as every record before it
    written = {"fingerprint": default.fingerprint(), "provenance": {"world_version": tiny.world_version}}
    assert default.difference(written) is None
    assert capped.difference(written) == f"eval_max_new_tokens is (absent) there, {tiny.max_new_tokens} here"


def test_a_gpu_runs_fingerprint_names_its_device_and_one_begun_before_still_matches():
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    run = Runner(RunConfig(method="grpo-joint", profile="gpu-small"), progress=False)  # planned, not run
    assert run.fingerprint()["device"] == "cuda"
    assert "device" not in Runner(RunConfig(method="grpo-joint", profile="tiny"), progress=False).fingerprint()
    before = {k: v for k, v in run.fingerprint().items() if k != "device"}  # config.json of older code
    provenance = {"world_version": run.profile.world_version}
    assert run.difference({"fingerprint": before, "provenance": provenance}) is None
    assert run.difference({"fingerprint": {**before, "device": "cpu"}, "provenance": provenance}) == \
        "device is cpu there, cuda here"
