"""The reliability table (docs/reliability.md): what a careless or hostile user can do, and what happens.

Every case asserts the exit status, the one line on stderr and that nothing already written changed.
The run-directory cases share one run killed just after its first checkpoint (`killed`), copied
for each case, on the `direct-smoke` profile.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from bench import store
from bench.accounting.ledger import Ledger
from bench.adapter import api_breach
from bench.cli import app
from bench.errors import AdapterError, RunError
from bench.registry import get_method
from bench.run import checkpoint
from bench.run.config import RunConfig
from bench.run.runner import Runner
from bench.world import reference
from bench.world.models import TINY_SPECS, cache_root, load_model, save_model, tiny_model_dir
from bench.world.prepare import Prepared, prepare
from bench.world.profiles import PROFILES
from methods.grpo import GRPOJoint
from tasks.suites import cache_dir
from tests.methods.support import Killed

cli = CliRunner()
PROFILE = "direct-smoke"
BUDGET = "8e10"  # about five GRPO steps; eval_every 0.25 puts a checkpoint after each of the first four
RUN_ARGS = ["run", "--method", "grpo-joint", "--profile", PROFILE, "--budget", BUDGET, "--eval-every", "0.25",
            "--no-progress"]
RUN_ID = f"grpo-joint__math_code-easy__{PROFILE}__s0"


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file's bytes, lock files aside (they hold the PID of the last process that took them)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*"))
            if p.is_file() and not p.name.endswith(store.LOCK)}


def refused(result, needle: str, code: int = 2) -> str:
    """Exit `code`, one line on stderr holding `needle`, no traceback."""
    message = (result.stderr or result.output).strip()
    assert result.exit_code == code, result.output
    assert needle in message, message
    assert len(message.splitlines()) == 1, message
    assert "Traceback" not in result.output
    return message


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    """A grpo-joint run killed right after its first checkpoint (a runs folder holding it)."""
    runs = tmp_path_factory.mktemp("killed")
    config = RunConfig(method="grpo-joint", profile=PROFILE, budget_flops=float(BUDGET), eval_every=0.25,
                       runs_dir=runs)
    runner = Runner(config, progress=False)

    class DiesAfterCheckpoint(GRPOJoint):
        def run(self, ctx):
            done = ctx.step_done

            def step_done(**stats):
                done(**stats)
                if checkpoint.folder(runner.dir).exists():
                    raise Killed

            ctx.step_done = step_done
            super().run(ctx)

    runner.method_cls = DiesAfterCheckpoint
    with pytest.raises(Killed):
        runner.run()
    return runs


@pytest.fixture
def runs(killed, tmp_path) -> Path:
    """A private copy of the killed run's runs folder."""
    return Path(shutil.copytree(killed, tmp_path / "runs"))


def resume(runs: Path):
    return cli.invoke(app, RUN_ARGS + ["--runs", str(runs), "--resume"])


def mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def readonly(tmp_path):
    """A folder nobody can write to: a read-only tmpfs (as root), or a mode-0555 folder (otherwise)."""
    path = tmp_path / "ro"
    if mount_tmpfs(path, "ro,size=1m"):
        yield path
        subprocess.run(["umount", "-l", str(path)], check=False)
    elif os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
    else:
        pytest.skip("root here, and mounting a read-only tmpfs is not allowed")


# -- inputs bounded and validated before any work ------------------------------------------------------------
@pytest.mark.parametrize(
    "args, needle",
    [
        (["--budget", "1"], "budget must be at least"),
        (["--budget", "1e-300"], "budget must be at least"),
        (["--budget", "1e40", "--eval-every", "1e-12"], "eval_every must be in"),
        (["--eval-every", "0"], "eval_every must be in"),
        (["--eval-early", "0"], "eval_early fractions"),
        (["--eval-size", "0"], "eval_size must be at least 1"),
        (["--eval-size", "-1"], "eval_size must be at least 1"),
        (["--eval-size", "1001"], "--eval-size 1001 is more held-out prompts per domain than math_code has (math "
                                  "1000, code 1000); use at most 1000"),
        (["--set", "lr=inf"], "expected a finite number"),
        (["--set", "lr=nan"], "expected a finite number"),
        (["--set", "lr=-inf"], "expected a finite number"),
        (["--set", "std=biased"], "std must be one of population, sample"),
        (["--seed", "-1"], "seed must be in [0, 2^32)"),
        (["--seed", str(2**32)], "seed must be in [0, 2^32)"),
        (["--seed", str(2**64)], "seed must be in [0, 2^32)"),
        (["--max-new-tokens", "0"], "max_new_tokens must be at least 1"),
        (["--max-new-tokens", "100000"], "positions"),
        (["--max-new-tokens", "256"], "positions"),
    ],
)
def test_nonsense_input_is_refused_before_any_work(args, needle, tmp_path):
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--no-progress",
                              "--runs", str(tmp_path)] + args)
    refused(result, needle)
    assert not any(tmp_path.iterdir())  # no run directory


def test_an_eval_size_the_held_out_split_cannot_fill_is_refused_before_any_model_is_built(tmp_path, monkeypatch):
    from bench.run.runner import Runner

    def built(self):
        raise AssertionError("the world was prepared before the evaluation size was checked")

    monkeypatch.setattr(Runner, "models", built)
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--eval-size", "1001",
                              "--runs", str(tmp_path)])
    refused(result, "use at most 1000")


def test_a_device_a_world_does_not_run_on_is_refused_before_any_work():
    """A CPU world's models run on the CPU whatever `--device` says: taken as a GPU run, it would have
    trained there with a GPU's phase executor and sweep settings, other numbers than without it."""
    from bench.run.config import RunConfig

    with pytest.raises(RunError, match="tiny world's models run on cpu, not --device cuda"):
        RunConfig(method="opd-multi", suite="math_code", profile="tiny", device="cuda")
    with pytest.raises(RunError, match="gpu-small world's models run on cuda, not --device cuda:1"):
        RunConfig(method="opd-multi", suite="math_code", profile="gpu-small", device="cuda:1")
    with pytest.raises(RunError, match="processes phase executor runs on CPU"):  # before it trains, not after
        RunConfig(method="opd-multi", suite="math_code", profile="gpu-small", phase_executor="processes")
    assert RunConfig(method="opd-multi", suite="math_code", profile="gpu-small", device="cuda").on_gpu
    # vLLM takes no device: its engine would land on GPU 0 beside a run on GPU 1
    with pytest.raises(RunError, match="CUDA_VISIBLE_DEVICES=1 and --device cuda"):
        RunConfig(method="sft", suite="math_code", profile="hf", model="m", device="cuda:1", rollout="vllm")


def test_generation_whose_kv_cache_would_not_fit_in_memory_is_refused(tmp_path, monkeypatch):
    from bench.run import runner

    monkeypatch.setattr(runner, "available_bytes", lambda device: 64 * 2**10)  # a 64 KiB machine
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--max-new-tokens", "128",
                              "--runs", str(tmp_path)])
    refused(result, "of KV cache per sequence")
    assert not any(tmp_path.iterdir())


def test_nested_float_settings_must_be_finite(tmp_path):
    result = cli.invoke(app, ["run", "--method", "opd-multi", "--profile", PROFILE, "--set", "distill.lr=inf",
                              "--runs", str(tmp_path)])
    refused(result, "distill.lr='inf': expected a finite number")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("seeds", ["0", "100000", "x", "9-3", "-1", "0-1000", "1,,2", "0,1000000", "1.5"])
def test_sweep_seeds_are_checked(seeds, tmp_path):
    result = cli.invoke(app, ["sweep", "--methods", "grpo", "--seeds", seeds, "--runs", str(tmp_path)])
    refused(result, "--seeds must be a count from 1 to 1000, a range A-B or a list of seeds")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("option", "value"), [("--methods", ","), ("--suites", " , ")])
def test_a_sweep_of_no_methods_or_suites_is_refused(option, value, tmp_path):
    result = cli.invoke(app, ["sweep", "--methods", "grpo", "--runs", str(tmp_path), option, value])
    refused(result, f"{option} names nothing")
    assert not any(tmp_path.iterdir())


def test_a_name_given_twice_plans_its_runs_once():
    from bench.cli.common import _split

    assert _split("grpo-joint, grpo-joint,opd-multi,grpo-joint", "--methods") == ["grpo-joint", "opd-multi"]


def test_an_error_message_is_printed_as_it_is_written(tmp_path):
    # rich would print ":x:" as an emoji; names and paths are the user's own text
    result = cli.invoke(app, ["sweep", "--methods", "grpo", "--suites", ":x:", "--runs", str(tmp_path)])
    refused(result, "unknown suite ':x:'")


@pytest.mark.parametrize(("seeds", "expected"), [("3", [0, 1, 2]), ("3-5", [3, 4, 5]), ("7", list(range(7))),
                                                 ("4,0,4,2", [4, 0, 2]), (" 2-2 ", [2])])
def test_seeds_are_a_count_a_range_or_a_list(seeds, expected):
    from bench.cli.common import _seeds

    assert _seeds(seeds) == expected


@pytest.mark.parametrize("method", ["grpo-joint", "opd-multi", "self-grpo", "sft", "opd-external"])
def test_the_smallest_budget_ends_instead_of_spinning(method, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, "-m", "bench.cli", "run", "--method", method, "--profile", PROFILE, "--budget", "1e6",
            "--no-progress", "--runs", str(tmp_path)]
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (summary,) = tmp_path.glob("*/summary.json")
    record = json.loads(summary.read_text())
    assert record["flops"]["counted"] <= 1e6 + record["max_step_flops"]  # at most one step past it


def test_milestones_of_the_finest_allowed_interval_are_a_short_list():
    config = RunConfig(method="grpo", eval_every=1e-3)
    assert len(config.milestones) <= 1003


# -- raw tracebacks turned into one line ---------------------------------------------------------------------
def test_runs_folder_that_is_a_file(tmp_path):
    runs = tmp_path / "runs"
    runs.write_text("not a folder")
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--runs", str(runs)])
    refused(result, "cannot use")
    assert runs.read_text() == "not a folder"


def test_runs_folder_that_is_read_only(readonly):
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--runs", str(readonly)])
    refused(result, "cannot use")


def test_cache_that_is_a_file(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.write_text("not a folder")
    monkeypatch.setenv("OPD_BENCH_CACHE", str(cache))
    result = cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", PROFILE, "--runs", str(tmp_path / "r")])
    refused(result, "cannot use")
    assert cache.read_text() == "not a folder" and not (tmp_path / "r").exists()


def test_cache_that_is_read_only(readonly, tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", str(readonly))
    result = cli.invoke(app, ["prepare", "--profile", PROFILE])
    refused(result, "cannot use")


@pytest.mark.parametrize("command", ["report", "export-lm-eval"])
def test_unwritable_out(command, tmp_path):
    from tests.reports.factory import make_record, write_runs

    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should go")
    out = blocker / "site"
    if command == "report":
        args = ["report", "--runs", str(write_runs([make_record()], tmp_path / "runs")), "--out", str(out)]
    else:
        args = ["export-lm-eval", "math_code", "--out", str(out)]
    refused(cli.invoke(app, args), "cannot use")
    assert blocker.read_text() == "a file where a folder should go"


def test_an_output_folder_is_never_written_over_unasked(tmp_path):
    from tests.reports.factory import make_record, write_runs

    runs = write_runs([make_record()], tmp_path / "runs")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index.html").write_text("my own page")
    (mine / "README.md").write_text("my own notes")
    refused(cli.invoke(app, ["report", "--runs", str(runs), "--out", str(mine)]),
            "holds index.html but no built site")
    refused(cli.invoke(app, ["export-hf", "math_code", "--out", str(mine), "--train-size", "4"]),
            "holds a README.md that no `bench export-hf` wrote")
    assert snapshot(mine) == {"README.md": b"my own notes", "index.html": b"my own page"}
    result = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(mine), "--force"])  # asked: it builds
    assert result.exit_code == 0, result.output
    assert (mine / "README.md").read_text() == "my own notes"
    export = tmp_path / "export"
    for _ in range(2):  # an earlier export's card is its own: written again
        result = cli.invoke(app, ["export-hf", "math_code", "--out", str(export), "--train-size", "4"])
        assert result.exit_code == 0, result.output


def test_an_export_writes_only_into_a_new_or_empty_folder_or_its_own(tmp_path):
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "utils.py").write_text("def my_hook(): ...")
    (mine / "data" / "train-00000-of-00001.parquet").write_bytes(b"my own rows")
    refused(cli.invoke(app, ["export-lm-eval", "math", "--out", str(mine), "--format", "tiny"]),
            f"{mine} holds files that no `bench export-lm-eval` wrote")
    refused(cli.invoke(app, ["export-hf", "math", "--out", str(mine), "--train-size", "4"]),
            f"{mine} holds a data/ folder with files but no README.md card of `bench export-hf`")
    assert snapshot(mine) == {"utils.py": b"def my_hook(): ...", "data/train-00000-of-00001.parquet": b"my own rows"}
    for command in (["export-lm-eval", "math", "--format", "tiny"], ["export-hf", "math", "--train-size", "4"]):
        export = tmp_path / command[0]
        for _ in range(2):  # an earlier export's folder is its own: written again
            result = cli.invoke(app, [*command, "--out", str(export)])
            assert result.exit_code == 0, result.output


def test_an_output_path_is_checked_before_the_work(tmp_path):
    folder = tmp_path / "scores"
    folder.mkdir()
    refused(cli.invoke(app, ["eval", "tiny-llama", "--profile", PROFILE, "--limit", "1", "--out", str(folder)]),
            f"--out {folder} is a folder; name the JSON file to write")
    refused(cli.invoke(app, ["eval", "tiny-llama", "--batch-size", "0"]), "--batch-size must be at least 1")
    refused(cli.invoke(app, ["export-hf", "math_code", "--out", str(tmp_path / "x"), "--train-size", "0"]),
            "--train-size must be at least 1")
    script = tmp_path / "site.sh"
    script.write_text("echo mine")
    runs = tmp_path / "runs"
    refused(cli.invoke(app, ["reproduce", "--profile", PROFILE, "--runs", str(runs), "--out", str(script)]),
            "is a file, not a folder for the site")
    refused(cli.invoke(app, ["sweep", "--methods", "grpo", "--profile", PROFILE, "--runs", str(runs), "--jobs", "0"]),
            "--jobs must be at least 1, got 0")
    assert not runs.exists() and script.read_text() == "echo mine"


EVAL = ["eval", "tiny-llama", "--profile", PROFILE, "--limit", "1"]


@pytest.fixture
def no_evaluation(monkeypatch):
    """`bench eval` fails the test if it starts its evaluation: what it refuses, it refuses before."""
    from bench.run import harness

    monkeypatch.setattr(harness, "evaluate", lambda *args, **kwargs: pytest.fail("the evaluation ran"))


def test_an_eval_out_under_a_file_is_refused_before_the_work(tmp_path, no_evaluation):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    refused(cli.invoke(app, [*EVAL, "--out", str(afile / "x.json")]),
            f"--out {afile / 'x.json'}: {afile} is a file, not a folder; name a JSON file in a folder")
    refused(cli.invoke(app, [*EVAL, "--out", str(afile / "deeper" / "x.json")]), f"{afile} is a file")
    assert afile.read_text() == "mine"


def test_an_eval_include_path_that_is_not_a_folder_is_refused_before_the_work(tmp_path, no_evaluation):
    afile = tmp_path / "afile"
    afile.write_text("mine")
    refused(cli.invoke(app, [*EVAL, "--include-path", str(tmp_path / "nope")]),
            f"--include-path {tmp_path / 'nope'} does not exist; give a folder of lm-eval task YAML files")
    refused(cli.invoke(app, [*EVAL, "--include-path", str(afile)]),
            f"--include-path {afile} is a file, not a folder of lm-eval task YAML files")
    assert afile.read_text() == "mine"


def test_report_of_a_record_file_says_it_is_not_a_folder(tmp_path):
    from tests.reports.factory import make_record, write_runs

    summary = write_runs([make_record()], tmp_path / "runs") / "run00000" / "summary.json"
    site = tmp_path / "site"
    refused(cli.invoke(app, ["report", "--runs", str(summary), "--out", str(site)]),
            f"--runs {summary} is a file, not a folder; give a folder of runs (or one run's directory) or of record "
            "JSON files")
    refused(cli.invoke(app, ["report", "--runs", str(tmp_path / "nope"), "--out", str(site)]),
            f"no such runs folder: {tmp_path / 'nope'}")
    assert not site.exists()


@pytest.mark.parametrize("cap", ["0", "-5"])
def test_an_eval_cap_below_one_is_refused_before_any_work(cap):
    # 0 is no answer at all, not the profile's cap: refused, as bench run refuses it
    refused(cli.invoke(app, ["eval", "tiny-llama", "--max-new-tokens", cap, "--limit", "1"]),
            f"--max-new-tokens must be at least 1, got {cap}")


def test_an_atomic_write_that_fails_leaves_no_temporary_behind(tmp_path):
    from bench.store import write_json

    (tmp_path / "out.json").mkdir()
    with pytest.raises(OSError):
        write_json(tmp_path / "out.json", {"a": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_flops_on_a_broken_config(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    refused(cli.invoke(app, ["flops", str(tmp_path)]), "cannot load the model")
    assert (tmp_path / "config.json").read_text() == '{"model_type": "llama", "hidden_size": '


def _phi_folder(dest: Path) -> Path:
    """A tiny Hugging Face folder of an architecture the ledger has no FLOP formula for (phi)."""
    from transformers import PhiConfig, PhiForCausalLM

    _, tokenizer = load_model("tiny-llama")
    config = PhiConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                       num_attention_heads=2, max_position_embeddings=256)
    save_model(PhiForCausalLM(config), tokenizer, dest)
    return dest


def test_a_model_with_no_flop_formula_is_one_line(tmp_path):
    folder = _phi_folder(tmp_path / "phi")
    said = "no FLOP formula for model_type='phi'; supported: "
    refused(cli.invoke(app, ["flops", str(folder)]), said)
    runs = tmp_path / "runs"
    refused(cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", "hf", "--model", str(folder),
                             "--budget", "2e9", "--eval-size", "2", "--max-new-tokens", "8", "--no-progress",
                             "--runs", str(runs)]), said)
    assert not runs.exists()  # refused before the run directory (and its lock) is made


def test_a_sliding_window_the_ledger_overcharges_fails_the_audit_and_is_refused_by_a_run(tmp_path):
    """Mistral attending a window of 4 positions: past it, attention is no longer full, so `bench flops`
    (32 positions) finds the formula off and exits 1, and a run is refused at its first rollout."""
    from transformers import MistralConfig, MistralForCausalLM

    _, tokenizer = load_model("tiny-llama")
    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, sliding_window=4,
                           max_position_embeddings=256)
    save_model(MistralForCausalLM(config), tokenizer, tmp_path / "mistral")
    refused(cli.invoke(app, ["flops", str(tmp_path / "mistral")]),
            "differ by more than 2% on forward, forward+backward", code=1)
    refused(cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", "hf", "--model", str(tmp_path / "mistral"),
                             "--budget", "2e9", "--eval-size", "2", "--max-new-tokens", "8", "--no-progress",
                             "--runs", str(tmp_path / "runs")]), "attends a sliding window of 4 positions")


def test_a_plugin_that_raises_is_one_line_naming_it(tmp_path):
    plugin = Path(__file__).resolve().parents[1] / "fixtures" / "boom.py"
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", f"{plugin}:Boom", "--profile", PROFILE, "--no-progress",
                              "--runs", str(runs)])
    refused(result, "method boom")
    assert "ValueError: the plugin's own bug" in result.output
    assert not any(runs.iterdir())  # a failed start leaves nothing behind


_FAULTY = """from dataclasses import dataclass


@dataclass(frozen=True)
class Cfg:
    lr: float = 1e-3

    def __post_init__(self):
        assert self.lr > 0, "lr must be positive"


class Faulty:
    name = "faulty"
    Config = Cfg

    def __init__(self, config):
        self.table = {{"a": 1}}[{key!r}]

    def run(self, ctx):
        pass
"""


@pytest.mark.parametrize("key, setting, said", [
    ("a", "lr=-1", "invalid faulty config: AssertionError: lr must be positive"),
    ("b", "lr=1", "method faulty ("),
])
def test_a_plugin_whose_config_or_constructor_fails_is_one_line(key, setting, said, tmp_path):
    plugin = tmp_path / "faulty.py"
    plugin.write_text(_FAULTY.format(key=key))
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", f"{plugin}:Faulty", "--profile", PROFILE, "--no-progress",
                              "--runs", str(runs), "--set", setting])
    message = refused(result, said)
    assert key == "a" or "failed: KeyError: 'b'" in message
    assert not runs.exists() or not any(runs.iterdir())


_UNUSABLE = """from dataclasses import dataclass, field


@dataclass(frozen=True)
class NoDefaultsConfig:
    lr: float
    samples: int = 4


@dataclass(frozen=True)
class LayersConfig:
    lr: float = 1e-3
    layers: list = field(default_factory=list)


class NoDefaults:
    name = "no-defaults"
    Config = NoDefaultsConfig

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        pass


class Layers(NoDefaults):
    name = "layers"
    Config = LayersConfig
"""


@pytest.mark.parametrize("cls, setting, said", [
    (":NoDefaults", "lr=1e-3", "NoDefaultsConfig field 'lr' has no default: every config field needs one"),
    (":Layers", "layers=1,2", "layers: --set cannot parse a value of type list"),
    ("", "lr=1e-3", "a method in a file is named with its class, path/to/file.py:ClassName"),
])
def test_a_plugin_method_that_cannot_run_as_given_is_one_line_before_any_work(cls, setting, said, tmp_path):
    """A config field without a default (its run failed on `Config()` with --set given), a `--set` of a
    type it cannot parse (stored as the string) and a file named without its class (answered with the
    built-in names alone): one line saying what to change, exit 2, no run folder."""
    plugin = tmp_path / "unusable.py"
    plugin.write_text(_UNUSABLE)
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", f"{plugin}{cls}", "--profile", PROFILE, "--no-progress",
                              "--runs", str(runs), "--set", setting])
    refused(result, said)
    assert not runs.exists() or not any(runs.iterdir())
    if cls == ":NoDefaults":  # listed by name, it is refused the same way (it was listed as unusable, exit 0)
        refused(cli.invoke(app, ["list", "methods", "-v", f"{plugin}{cls}"]), said)


def test_a_plugin_that_takes_a_built_in_methods_name_is_refused(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text("from methods.grpo import GRPOJoint\n\n\nclass Mine(GRPOJoint):\n    name = 'grpo-joint'\n")
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", f"{plugin}:Mine", "--profile", PROFILE, "--no-progress",
                              "--runs", str(runs)])
    refused(result, "calls itself 'grpo-joint', the name of another method")
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("loop, step, said", [
    ("True", "ctx.step_done(**stats)", "went on past its budget"),
    ("True", "if ctx.should_stop(): return  # one step past the budget, never a step_done",
     "without calling ctx.step_done()"),
    ("False", "ctx.step_done(**stats)", "returned without spending a counted FLOP"),  # its record: the base's
    ("True", "ctx.step_done(flops=1.0, **stats)", "'flops' is the runner's own field of a step's trace"),
    ("True", "ctx.step_done(rewards=[1.0], **stats)", "rewards=list is not a number"),
])
def test_a_plugin_that_does_not_stop_or_report_its_steps_is_stopped(loop, step, said, tmp_path):
    plugin = tmp_path / "steps.py"
    plugin.write_text(_cheat("", "", loop=loop, step=step))  # "True": it never asks ctx.should_stop() to go on
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", f"{plugin}:Cheat", "--profile", PROFILE, "--budget", "2e10",
                              "--no-progress", "--runs", str(runs)])
    refused(result, said)
    assert not list(runs.glob("*/summary.json"))  # no record of a run that broke the rules


def test_a_plugin_changed_under_its_name_is_another_run(tmp_path):
    """A run is keyed by its method's name and config; a plugin's own source is part of what makes it,
    so an edited plugin does not get the record its earlier code made."""
    plugin = tmp_path / "steps.py"
    plugin.write_text(_cheat("", ""))
    runs = tmp_path / "runs"
    args = ["run", "--method", f"{plugin}:Cheat", "--profile", PROFILE, "--budget", "2e10", "--no-progress",
            "--runs", str(runs)]
    assert cli.invoke(app, args).exit_code == 0
    (record,) = runs.glob("*/summary.json")
    made = json.loads(record.read_text())
    code = made["provenance"]["method_code"]  # the record says what made it, and how to name it again
    assert made["provenance"]["method_source"] == f"{plugin}:Cheat"
    assert code == json.loads((record.parent / "config.json").read_text())["provenance"]["method_code"]
    again = cli.invoke(app, args)
    assert again.exit_code == 0 and "already complete" in again.output  # the same code: its record
    plugin.write_text(plugin.read_text() + "\n# a bug fixed\n")
    before = snapshot(runs)
    refused(cli.invoke(app, args), f"made by other code of the plugin (provenance.method_code is {code} there,")
    assert snapshot(runs) == before
    site = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert site.exit_code == 0 and "1 records, 0 skipped" in site.output, site.output


def test_a_plugin_fixed_after_a_failure_resumes_and_its_record_says_so(tmp_path, monkeypatch):
    """Its code is not what makes the run (as the project's own is not): a run stopped by a bug goes on
    with the fix from its last checkpoint, and its record names the code it began with too; so does a
    run resumed at other code of the project."""
    plugin = tmp_path / "tail.py"
    plugin.write_text(_cheat("", "", step="ctx.step_done(**stats)\n"
                             "            if ctx.should_stop(): ctx.rollout(ctx.student, sampler.next(2), n=2)"))
    runs = tmp_path / "runs"
    args = [*RUN_ARGS[:2], f"{plugin}:Cheat", *RUN_ARGS[3:], "--runs", str(runs)]
    refused(cli.invoke(app, args), "went on past its budget")  # a diagnostic rollout after the last step
    (config,) = runs.glob("*/config.json")
    began = json.loads(config.read_text())["provenance"]["method_code"]
    project = json.loads(config.read_text())["provenance"]["code_hash"]
    fixed = tmp_path / "fixed.py"  # the fix, in another file: the record's command names the one that finished
    fixed.write_text(_cheat("", ""))
    monkeypatch.setattr("bench.run.provenance.code_hash", lambda: "f1xed" * 3 + "0")  # the project's code moved on
    result = cli.invoke(app, [*RUN_ARGS[:2], f"{fixed}:Cheat", *RUN_ARGS[3:], "--runs", str(runs), "--resume"])
    assert result.exit_code == 0, result.output
    made = json.loads((config.parent / "summary.json").read_text())["provenance"]
    assert made["method_code_at_start"] == began != made["method_code"]
    assert (made["method_source_at_start"], made["method_source"]) == (f"{plugin}:Cheat", f"{fixed}:Cheat")
    assert (made["code_hash_at_start"], made["code_hash"]) == (project, "f1xed" * 3 + "0")


# -- runs in one process: reproducible, and freed -------------------------------------------------------------
JITTER_PLUGIN = """
from dataclasses import dataclass

import torch

from bench.api import group_advantages


@dataclass(frozen=True)
class Cfg:
    samples: int = 4


class Jitter:  # draws its learning rates from torch's global RNG
    name = "jitter"
    Config = Cfg

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        sampler = ctx.sampler("train")
        while not ctx.should_stop():
            batch = ctx.rollout(ctx.student, sampler.next(4), n=self.config.samples)
            lr = 1e-2 * float(torch.rand(()))
            ctx.step_done(**ctx.pg_step(ctx.student, batch, group_advantages(batch.rewards, 4), lr=lr))
"""


def test_a_plugin_drawing_from_torchs_global_rng_gets_the_same_run_in_one_process_and_another(tmp_path):
    """torch's global RNG starts from the run's seed (it started wherever the process's had got to, a new
    random seed in each process), and the caller's RNG is left as it was."""
    plugin = tmp_path / "jitter.py"
    plugin.write_text(JITTER_PLUGIN)
    args = ["run", "--method", f"{plugin}:Jitter", "--profile", PROFILE, "--budget", "3e10", "--no-progress"]
    state = torch.get_rng_state()
    for k in range(2):
        result = cli.invoke(app, args + ["--runs", str(tmp_path / f"here{k}")])
        assert result.exit_code == 0, result.output
    assert torch.equal(torch.get_rng_state(), state)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    subprocess.run([sys.executable, "-m", "bench.cli", *args, "--runs", str(tmp_path / "there")], check=True,
                   env=env, capture_output=True, timeout=600)
    weights = [(tmp_path / where).glob("*/final/model.safetensors") for where in ("here0", "here1", "there")]
    first, second, third = (next(w).read_bytes() for w in weights)
    assert first == second == third


def test_a_finished_run_is_freed_without_the_garbage_collector(tmp_path):
    """A run's context and models go when its runner goes (on a GPU, memory that the next run's fused
    head would otherwise find taken, and charge other recompute FLOPs for)."""
    import gc
    import weakref

    config = RunConfig(method="grpo-joint", profile=PROFILE, budget_flops=float(BUDGET), runs_dir=tmp_path,
                       eval_size=16, overrides=(("prompts_per_step", "8"), ("group_size", "4")))
    runner = Runner(config, progress=False)
    runner.run()
    model, context = weakref.ref(runner.ctx.student._model), weakref.ref(runner.ctx)
    gc.disable()
    try:
        del runner
        assert model() is None and context() is None
    finally:
        gc.enable()


# -- a failed start leaves nothing that blocks the corrected command -----------------------------------------
def test_a_failed_start_leaves_no_directory(tmp_path):
    runs = tmp_path / "runs"
    args = ["run", "--method", "grpo", "--profile", PROFILE, "--budget", "2e10", "--no-progress", "--runs", str(runs)]
    result = cli.invoke(app, args + ["--set", "domain=physics"])
    refused(result, "domain 'physics' is not in the suite; its domains: math, code")
    assert not any(runs.iterdir())
    result = cli.invoke(app, args + ["--set", "domain=math"])  # the corrected command starts cleanly
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(("method", "setting", "said"), [
    ("recover", "domain=physics", "domain 'physics' is not in the suite"),
    ("self-grpo", "order=math,physics", "order math,physics must list each of the suite's domains once"),
    ("opd-external", "teacher=nosuch", "no prepared teacher 'nosuch'; teachers: external"),
])
def test_a_setting_that_does_not_fit_the_suite_or_world_is_one_line(tmp_path, method, setting, said):
    runs = tmp_path / "runs"
    result = cli.invoke(app, ["run", "--method", method, "--profile", PROFILE, "--budget", "2e10", "--no-progress",
                              "--runs", str(runs), "--set", setting])
    refused(result, said)
    assert not any(runs.iterdir())


# -- one writer per run directory ----------------------------------------------------------------------------
def test_a_second_writer_is_refused_naming_the_holder(runs):
    before = snapshot(runs)
    with store.locked(runs / RUN_ID / store.LOCK, what="test"):
        refused(resume(runs), f"in use by another process (PID {os.getpid()})")
        assert snapshot(runs) == before


def test_a_second_start_of_a_run_being_written_names_the_holder_not_resume(runs):
    """The same command in a second terminal: the run is in use, and `--resume` would not help."""
    before = snapshot(runs)
    with store.locked(runs / RUN_ID / store.LOCK, what="test"):
        refused(cli.invoke(app, RUN_ARGS + ["--runs", str(runs)]), f"in use by another process (PID {os.getpid()})")
    assert snapshot(runs) == before
    # nobody writes it: a run that stopped is sent to --resume, as before
    refused(cli.invoke(app, RUN_ARGS + ["--runs", str(runs)]), "already exists; pass --resume to continue it")


def test_report_skips_a_run_being_written(tmp_path):
    from tests.reports.factory import make_record, write_runs

    runs = write_runs([make_record(seed=0), make_record(seed=1)], tmp_path / "runs")
    with store.locked(runs / "run00001" / store.LOCK, what="test"):
        result = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert f"being written (its directory is locked by PID {os.getpid()})" in result.output
    assert "1 records, 1 skipped" in result.output


def test_a_built_world_does_not_hold_up_a_run_while_another_process_holds_its_cache_entry(tmp_path):
    """A process building in the world's cache entry (a teacher the world does not ship: hours) holds its
    lock; a run of the built world neither starts nor ends waiting on it, nor loads its models again to
    write its record."""
    prepared = prepare(PROFILES[PROFILE], teacher=False, progress=False)
    prepared.verify()  # every model loaded once: the entry has nothing left to write
    held, release, waited = threading.Event(), threading.Event(), []

    def other_process():  # a separate open of the lock file: flock refuses it to this thread's as to another's
        with store.locked(prepared.folder.with_name(prepared.folder.name + ".lock"), what="test"):
            held.set()
            if not release.wait(timeout=120):  # the run waited on the lock: let it go, and say so
                waited.append(True)

    holder = threading.Thread(target=other_process)
    holder.start()
    held.wait()
    result = cli.invoke(app, RUN_ARGS + ["--runs", str(tmp_path)])
    release.set()
    holder.join()
    assert not waited, "the run waited on the cache entry's lock"
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / RUN_ID / "summary.json").read_text())
    assert record["provenance"]["model_hashes"] == prepared.model_hashes()


def test_a_cached_model_gone_from_its_entry_is_one_line(tmp_path):
    """A run reads a built entry without its lock, so a builder may be replacing a model as it loads."""
    prepared = prepare(PROFILES[PROFILE], teacher=False, progress=False)
    copy = Path(shutil.copytree(prepared.folder, tmp_path / prepared.folder.name))
    shutil.rmtree(copy / "student")
    with pytest.raises(RunError, match=r"is missing a file .*another process may be replacing it"):
        Prepared(copy, prepared.info, prepared.profile).load_student()


def test_a_run_verifies_its_worlds_models_once_and_a_resumed_run_again(runs, monkeypatch):
    verified: list = []
    monkeypatch.setattr(Prepared, "verify", lambda self, _verify=Prepared.verify: (verified.append(1), _verify(self)))
    assert resume(runs).exit_code == 0
    assert len(verified) == 1  # when it (re)opens its directory: not again for its record


def test_a_tiny_model_is_built_by_one_process_while_another_waits(tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path))
    folder = tmp_path / "models" / f"tiny-llama-{TINY_SPECS['tiny-llama'].digest()}"
    built: list = []
    waiter = threading.Thread(target=lambda: built.append(tiny_model_dir("tiny-llama")))
    with store.locked(folder.with_name(folder.name + ".lock"), what="test"):  # another process building it
        waiter.start()
        waiter.join(timeout=2)
        assert waiter.is_alive() and not folder.exists()  # waiting, not building (and replacing) beside it
    waiter.join(timeout=300)
    assert built == [folder] and load_model(folder)[0].config.model_type == "llama"


def test_an_empty_cache_setting_is_the_default_cache_for_models_and_tasks(tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", "")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == cache_dir() == tmp_path / ".cache" / "opd-bench"


def test_report_into_a_site_being_built_is_one_line(tmp_path):
    from reports import locks
    from tests.reports.factory import make_record, write_runs

    runs = write_runs([make_record(seed=0)], tmp_path / "runs")
    with locks.exclusive_folder(tmp_path / "site", RuntimeError):  # what another build holds
        result = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    refused(result, "is being built by another process (another `bench report` or `bench reproduce`); wait")
    assert not any((tmp_path / "site").iterdir())


def test_two_writers_at_once_one_wins_and_the_files_agree(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, "-m", "bench.cli", "run", "--method", "grpo-joint", "--profile", PROFILE,
            "--budget", "3e10", "--no-progress", "--runs", str(tmp_path)]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outcomes = sorted((p.wait(timeout=300), p.stderr.read()) for p in procs)
    assert [code for code, _ in outcomes] == [0, 2], outcomes
    assert "in use by another process" in outcomes[1][1] or "already exists" in outcomes[1][1]
    summary = json.loads((tmp_path / RUN_ID / "summary.json").read_text())
    curve = (tmp_path / RUN_ID / "curve.jsonl").read_text().splitlines()
    assert len(curve) == len(summary["curve"])
    assert summary["flops"]["counted"] == sum(
        json.loads(r)["flops"] for r in (tmp_path / RUN_ID / "ledger.jsonl").read_text().splitlines()
        if json.loads(r)["category"] == "counted")


# -- resume verifies its files -------------------------------------------------------------------------------
def _drop_line(path: Path, index: int) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:index] + lines[index + 1:]))


def _flip(path: Path, offset: int, size: int) -> None:
    data = bytearray(path.read_bytes())
    offset = min(offset, len(data) - size)
    data[offset:offset + size] = bytes(b ^ 0xFF for b in data[offset:offset + size])
    path.write_bytes(bytes(data))


def _state(run: Path, drop: str) -> None:
    path = checkpoint.folder(run) / "state.json"
    meta = json.loads(path.read_text())
    del meta[drop]
    path.write_text(json.dumps(meta))


DAMAGE = {
    "ledger line deleted": (lambda run: _drop_line(run / "ledger.jsonl", 0), "ledger.jsonl does not match"),
    "ledger truncated": (lambda run: (run / "ledger.jsonl").write_text(""), "ledger.jsonl does not match"),
    "ledger row edited": (lambda run: (run / "ledger.jsonl").write_text(
        (run / "ledger.jsonl").read_text().replace('"flops": ', '"flops": 1', 1)), "ledger.jsonl does not match"),
    "curve line deleted": (lambda run: _drop_line(run / "curve.jsonl", 0), "curve.jsonl does not match"),
    "curve deleted": (lambda run: (run / "curve.jsonl").unlink(), "curve.jsonl does not match"),
    "steps line deleted": (lambda run: _drop_line(run / "steps.jsonl", 0), "steps.jsonl does not match"),
    "4 KiB flipped in policies.pt": (lambda run: _flip(checkpoint.folder(run) / "policies.pt", 1 << 16, 4096),
                                     "policies.pt does not match"),
    "empty policies.pt": (lambda run: (checkpoint.folder(run) / "policies.pt").write_bytes(b""),
                          "policies.pt does not match"),
    "garbage rng.pt": (lambda run: (checkpoint.folder(run) / "rng.pt").write_bytes(os.urandom(512)),
                       "rng.pt does not match"),
    "state.json without samplers": (lambda run: _state(run, "samplers"), "missing key 'samplers'"),
    "state.json without ledger_rows": (lambda run: _state(run, "ledger_rows"), "no row count for ledger.jsonl"),
    "state.json without hashes": (lambda run: _state(run, "hashes"), "has no file hashes"),
    "state.json not JSON": (lambda run: (checkpoint.folder(run) / "state.json").write_text("{"),
                            "cannot be read as JSON"),
    "state.json a JSON list": (lambda run: (checkpoint.folder(run) / "state.json").write_text("[]"),
                               "state.json is damaged (it holds a JSON list, not an object)"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_resume_refuses_damaged_files(case, runs):
    damage, needle = DAMAGE[case]
    damage(runs / RUN_ID)
    before = snapshot(runs)
    refused(resume(runs), needle)
    assert snapshot(runs) == before


def test_a_sweep_counts_a_run_whose_checkpoint_is_damaged_as_failed(runs):
    (checkpoint.folder(runs / RUN_ID) / "state.json").write_text("[]")
    before = snapshot(runs / RUN_ID)
    sweep = ["sweep", "--methods", "grpo-joint", "--suites", "math_code", "--seeds", "1", "--profile", PROFILE,
             "--budget", BUDGET, "--eval-every", "0.25", "--runs", str(runs), "--jobs", "1"]
    result = cli.invoke(app, sweep)
    refused(result, "grpo-joint/math_code/s0: ", code=1)
    assert "state.json is damaged (it holds a JSON list, not an object)" in result.stderr
    assert "0 runs done, 0 already complete, 1 failed" in result.output
    assert snapshot(runs / RUN_ID) == before


@pytest.mark.parametrize("new_one_whole", [True, False])
def test_a_kill_inside_the_checkpoint_swap_keeps_a_checkpoint(new_one_whole, runs):
    # killed between the swap's two renames: the previous checkpoint is latest.old and the new one
    # latest.tmp (whole once its state.json is there), with no latest at all
    latest = checkpoint.folder(runs / RUN_ID)
    before = checkpoint.load(runs / RUN_ID)
    shutil.copytree(latest, latest.with_name("latest.tmp"))
    latest.rename(latest.with_name("latest.old"))
    if not new_one_whole:  # killed while the new one was written: the previous one is whole
        (latest.with_name("latest.tmp") / "state.json").unlink()
    restored = checkpoint.load(runs / RUN_ID)
    assert restored is not None and restored.ledger_rows == before.ledger_rows > 0
    left = ["latest"] if new_one_whole else ["latest", "latest.tmp"]  # a partial one is cleared by the next save
    assert sorted(p.name for p in latest.parent.iterdir()) == left
    assert resume(runs).exit_code == 0


def test_resume_of_undamaged_files_completes(runs):
    result = resume(runs)
    assert result.exit_code == 0, result.output
    summary = json.loads((runs / RUN_ID / "summary.json").read_text())
    assert summary["status"] == "complete" and summary["flops"]["counted"] >= float(BUDGET)
    log = (runs / RUN_ID / "progress.log").read_text()
    assert "  resumed from its checkpoint at " in log, log
    assert log.rstrip().splitlines()[-1].split("  ")[1].startswith("complete: ")


@pytest.mark.parametrize(("summary", "said"), [
    ({}, "it lacks run_id, base_accuracy"), ([], "it holds a JSON list, not a record"),
    ({"run_id": 5}, "it lacks base_accuracy"),
])
def test_a_summary_that_is_not_the_runs_record_is_refused_not_taken_for_it(summary, said, runs):
    assert resume(runs).exit_code == 0
    (runs / RUN_ID / "summary.json").write_text(json.dumps(summary))
    before = snapshot(runs)
    refused(cli.invoke(app, RUN_ARGS + ["--runs", str(runs)]), f"summary.json is not this run's record ({said}")
    sweep = ["sweep", "--methods", "grpo-joint", "--suites", "math_code", "--seeds", "1", "--profile", PROFILE,
             "--budget", BUDGET, "--eval-every", "0.25", "--runs", str(runs)]
    refused(cli.invoke(app, sweep), f"summary.json is not this run's record ({said}")
    assert snapshot(runs) == before


def test_eval_of_a_run_whose_config_is_not_a_runs_config_is_one_line(runs):
    assert resume(runs).exit_code == 0
    (runs / RUN_ID / "config.json").write_text("[]")
    result = cli.invoke(app, ["eval", str(runs / RUN_ID), "--limit", "1"])
    refused(result, "names no suite, so it is not a run's config")
    result = cli.invoke(app, ["eval", str(runs / RUN_ID), "--limit", "1", "--suite", "math_code"])
    refused(result, "names no difficulty")


def test_eval_of_a_model_whose_config_is_not_an_object_is_one_line(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("[1]")
    refused(cli.invoke(app, ["eval", str(folder), "--limit", "1"]),
            f"cannot load the model in {folder} (its config.json holds a JSON list, not an object)")
    assert (folder / "config.json").read_text() == "[1]"


# -- a full disk during a checkpoint -------------------------------------------------------------------------
def test_disk_full_during_a_checkpoint_says_so_and_keeps_the_last_one(runs, tmp_path):
    size = sum(p.stat().st_size for p in runs.rglob("*") if p.is_file())
    small = tmp_path / "small"
    if not mount_tmpfs(small, f"size={size + (256 << 10)}"):
        pytest.skip("mounting a small tmpfs needs root")
    try:
        shutil.copytree(runs, small / "runs")
        kept = snapshot(checkpoint.folder(small / "runs" / RUN_ID))
        config = (small / "runs" / RUN_ID / "config.json").read_bytes()
        message = refused(resume(small / "runs"), "no space left on device")
        assert "--resume" in message
        assert snapshot(checkpoint.folder(small / "runs" / RUN_ID)) == kept
        assert (small / "runs" / RUN_ID / "config.json").read_bytes() == config
    finally:
        subprocess.run(["umount", "-l", str(small)], check=False)


def test_disk_full_as_torch_reports_it(runs, monkeypatch):
    """torch's zip writer says only "unexpected pos": the message still names disk space."""
    kept = snapshot(checkpoint.folder(runs / RUN_ID))

    def full(*args, **kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")

    monkeypatch.setattr(checkpoint.torch, "save", full)
    refused(resume(runs), "no space left on device")
    assert snapshot(checkpoint.folder(runs / RUN_ID)) == kept
    assert not (checkpoint.folder(runs / RUN_ID).with_name("latest.tmp")).exists()


@pytest.mark.parametrize("write", [
    lambda path: store.write_json(path, {"new": 1}),
    lambda path: store.rewrite_jsonl(path, [{"new": 1}]),
    lambda path: Ledger(path)._cut(0),  # resume cutting a ledger back to its checkpoint's rows
], ids=["write_json", "rewrite_jsonl", "ledger cut"])
def test_a_rewrite_that_hits_a_full_disk_keeps_the_old_file_and_leaves_no_temporary(write, tmp_path, monkeypatch):
    import errno

    path = tmp_path / "file.jsonl"
    old = json.dumps({"category": "counted", "phase": "train", "kind": "update", "model": "student", "flops": 1.0,
                      "tokens": 1, "calls": 1, "seconds": 0.0}) + "\n"
    path.write_text(old)

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        write(path)
    assert path.read_text() == old and [p.name for p in tmp_path.iterdir()] == ["file.jsonl"]


def test_disk_full_while_saving_the_final_model_says_so_and_leaves_no_half_written_folder(runs, monkeypatch):
    """safetensors says "No space left" in words only, in an error of its own: one line, not a
    traceback, and no `final.tmp*` folder left in the run directory; the run resumes from its checkpoint."""
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    write = PreTrainedModel.save_pretrained

    def full(self, folder, *args, **kwargs):
        if Path(folder).name.startswith("final.tmp"):
            Path(folder).mkdir(parents=True)
            (Path(folder) / "config.json").write_text("{}")  # what was written before the disk filled
            raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                                  "\"No space left on device\" })")
        return write(self, folder, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    message = refused(resume(runs), "no space left on device writing")
    assert "final" in message and "continue with --resume" in message and not list((runs / RUN_ID).glob("final*"))
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", write)
    assert resume(runs).exit_code == 0 and (runs / RUN_ID / "final" / "model.safetensors").exists()


# -- a checkpoint at least every few minutes, and interruptions name the resume command ----------------------
def test_a_checkpoint_every_few_minutes_whatever_the_budget(tmp_path):
    config = RunConfig(method="grpo-joint", profile=PROFILE, budget_flops=1e40, eval_every=1.0,
                       eval_early=(1.0,), runs_dir=tmp_path, checkpoint_every_s=0.0)
    runner = Runner(config, progress=False)

    class DiesAtStepTwo(GRPOJoint):
        def run(self, ctx):
            done = ctx.step_done

            def step_done(**stats):
                done(**stats)
                if ctx.state.setdefault("steps", 0) >= 1:
                    raise Killed
                ctx.state["steps"] += 1

            ctx.step_done = step_done
            super().run(ctx)

    runner.method_cls = DiesAtStepTwo
    with pytest.raises(Killed):
        runner.run()
    meta = json.loads((checkpoint.folder(runner.dir) / "state.json").read_text())
    assert meta["trace"]["rows"] >= 1  # the budget's first milestone is never reached, yet it checkpointed


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_an_interrupted_run_prints_its_resume_command(sig, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    args = [sys.executable, "-m", "bench.cli"] + RUN_ARGS[:5] + ["--budget", "4e12", "--no-progress",
                                                              "--runs", str(tmp_path)]
    # Ctrl-C's default: a test run started in the background (nohup, `&` in a script) inherits an
    # ignored SIGINT, which Python keeps; a terminal's Ctrl-C reaches a run that has the default.
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    state = checkpoint.folder(tmp_path / RUN_ID) / "state.json"
    deadline = time.monotonic() + 240
    while not state.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    config = (tmp_path / RUN_ID / "config.json").read_bytes()
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (stderr, stdout[-2000:])
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "--resume" in lines[0], stderr
    assert (tmp_path / RUN_ID / "config.json").read_bytes() == config and state.exists()
    assert "  interrupted; the run keeps its last checkpoint" in (tmp_path / RUN_ID / "progress.log").read_text()


# -- cached models are verified ------------------------------------------------------------------------------
@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A private copy of the test cache's direct-smoke world."""
    source = Path(os.environ["OPD_BENCH_CACHE"])
    target = tmp_path / "cache"
    for sub in ("prepared", "models", "heldout"):
        if (source / sub).exists():
            shutil.copytree(source / sub, target / sub,
                            ignore=lambda d, names: [n for n in names if n.startswith(("smoke-", "tiny-"))])
    monkeypatch.setenv("OPD_BENCH_CACHE", str(target))
    return target


def _base_weights(cache: Path) -> Path:
    (weights,) = (cache / "prepared").glob(f"{PROFILE}-*/student/model.safetensors")
    return weights


def test_a_run_that_builds_the_external_teacher_says_so(cache, tmp_path):
    """A teacher built on first use is minutes to hours of warm-up inside a run: the run's log says so
    and where its lines go, and the warm-up writes them there."""
    prepare(PROFILES[PROFILE], progress=False, teacher=False)
    (folder,) = [p for p in (cache / "prepared").glob(f"{PROFILE}-*") if p.is_dir()]
    shutil.rmtree(folder / "external", ignore_errors=True)
    (folder / "external.json").unlink(missing_ok=True)
    result = cli.invoke(app, ["run", "--method", "opd-external", "--profile", PROFILE, "--budget", "2e10",
                              "--runs", str(tmp_path / "runs")])
    assert result.exit_code == 0, result.output
    (log,) = (tmp_path / "runs").glob("*/progress.log")
    built = [line for line in log.read_text().splitlines() if "building the external teacher" in line]
    assert len(built) == 1 and str(folder / "prepare.log") in built[0]
    steps = PROFILES[PROFILE].warmup.teacher_steps
    assert f"prepare external: step {steps} of {steps}" in (folder / "prepare.log").read_text()
    assert (folder / "external.json").exists()
    shutil.rmtree(folder / "external")  # built again: the warm-up's seeding leaves the caller's RNG alone
    (folder / "external.json").unlink()
    state = torch.get_rng_state()
    prepare(PROFILES[PROFILE], progress=False, teacher=True)
    assert (folder / "external.json").exists() and torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("damage", ["flipped", "truncated", "edited config"])
@pytest.mark.parametrize("command", ["run", "prepare"])
def test_a_damaged_cached_model_is_refused(damage, command, cache, tmp_path):
    from bench.world import prepare
    from bench.world.profiles import PROFILES

    if not list((cache / "prepared").glob(f"{PROFILE}-*/prepared.json")):
        pytest.skip("the test cache has no direct-smoke world yet")
    prepare.prepare(PROFILES[PROFILE], progress=False, teacher=False).load_student()  # first load: files hashed
    weights = _base_weights(cache)
    if damage == "flipped":
        _flip(weights, 1 << 16, 64 << 10)
    elif damage == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    else:  # still loads, with the same weights: only the files' hash can tell
        config = json.loads((weights.parent / "config.json").read_text())
        (weights.parent / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-3}))
    before = snapshot(cache / "prepared")
    args = ["prepare", "--profile", PROFILE] if command == "prepare" else \
        ["run", "--method", "grpo-joint", "--profile", PROFILE, "--runs", str(tmp_path / "r")]
    refused(cli.invoke(app, args), "cannot load the model" if damage == "truncated" else "is damaged")
    assert snapshot(cache / "prepared") == before
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def test_a_damaged_shipped_model_is_refused_by_run_as_by_prepare(tmp_path, monkeypatch):
    # a world not yet in the cache is installed from bench/reference/: here a copy with one flipped byte
    held_out = Path(os.environ["OPD_BENCH_CACHE"]) / "heldout"
    if held_out.is_dir():  # the splits, not generated again
        shutil.copytree(held_out, tmp_path / "cache" / "heldout")
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache"))
    shipped = Path(shutil.copytree(reference.ROOT / "direct", tmp_path / "reference" / "direct"))
    _flip(shipped / "student" / "model.safetensors", 1 << 16, 1)
    monkeypatch.setattr(reference, "ROOT", tmp_path / "reference")
    said = f"shipped reference file {shipped / 'student' / 'model.safetensors'} does not match its sha256"
    runs = tmp_path / "runs"
    refused(cli.invoke(app, ["run", "--method", "grpo-joint", "--profile", "direct", "--no-progress",
                             "--runs", str(runs)]), said)
    refused(cli.invoke(app, ["prepare", "--profile", "direct"]), said)
    assert not runs.exists()


def test_a_records_base_hash_is_recomputed(killed, cache):
    from bench.world import prepare
    from bench.world.models import load_model, state_digest
    from bench.world.profiles import PROFILES

    prepared = prepare.prepare(PROFILES[PROFILE], progress=False, teacher=False)
    prepared.info["model_hashes"]["base"] = "0" * 16  # what a copied hash would now say
    with pytest.raises(Exception, match="is damaged"):
        prepared.model_hashes()
    prepared = prepare.prepare(PROFILES[PROFILE], progress=False, teacher=False)
    model, _ = load_model(prepared.folder / "student")
    assert prepared.model_hashes()["base"] == state_digest(model)


def test_a_run_started_from_other_models_is_not_resumed(runs, cache):
    """The world's base rebuilt with other bytes since a run started (its cache entry remade, intact):
    neither `bench run --resume` nor `bench sweep` continues the run on the new base. Each stops with
    one line naming the model whose hash differs; the run folder is left as it was."""
    from bench.world.models import load_model, save_model, state_digest

    if not list((cache / "prepared").glob(f"{PROFILE}-*/prepared.json")):
        pytest.skip("the test cache has no direct-smoke world yet")
    started = json.loads((runs / RUN_ID / "config.json").read_text())["provenance"]["model_hashes"]["base"]
    folder = _base_weights(cache).parent
    model, tokenizer = load_model(folder)
    with torch.no_grad():
        next(model.parameters()).add_(0.01)
    save_model(model, tokenizer, folder)
    info_path = folder.parent / "prepared.json"
    info = json.loads(info_path.read_text())
    info.pop("files_hash", None)  # as a rebuild writes it: recorded again at the new base's first load
    info["model_hashes"]["base"] = rebuilt = state_digest(model)
    info_path.write_text(json.dumps(info))
    before = snapshot(runs)
    difference = f"model_hashes.base is {started} there, {rebuilt} here"
    refused(resume(runs), f"was started from other models ({difference}); not resuming")
    sweep = ["sweep", "--methods", "grpo-joint", "--suites", "math_code", "--seeds", "1", "--profile", PROFILE,
             "--budget", BUDGET, "--eval-every", "0.25", "--runs", str(runs)]
    refused(cli.invoke(app, sweep), f"holds a run made from other models ({difference})")
    assert snapshot(runs) == before


# -- the ledger, the report and the conformance check --------------------------------------------------------
@pytest.mark.parametrize("flops, tokens", [(-1.0, 0), (float("nan"), 0), (float("inf"), 0), (1.0, -1)])
def test_the_ledger_refuses_negative_or_non_finite_charges(flops, tokens):
    ledger = Ledger()
    with pytest.raises(ValueError, match="non-negative"):
        ledger.charge(model="m", flops=flops, tokens=tokens, kind="update")
    assert ledger.rows() == []


def _ledger_case(name: str):
    from tests.reports.factory import make_record

    record = make_record(seed=1)
    row = dict(record["ledger"][0])
    if name == "negative":
        row.update(category="eval", flops=-1e9)
        needle = "flops must be bigger than or equal to 0"
    else:
        row.update(category="eval", kind="update")
        needle = "books training (kind update) as eval"
    record["ledger"].append(row)
    return record, needle


@pytest.mark.parametrize("case", ["negative", "eval update"])
def test_report_rejects_records_with_impossible_ledger_rows(case, tmp_path):
    from tests.reports.factory import make_record, write_runs

    bad, needle = _ledger_case(case)
    runs = write_runs([make_record(seed=0), bad], tmp_path / "runs")
    before = snapshot(runs)
    result = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert needle in result.output and "1 records, 1 skipped" in result.output
    assert snapshot(runs) == before


def test_duplicate_seeds_count_once(tmp_path):
    from tests.reports.factory import make_record, write_runs

    first, again = make_record(seed=0), make_record(seed=0)
    again["run_id"] = first["run_id"] + "-again"
    runs = write_runs([first, again], tmp_path / "runs")
    result = cli.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert "one seed counts once" in result.output and "1 records, 1 skipped" in result.output


def _cheat(imports: str, before: str, each_step: str = "", loop: str = "not ctx.should_stop()",
           step: str = "ctx.step_done(**stats)", declares: str = "") -> str:
    """A plugin's source: GRPO (with class attributes `declares`) whose `run` does `before` once, then
    while `loop`: `each_step`, a counted step (its `stats`) and `step`."""
    return f"""import importlib
{imports}
from methods.grpo import GRPOConfig, grpo_step


class Cheat:
    name = "cheat"
    Config = GRPOConfig
{declares}

    def __init__(self, config):
        self.config = config

    def run(self, ctx):
        sampler = ctx.sampler("train")
{before}
        while {loop}:
{each_step}
            stats = grpo_step(ctx, ctx.student, sampler, self.config)
            {step}
"""


# the engine's modules, imported by names built at run time: past the source check (`bench.adapter.api_breach`),
# so that what catches such a plugin when it runs is what these tests see
LEDGER = 'importlib.import_module("bench." + "accounting.ledger")'
EVALUATION = 'importlib.import_module("bench." + "evaluation")'

CHEATS = {
    "books its training as eval": _cheat(f"ledger_context = {LEDGER}.ledger_context", "", """\
            with ledger_context(category="eval"):  # half the training, booked as evaluation
                grpo_step(ctx, ctx.student, sampler, self.config)"""),
    "trains in a thread": _cheat("import threading", """\
        worker = threading.Thread(target=lambda: None)
        worker.start()"""),
    "searches in a forked child": _cheat("import os", """\
        child = os.fork()  # a child's rollouts die with its copy of the ledger
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)"""),
    "replaces the student's decode": _cheat("", """\
        ctx.student.decode = lambda ids: "#0"  # would choose the answers the held-out evaluation scores"""),
    "books its rollouts as an evaluation": _cheat(f"evaluation = {LEDGER}.evaluation", "", """\
            with evaluation():  # a second batch of rollouts, tallied with the held-out evaluations
                ctx.score(ctx.student, ctx.rollout(ctx.student, sampler.next(16), n=8))"""),
    "scores with an evaluator of its own": _cheat(f"Evaluator = {EVALUATION}.Evaluator", "", """\
            own = Evaluator(getattr(ctx, "_" + "suite"), 64, 16, split="validation")  # its greedy answers, booked eval
            own.evaluate(ctx.student, samples_per_domain=64)"""),
    "catches the refusal of its own evaluation": _cheat(f"evaluation = {LEDGER}.evaluation", "", """\
            try:  # refused under the check, and caught: in a run unchecked, rollouts booked eval
                with evaluation():
                    ctx.score(ctx.student, ctx.rollout(ctx.student, sampler.next(16), n=8))
            except Exception:
                pass"""),
    "catches the refusal of its thread": _cheat("import threading", """\
        try:
            threading.Thread(target=lambda: None).start()
        except Exception:
            pass"""),
    "hides a little work among many evaluations": _cheat("import torch", """\
        model = getattr(ctx.student, "_" + "model")
        shadow = type(model)(model.config)  # never metered""", """\
            for _ in range(4):  # evaluating twice what it trains (held out: uncounted): 2% of everything is 6%
                ctx.evaluate(ctx.student, split="heldout", size=200)  # of its training
            with torch.no_grad():
                shadow(input_ids=torch.randint(3, 100, (48, 48)))""",
        declares='    reads_heldout = "a score it reports"'),
}


@pytest.mark.parametrize("cheat, code, needle", [
    ("books its training as eval", 2, "booked 'eval' while the method runs"),  # refused by the ledger itself
    ("trains in a thread", 2, "starts a thread"),
    ("searches in a forked child", 2, "starts a process (os.fork)"),
    ("replaces the student's decode", 2, "Policy.decode belongs to the engine"),
    ("books its rollouts as an evaluation", 2, "begins a held-out evaluation itself"),
    ("scores with an evaluator of its own", 2, "begins a held-out evaluation itself"),
    ("catches the refusal of its own evaluation", 2, "begins a held-out evaluation itself"),
    ("catches the refusal of its thread", 2, "starts a thread"),
    ("hides a little work among many evaluations", 1, "not conformant"),
])
def test_conformance_catches_uncounted_flops(cheat, code, needle, tmp_path):
    """What a plugin does when it runs: caught by the ledger, the engine's guards or the check's count."""
    plugin = tmp_path / "cheat.py"
    plugin.write_text(CHEATS[cheat])
    result = cli.invoke(app, ["check-adapter", f"{plugin}:Cheat", "--budget", "1e11"])  # a few steps
    message = (result.stderr or result.output).strip().splitlines()[-1]
    assert result.exit_code == code, result.output
    assert needle in message and "Traceback" not in result.output


@pytest.mark.parametrize("imports, before, said", [
    ("from bench.accounting.ledger import evaluation", "", "imports from bench.accounting.ledger"),
    ("import bench.evaluation", "", "imports bench.evaluation"),
    ("from bench import store", "", "imports bench.store"),
    ("import bench", "        bench.store.locked", "uses bench.store"),
    ("", "        ctx._ledger.charge(model='student', flops=0.0, tokens=0, kind='rollout')",
     "ctx._ledger is a private member of the engine's objects"),
    ("", "        model = ctx.student._model", "ctx.student._model is a private member"),
    ("", "        ledger = getattr(ctx, '_ledger')", "getattr(ctx, '_ledger') names a private member"),
    ("", "        importlib.import_module('bench.evaluation')", "imports bench.evaluation"),
    ("import bench as engine", "        engine.evaluation.Evaluator", "uses bench.evaluation"),
    ("", "        ledger = vars(ctx)['_ledger']", "vars(ctx)['_ledger'] reaches _ledger"),
    ("import sys", "        sys.modules['bench.store']", "sys.modules['bench.store'] reaches bench.store"),
    ("if __name__ != '__main__':\n    from bench.evaluation import Evaluator", "",
     "imports from bench.evaluation"),  # runs whenever the module is loaded as a plugin
])
def test_a_plugin_whose_source_reaches_past_the_api_is_refused_before_it_runs(imports, before, said, tmp_path):
    plugin = tmp_path / "cheat.py"
    plugin.write_text(source := _cheat(imports, before))
    offence = (before or imports).splitlines()[-1]
    line = 1 + source.splitlines().index(offence)  # where it reaches past the API
    runs = tmp_path / "runs"
    for command in (["check-adapter", f"{plugin}:Cheat"],
                    ["run", "--method", f"{plugin}:Cheat", "--profile", PROFILE, "--budget", "2e10", "--no-progress",
                     "--runs", str(runs)]):
        message = refused(cli.invoke(app, command), f"reaches past the method API at {plugin}:{line} ({said}")
        assert "only through bench.api" in message
    assert not runs.exists()


def test_a_plugins_own_private_members_and_the_api_are_its_own(tmp_path):
    plugin = tmp_path / "own.py"
    plugin.write_text(_cheat("""\
from typing import TYPE_CHECKING

from bench.api import group_advantages

if TYPE_CHECKING:  # for type checkers only: never run
    from bench.context import RunContext


class Buffer:
    def __init__(self):
        self._state = {}  # names the engine uses too, on an object of its own

    def _finish(self):
        return self._state
""", """\
        self._model = group_advantages  # its own attribute, whatever its name
        assert not hasattr(self, "_ledger")
        buffer = Buffer()
        buffer._state["seen"] = buffer._finish()"""))
    assert api_breach(get_method(f"{plugin}:Cheat")) is None


def test_a_plugin_in_another_encoding_is_read_in_it(tmp_path):
    plugin = tmp_path / "latin.py"
    plugin.write_bytes(("# -*- coding: latin-1 -*-\n# caf\xe9\n" + _cheat("from bench.evaluation import Evaluator", ""))
                       .encode("latin-1"))
    with pytest.raises(AdapterError, match=rf"at {plugin}:\d+ \(imports from bench.evaluation\)"):
        get_method(f"{plugin}:Cheat")


def test_the_source_check_reads_what_the_method_reaches_not_its_scripts_driver(tmp_path):
    driver = tmp_path / "script.py"
    driver.write_text(_cheat("", "") + """

def main():
    from bench.world.profiles import PROFILES  # a script's own driver, which the method never calls
    return PROFILES


if __name__ == "__main__":
    main()
""")
    assert api_breach(get_method(f"{driver}:Cheat")) is None
    helper = tmp_path / "helper.py"
    helper.write_text(_cheat("", "        peek(ctx)") + """

def peek(ctx):
    return ctx._ledger  # reached through a function of its module
""")
    with pytest.raises(AdapterError, match=rf"at {helper}:\d+ \(ctx._ledger is a private member"):
        get_method(f"{helper}:Cheat")


# -- kill and resume at random points over the phases --------------------------------------------------------
@pytest.fixture(scope="module")
def whole_opd_multi(tmp_path_factory, fast_profile):
    from tests.methods.support import OPD_RESUME as SETTINGS, OPD_RESUME_BUDGET as OPD_BUDGET, counting, run_config

    steps: list = []
    config = run_config(fast_profile, tmp_path_factory.mktemp("whole"), "opd-multi", OPD_BUDGET, eval_every=0.1,
                        **SETTINGS)
    runner = Runner(config, progress=False)
    runner.method_cls = counting(steps)
    return runner.run(), len(steps)


def _kill_points(total_steps: int, n: int = 8, seed: int = 17) -> list[int]:
    import random

    return sorted(random.Random(seed).sample(range(1, total_steps), min(n, total_steps - 1)))


@pytest.mark.slow
@pytest.mark.parametrize("point", range(8))
def test_killed_at_a_random_step_resumes_to_the_same_record(point, whole_opd_multi, fast_profile, tmp_path):
    """opd-multi (experts, then distillation) killed after a random step k, any phase, with or without a
    checkpoint just written, resumes to the record of the uninterrupted run."""
    from methods.opd_multi import OPDMulti
    from tests.methods.support import OPD_RESUME as SETTINGS, OPD_RESUME_BUDGET as OPD_BUDGET, comparable, run_config

    whole, total = whole_opd_multi
    points = _kill_points(total)
    if point >= len(points):
        pytest.skip(f"the run has only {total} steps")
    kill_at = points[point]
    config = run_config(fast_profile, tmp_path, "opd-multi", OPD_BUDGET, eval_every=0.1, **SETTINGS)

    class DiesAtStep(OPDMulti):
        def run(self, ctx):
            done, seen = ctx.step_done, [0]

            def step_done(**stats):
                done(**stats)
                seen[0] += 1
                if seen[0] == kill_at:
                    raise Killed

            ctx.step_done = step_done
            super().run(ctx)

    runner = Runner(config, progress=False)
    runner.method_cls = DiesAtStep
    with pytest.raises(Killed):
        runner.run()
    if not checkpoint.folder(runner.dir).exists():
        assert not runner.dir.exists()  # killed before the first checkpoint: nothing to resume, start over
        resumed = Runner(config, progress=False).run()
    else:
        resumed = Runner(config, resume=True, progress=False).run()
    assert comparable(resumed) == comparable(whole)


@pytest.mark.parametrize("args, says", [
    (["--profile", "hf"], "the hf profile builds nothing"),
    (["--profile", "smoke", "--check"], "no shipped reference for profile smoke to check against"),
])
def test_prepare_refuses_what_it_cannot_do_before_any_work(args, says, tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache"))
    refused(cli.invoke(app, ["prepare", *args]), says)
    assert not (tmp_path / "cache").exists()
