"""The command line: bad input gets one clear line and exit status 2, and nothing written is lost."""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch
from typer.testing import CliRunner

from bench.cli import DEFAULT_PROFILE, app

runner = CliRunner()


def _err(result) -> str:
    return (result.stderr or result.output).strip()


@pytest.mark.parametrize(
    "args, needle",
    [
        (["run", "--method", "grpo-jiont"], "did you mean 'grpo-joint'"),
        (["run", "--method", "grpo", "--suite", "math_cod"], "math_code"),
        (["run", "--method", "grpo", "--difficulty", "extreme"], "easy"),
        (["run", "--method", "grpo", "--budget", "lots"], "--budget must be a number"),
        (["run", "--method", "grpo", "--budget", "-1e12"], "positive"),
        (["run", "--method", "grpo", "--budget", "inf"], "positive"),
        (["run", "--method", "grpo", "--budget", "nan"], "positive"),
        (["run", "--method", "grpo", "--profile", "huge"], "known profiles: direct, direct-smoke, gpu-small, hf, smoke, tiny"),
        (["run", "--method", "grpo", "--set", "nonsense"], "--set takes KEY=VALUE, got 'nonsense'"),
        (["run", "--method", "grpo", "--set", "lrr=1"], "did you mean 'lr'"),
        (["run", "--method", "grpo", "--set", "lr=fast"], "expected float"),
        (["run", "--method", "grpo", "--rollout", "vlm"], "did you mean 'vllm'"),
        (["sweep", "--methods", "grpo", "--rollout", "jax"], "known rollout backends: torch, vllm"),
        (["list", "widgets"], "methods, profiles, suites"),
        (["flops", "/no/such/model"], "no model folder"),
        pytest.param(["run", "--method", "opd-multi", "--profile", "gpu-small"], "trains and runs on a CUDA GPU",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle, tmp_path):
    result = runner.invoke(app, args + (["--runs", str(tmp_path)] if args[0] == "run" else []))
    assert result.exit_code == 2, result.output
    message = _err(result)
    assert needle in message
    assert len(message.splitlines()) == 1, message
    assert "Traceback" not in result.output


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_rollout_vllm_without_vllm_says_how_to_get_it(tmp_path):
    result = runner.invoke(app, ["run", "--method", "grpo", "--rollout", "vllm", "--runs", str(tmp_path)])
    assert result.exit_code == 2
    message = _err(result)
    assert "make vllm-env" in message and "opd-bench[vllm]" in message
    assert len(message.splitlines()) == 1 and not any(tmp_path.iterdir())  # refused before any work


def test_existing_run_dir_is_not_overwritten(tmp_path):
    run_dir = tmp_path / f"grpo__math_code-easy__{DEFAULT_PROFILE}__s0"
    run_dir.mkdir()
    (run_dir / "ledger.jsonl").write_text("precious\n")
    result = runner.invoke(app, ["run", "--method", "grpo", "--runs", str(tmp_path)])
    assert result.exit_code == 2
    assert "--resume" in _err(result)
    assert (run_dir / "ledger.jsonl").read_text() == "precious\n"


def test_resume_without_a_run_is_an_error(tmp_path):
    result = runner.invoke(app, ["run", "--method", "grpo", "--runs", str(tmp_path), "--resume"])
    assert result.exit_code == 2
    assert "nothing to resume" in _err(result)


def test_a_complete_run_run_again_is_a_no_op_that_shows_its_record(tmp_path):
    args = ["run", "--method", "grpo-joint", "--profile", "direct-smoke", "--budget", "2e10", "--out", str(tmp_path),
            "--set", "prompts_per_step=4", "--set", "group_size=2"]
    assert runner.invoke(app, args).exit_code == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    for again in (args, args + ["--resume"]):  # a second `make run` succeeds, with or without --resume
        result = runner.invoke(app, again)
        assert result.exit_code == 0, result.output
        assert "already complete, nothing to do" in result.output and "grpo-joint__math_code" in result.output
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    # the same name with another configuration is not this run: refused, and kept
    result = runner.invoke(app, args[:-4] + ["--set", "prompts_per_step=8", "--set", "group_size=2"])
    assert result.exit_code == 2 and "complete run of another configuration" in _err(result)
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before


def test_a_complete_run_with_unreadable_files_is_refused_and_kept(tmp_path):
    run_dir = tmp_path / f"grpo__math_code-easy__{DEFAULT_PROFILE}__s0"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    (run_dir / "summary.json").write_text('{"final_accuracy": 0.5}')
    for extra in ([], ["--resume"]):
        result = runner.invoke(app, ["run", "--method", "grpo", "--runs", str(tmp_path), *extra])
        assert result.exit_code == 2
        assert "summary.json is not this run's record (it lacks run_id, base_accuracy" in _err(result)
    assert (run_dir / "summary.json").read_text() == '{"final_accuracy": 0.5}'


def test_console_script_exit_status():
    bench = [sys.executable, "-m", "bench.cli"]
    proc = subprocess.run(bench + ["run", "--method", "nope"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "unknown method 'nope'" in proc.stderr


def test_loading_a_model_draws_no_progress_bar_when_transformers_was_imported_first(tmp_path):
    """transformers decides on its bars when it is first imported; a caller that imported it before
    `bench` (a script, lm-eval, another test) must still get output without a "Loading weights" bar."""
    code = ("import transformers; from bench.world.models import load_model, tiny_model_dir; "
            "load_model(tiny_model_dir('tiny-llama'))")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_DISABLE_PROGRESS_BARS"}  # as in a user's shell
    env["OPD_BENCH_CACHE"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Loading weights" not in proc.stderr


def test_list_methods_and_profiles():
    result = runner.invoke(app, ["list", "methods"])
    assert result.exit_code == 0 and "grpo-joint" in result.output
    result = runner.invoke(app, ["list", "profiles"])
    assert result.exit_code == 0 and "tiny" in result.output


def test_a_listing_starts_without_torch():
    """`bench list` (methods, suites, profiles) imports no torch; `-v`, which builds each method's config, does."""
    code = ("import sys; from typer.testing import CliRunner; from bench.cli import app; r = CliRunner(); "
            "assert all(r.invoke(app, ['list', w]).exit_code == 0 for w in ('methods', 'suites', 'profiles')); "
            "print('torch' in sys.modules); r.invoke(app, ['list', 'methods', '-v']); print('torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("contents", [{}, {"notes.txt": "hello"}, {"broken.json": "{"}])
def test_report_of_a_folder_without_records_writes_nothing(tmp_path, contents):
    runs = tmp_path / "runs"
    runs.mkdir()
    for name, text in contents.items():
        (runs / name).write_text(text)
    result = runner.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 2 and "no valid run records in" in _err(result) and len(_err(result).splitlines()) == 1
    assert not (tmp_path / "site").exists()


def test_report_refuses_to_drop_a_sites_records_unless_forced(tmp_path):
    from tests.reports.factory import make_record, write_runs

    first = write_runs([make_record("grpo-joint", seed=s) for s in range(2)], tmp_path / "a")
    second = write_runs([make_record("opd-multi", seed=0)], tmp_path / "b")
    out = tmp_path / "site"
    assert runner.invoke(app, ["report", "--runs", str(first), "--out", str(out)]).exit_code == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    result = runner.invoke(app, ["report", "--runs", str(second), "--out", str(out)])
    assert result.exit_code == 2
    message = _err(result)
    assert "would be lost" in message and "--force" in message and len(message.splitlines()) == 1
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before  # nothing touched
    assert runner.invoke(app, ["report", "--runs", str(second), "--out", str(out), "--force"]).exit_code == 0
    assert [p.name for p in (out / "records").glob("*.json")] and len(list((out / "records").glob("*.json"))) == 1


def test_compare_says_which_runs_reproduce_their_reference(tmp_path):
    import json

    from tests.reports.factory import make_record, write_runs

    references = write_runs([make_record("grpo-joint", seed=s) for s in range(2)], tmp_path / "ref")
    same = make_record("grpo-joint", seed=0, wall_s=1.0)
    runs = write_runs([same, make_record("grpo-joint", seed=7)], tmp_path / "runs")
    result = runner.invoke(app, ["compare", str(runs), "--against", str(references)])
    assert result.exit_code == 0, result.output
    assert "equal        grpo-joint math_code-easy tiny s0" in result.output
    assert "no reference grpo-joint math_code-easy tiny s7" in result.output
    assert "1 compared: 1 equal, 0 differ, 0 with other inputs; 1 without a reference" in result.output

    changed = make_record("grpo-joint", seed=1)
    changed["steps"][0]["loss"] = 0.125
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    result = runner.invoke(app, ["compare", str(tmp_path / "changed.json"), "--against", str(references), "--json"])
    assert result.exit_code == 1
    [found] = json.loads(result.output)
    assert found["verdict"] == "differs" and [d["path"] for d in found["outcome"]] == ["steps[0].loss"]


@pytest.mark.parametrize("which, needle", [("runs", "no run records in"), ("against", "no reference records in"),
                                           ("unmatched", "none of the 1 records read has a reference")])
def test_compare_with_nothing_to_compare_is_one_line_and_exit_2(which, needle, tmp_path):
    from tests.reports.factory import make_record, write_runs

    records = write_runs([make_record("grpo-joint", seed=0)], tmp_path / "runs")
    others = write_runs([make_record("sft", seed=0)], tmp_path / "others")
    runs, against = {"runs": (tmp_path / "none", records), "against": (records, tmp_path / "none"),
                     "unmatched": (records, others)}[which]
    result = runner.invoke(app, ["compare", str(runs), "--against", str(against)])
    assert result.exit_code == 2 and needle in _err(result).splitlines()[-1]


def test_a_run_without_a_terminal_prints_and_logs_a_line_per_evaluation(tmp_path):
    import json

    result = runner.invoke(app, ["run", "--method", "grpo-joint", "--profile", "direct-smoke", "--budget", "4e10",
                                 "--runs", str(tmp_path), "--set", "prompts_per_step=8", "--set", "group_size=4"])
    assert result.exit_code == 0, result.output
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    curve = (run_dir / "curve.jsonl").read_text().splitlines()
    log = (run_dir / "progress.log").read_text().splitlines()
    logged = [line for line in log if "left ~" in line and "(last evaluation)" not in line]  # not a quiet minute's
    assert len(logged) == len(curve) >= 3
    last = json.loads(curve[-1])
    assert f"acc {100 * last['accuracy']:.1f}%" in logged[-1]
    assert log[0].endswith(f"  {run_dir.name}: a budget of 4.0e+10 counted FLOPs")  # what the log is of
    assert "  complete: " in log[-1] and f"last accuracy {100 * last['accuracy']:.1f}%" in log[-1]
    printed = [line for line in result.output.splitlines() if "left ~" in line and "(last evaluation)" not in line]
    assert len(printed) == len(curve)  # CliRunner's stdout is not a terminal: lines, not a bar


def test_a_run_whose_reader_goes_away_goes_on_to_its_record(tmp_path):
    """`bench run ... | head -1`: rich would end the process at the next line it prints (exit 1, no
    message, the run half done); the run goes on quietly and writes its record and log."""
    args = ["-m", "bench.cli", "run", "--method", "grpo-joint", "--profile", "direct-smoke", "--budget", "4e10",
            "--runs", str(tmp_path), "--set", "prompts_per_step=8", "--set", "group_size=4"]
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    done = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" "$@" | head -1', sys.executable, *args],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1, done.stderr[-3000:]
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    curve = (run_dir / "curve.jsonl").read_text().splitlines()
    assert (run_dir / "summary.json").exists() and "  complete: " in (run_dir / "progress.log").read_text()
    evaluations = [line for line in (run_dir / "progress.log").read_text().splitlines()
                   if "left ~" in line and "(last evaluation)" not in line]
    assert len(evaluations) == len(curve)


def test_progress_line_extrapolates_the_time_left():
    from bench.progress import progress_line

    line = progress_line(5e11, 2e12, 0.185, elapsed=60.0)
    assert "5.00e+11/2.0e+12 FLOPs (25%)" in line and "acc 18.5%" in line
    assert "elapsed 0:01:00" in line and "left ~0:03:00" in line
    assert "left ~?" in progress_line(0.0, 2e12, None, elapsed=1.0)
    # resumed at 4e11: this process spent 1e11 in its minute, so 1.5e12 are 15 minutes away, not 3
    assert "left ~0:15:00" in progress_line(5e11, 2e12, 0.185, elapsed=60.0, since=4e11)
    assert "(176%)" in progress_line(5.28e11, 3e11, None, elapsed=1.0)  # a last step past the budget shows
    assert "acc 18.5% (last evaluation)" in progress_line(5e11, 2e12, 0.185, elapsed=60.0, evaluated=False)


def test_a_minute_without_an_evaluation_gets_a_line_in_the_log(tmp_path, monkeypatch, capsys):
    """Long phases (parallel experts, a slow stretch) are not silent in the log or on stdout without a
    terminal; a warm-up's steps get lines at each tenth and after a quiet minute, stamped with the total."""
    from bench import progress

    log = tmp_path / "progress.log"
    with progress.progress(1e12, log=log) as bar:
        bar.update(1e11, 0.2, evaluated=True)
        bar.update(2e11, 0.2)  # within the minute: no line
        monkeypatch.setattr(progress, "QUIET_S", 0.0)
        bar.update(3e11, 0.2)
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and "acc 20.0%  elapsed" in lines[0] and "3.00e+11/1.0e+12 FLOPs (30%)" in lines[1]
    assert "acc 20.0% (last evaluation)" in lines[1] and capsys.readouterr().out.splitlines()[-1] == lines[1]
    monkeypatch.setattr(progress, "QUIET_S", 60.0)
    with progress.progress(200, label="prepare base", log=tmp_path / "prepare.log", tenths=True) as bar:
        for step in range(1, 201):
            bar.show(step, f"step {step}", "loss 1.000")
    lines = (tmp_path / "prepare.log").read_text().splitlines()
    assert [line.split("  ")[1] for line in lines] == [f"prepare base: step {20 * k} of 200" for k in range(1, 11)]
    assert all(line[:4].isdigit() and "left ~" in line for line in lines)


@pytest.mark.parametrize("command, target", [
    (["prepare", "--profile", "direct-smoke"], "bench.world.prepare.prepare"),
    (["report", "--runs", "RUNS", "--out", "SITE"], "reports.site.build_site"),
    (["eval", "tiny-llama", "--limit", "1"], "bench.run.harness.evaluate"),
    (["export-lm-eval", "strings", "--out", "SITE"], "tasks.lm_eval_export.export"),
])
def test_every_command_ends_on_ctrl_c_with_one_line(command, target, tmp_path, monkeypatch):
    """typer ends an interrupted command silently (exit 130, nothing printed): each says what it kept."""
    import importlib

    from tests.reports.factory import make_record, write_runs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, interrupted)
    runs = write_runs([make_record("grpo-joint", seed=0)], tmp_path / "runs")
    args = [str(runs) if a == "RUNS" else str(tmp_path / "site") if a == "SITE" else a for a in command]
    result = runner.invoke(app, args)
    assert result.exit_code == 130 and len(_err(result).splitlines()) == 1, result.output
    assert _err(result).startswith("error: interrupted")


def test_a_command_runs_from_a_thread_that_is_not_the_main_one():
    """No signal handler can be set off the main thread (a GUI or a web app driving the command line)."""
    import threading

    results = []
    worker = threading.Thread(target=lambda: results.append(runner.invoke(app, ["list", "profiles"])))
    worker.start()
    worker.join()
    assert results[0].exit_code == 0 and "tiny:" in results[0].output, results[0].output


def test_every_command_is_interruptible():
    import inspect

    for command in app.registered_commands:
        callback = command.callback
        assert hasattr(callback, "__wrapped__") or "_interruptible(" in inspect.getsource(callback), callback.__name__


def test_version_and_machine_readable_listings():
    import json
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"opd-bench {version('opd-bench')}"
    methods = json.loads(runner.invoke(app, ["list", "methods", "--json"]).output)
    opd = next(m for m in methods if m["name"] == "opd-multi")
    fields = {f["name"]: f for f in opd["config"]}
    assert fields["distill.lr"]["type"] == "float" and fields["expert_fraction"]["default"] == 0.9
    verbose = runner.invoke(app, ["list", "methods", "--verbose"]).output
    assert "    --set distill.steps=...  (int, default 0)" in verbose
    # a world's own defaults are the ones its runs get, and say so
    assert "    --set lr=...  (float, default 0.00025, the tiny world's)" in verbose.split("grpo-joint")[1]
    gpu = runner.invoke(app, ["list", "methods", "-v", "--profile", "gpu-small"]).output
    assert "    --set lr=...  (float, default 8e-05, the gpu-small world's)" in gpu.split("grpo-joint")[1]
    profiles = json.loads(runner.invoke(app, ["list", "profiles", "--json"]).output)
    assert {p["name"] for p in profiles} >= {"tiny", "direct", "smoke"}


def test_help_lists_every_command_under_its_heading():
    """`bench --help` groups the commands by what they are for, each listed once."""
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "160"}).output
    panels = {"Prepare and run": ["run", "prepare"],
              "Many runs and the leaderboard": ["sweep", "reproduce", "report", "compare"],
              "Look up, check, export": ["list", "flops", "check-adapter", "export-lm-eval", "export-hf", "eval"]}
    assert "Commands" not in out  # no command left under typer's default heading
    at = [out.index(f"─ {heading} ─") for heading in panels] + [len(out)]
    for (heading, commands), begin, end in zip(panels.items(), at, at[1:]):
        listed = [line.split()[1] for line in out[begin:end].splitlines()[1:] if line.startswith("│ ") and line[2] != " "]
        assert listed == commands, heading


def test_listings_piped_are_plain_and_whole():
    # CliRunner's stdout is not a terminal, as with `bench list suites | grep ...`
    lines = runner.invoke(app, ["list", "suites"]).output.splitlines()
    header = lines[0].split("\t")
    assert header[:2] == ["suite", "difficulty"] and "content_hash" in header
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(row) == len(header) for row in rows)
    assert {"four_domain", "math_code"} <= {row[0] for row in rows}
    generated = [row for row in rows if row[header.index("data")] == "generated"]
    assert all(len(row[header.index("content_hash")]) == 64 for row in generated)  # nothing cut with an ellipsis


def test_run_takes_out_like_the_other_commands_and_prints_json(tmp_path):
    import json

    result = runner.invoke(app, ["run", "--method", "grpo-joint", "--profile", "direct-smoke", "--budget", "2e10",
                                 "--out", str(tmp_path), "--json", "--set", "prompts_per_step=4",
                                 "--set", "group_size=2"])
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output[result.output.index("{"):])
    assert outcome["run_dir"] == str(tmp_path / outcome["run_id"]) and (tmp_path / outcome["run_id"] / "summary.json").is_file()
    assert outcome["flops"]["counted"] > 0 and 0 <= outcome["final_accuracy"] <= 1
    flops = json.loads(runner.invoke(app, ["flops", "tiny-llama", "--json"]).stdout)  # stderr may hold a loading bar
    assert flops["matmul_params"] > 0 and flops["audit"]


@pytest.mark.parametrize("args", [["run", "--method", "grpo-jiont"], ["run", "--method", "grpo", "--suite", "math_cod"],
                                  ["sweep", "--methods", "grpo,opd-mlti"], ["run", "--method", "grpo", "--profile", "huge"]])
def test_a_mistyped_name_is_answered_before_torch_loads(args):
    # the answer comes in a fraction of a second because torch and transformers are never imported for it
    code = ("import sys; from typer.testing import CliRunner; from bench.cli import app; "
            f"r = CliRunner().invoke(app, {args!r}); print(r.exit_code, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["2", "False"]


def test_reproduce_runs_the_shipped_worlds_by_default():
    from bench.cli import shipped_profiles
    from bench.world import reference

    shipped = shipped_profiles()
    assert "direct" in shipped  # its base and teacher are in the repository
    assert all((reference.ROOT / name / "manifest.json").is_file() for name in shipped)
    complete = {p.parent.name for p in reference.ROOT.glob("*/manifest.json") if (p.parent / "external.json").is_file()}
    assert set(shipped) == complete & {"tiny", "direct"}


def test_a_new_site_takes_its_run_times_from_the_reference_board():
    """`bench reproduce --out NEW` orders its runs and forecasts the sweep from the reference board's
    records: they time every run of its default plan at three seeds."""
    from pathlib import Path

    from bench.cli import shipped_profiles
    from bench.cli.sweeps import REFERENCE_SITE, _record_wall_times
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.run.sweep import reproduce_plan

    repo = Path(__file__).resolve().parents[2]
    assert _record_wall_times(repo / "no-such-site") == {}
    times = _record_wall_times(repo / REFERENCE_SITE)
    plan = [Runner.run_id_for(c) for name in shipped_profiles()
            for c in reproduce_plan([0, 1, 2], RunConfig(method="", suite="", profile=name))]
    assert plan and all(times.get(run_id, 0) > 0 for run_id in plan)


def test_reproduce_interrupted_while_building_its_site_names_the_command_that_builds_it(tmp_path, monkeypatch):
    import reports.site
    from bench.run import sweep

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep, "run_sweep", lambda *args, **kwargs: sweep.SweepResult([], [], []))
    monkeypatch.setattr(reports.site, "build_site", interrupted)
    result = runner.invoke(app, ["reproduce", "--profile", "direct", "--runs", str(tmp_path / "runs"),
                                 "--out", str(tmp_path / "site")])
    assert result.exit_code == 130
    assert _err(result) == (f"error: interrupted while the site was built, after the sweep: `bench report --runs "
                            f"{tmp_path / 'runs'} --out {tmp_path / 'site'}` builds it")
