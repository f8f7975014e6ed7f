"""The example third-party methods install as their own packages and run through the real command
line: `bench list methods`, `bench run`, `bench check-adapter`.

- examples/opd-bench-rloo: RLOO, a policy-gradient method on `ctx.pg_step`;
- examples/opd-bench-seqkl: sequence-level KL distillation with a loss of its own on `ctx.update`,
  two files in all (a method with a new loss needs no other change anywhere).

The packages are built and installed offline (`pip --no-index --no-build-isolation`, the venv's
setuptools) into a temporary folder that only the `bench` subprocesses see on PYTHONPATH, so the
test neither needs the network nor touches the environment it runs in.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "opd-bench-rloo"
RLOO_FILE = EXAMPLE / "opd_bench_rloo" / "rloo.py"
SEQKL = REPO / "examples" / "opd-bench-seqkl"
SEQKL_FILE = SEQKL / "opd_bench_seqkl.py"
DIGITS = REPO / "examples" / "opd-bench-digits"
# name -> (source folder, distribution, entry-point group)
PLUGINS = {"rloo": (EXAMPLE, "opd_bench_rloo", "opd_bench.methods"),
           "seqkl": (SEQKL, "opd_bench_seqkl", "opd_bench.methods"),
           "digits": (DIGITS, "opd_bench_digits", "opd_bench.domains")}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A folder holding the installed examples (packages + dist-infos with their entry points)."""
    tmp = tmp_path_factory.mktemp("plugin")
    target = tmp / "site"
    for name, (folder, dist, group) in PLUGINS.items():
        # Build from a copy: setuptools writes build/ and *.egg-info next to the sources.
        source = shutil.copytree(folder, tmp / name, ignore=shutil.ignore_patterns("build", "*.egg-info"))
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
             "--no-cache-dir", "--disable-pip-version-check", "--target", str(target), str(source)],
            check=True, capture_output=True, text=True, timeout=300,
        )
        entry_points = next(target.glob(f"{dist}-*.dist-info")) / "entry_points.txt"
        assert f"[{group}]" in entry_points.read_text() and f"{name} = " in entry_points.read_text()
    return target


def bench(site: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python -m bench.cli ARGS` with the installed plugin importable, as a user would run it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)]), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "bench.cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_installed_plugins_are_listed(site):
    out = bench(site, "list", "methods")
    assert out.returncode == 0, out.stderr
    assert {"rloo", "seqkl"} <= set(out.stdout.split())
    assert "grpo" in out.stdout.split()  # the built-ins are still there


def test_an_installed_task_plugin_is_a_suite_that_runs(site, tmp_path):
    # a third-party domain (sorting digits) becomes a suite of its own, and joins math in its package's suite
    listed = bench(site, "list", "suites", "--json")
    assert listed.returncode == 0, listed.stderr
    suites = {(row["suite"], row["difficulty"]): row for row in json.loads(listed.stdout)}
    assert suites[("digits", "easy")]["domains"] == ["digits"]
    assert suites[("digits_math", "easy")]["domains"] == ["digits", "math"] and ("math_code", "easy") in suites
    out = bench(site, "run", "--method", "grpo-joint", "--suite", "digits_math", "--profile", "smoke", "--budget", "3e10",
                "--eval-size", "8", "--set", "prompts_per_step=4", "--set", "group_size=2", "--out", str(tmp_path),
                "--no-progress")
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "grpo-joint__digits_math-easy__smoke__s0" / "summary.json").read_text())
    assert summary["domains"] == ["digits", "math"] and set(summary["curve"][-1]["domain_accuracy"]) == {"digits", "math"}
    assert summary["flops"]["counted"] >= 3e10
    refused = bench(site, "run", "--method", "grpo", "--suite", "digits", "--profile", "hf", "--model", str(tmp_path))
    assert refused.returncode == 2 and "format of the digits domain" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_installed_plugin_runs_through_bench_run(site, tmp_path):
    out = bench(site, "run", "--method", "rloo", "--suite", "math_code", "--profile", "smoke", "--budget", "6e10",
                "--eval-size", "8", "--set", "prompts_per_step=8", "--runs", str(tmp_path), "--no-progress")
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "rloo__math_code-easy__smoke__s0" / "summary.json").read_text())
    assert summary["method"] == "rloo" and summary["profile"] == "smoke"
    assert summary["method_config"]["prompts_per_step"] == 8 and summary["method_config"]["samples"] == 4
    counted = {(r["phase"], r["kind"], r["model"]) for r in summary["ledger"] if r["category"] == "counted"}
    assert {("train", "rollout", "student"), ("train", "update", "student")} <= counted
    assert summary["flops"]["counted"] >= summary["budget_flops"] == 6e10
    curve = summary["curve"]
    assert len(curve) >= 2 and curve[0]["flops"] == 0.0
    assert curve[-1]["flops"] == pytest.approx(summary["flops"]["counted"])


def test_method_with_its_own_loss_runs_through_bench_run(site, tmp_path):
    out = bench(site, "run", "--method", "seqkl", "--suite", "math_code", "--profile", "smoke", "--budget", "6e10",
                "--eval-size", "8", "--set", "prompts_per_step=8", "--runs", str(tmp_path), "--no-progress")
    assert out.returncode == 0, out.stderr
    summary = json.loads((tmp_path / "seqkl__math_code-easy__smoke__s0" / "summary.json").read_text())
    assert summary["method"] == "seqkl" and summary["method_config"]["prompts_per_step"] == 8
    counted = {(r["phase"], r["kind"], r["model"]) for r in summary["ledger"] if r["category"] == "counted"}
    # its own loss went through the update engine: charged as the student's update, like any built-in's
    assert counted == {("distill", "rollout", "student"), ("distill", "score", "external"),
                       ("distill", "update", "student")}
    assert summary["flops"]["counted"] >= summary["budget_flops"] == 6e10
    steps = summary["steps"]
    assert steps and all({"loss", "grad_norm", "seq_reverse_kl", "reward"} <= set(s) for s in steps)


@pytest.mark.slow  # ~25 s of CPU each: a full smoke-budget run under the instrumented counter
@pytest.mark.parametrize("plugin", sorted(n for n, (_, _, group) in PLUGINS.items() if group == "opd_bench.methods"))
def test_installed_plugin_passes_check_adapter(site, plugin):
    out = bench(site, "check-adapter", plugin)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"PASS {plugin}" in out.stdout


def test_plugin_loads_from_its_file_and_validates_overrides():
    from bench.registry import get_method
    from bench.errors import RunError
    from bench.run.config import method_config

    cls = get_method(f"{RLOO_FILE}:RLOO")
    assert cls.name == "rloo"
    assert method_config(cls, (("samples", "8"), ("domains", "math"))).domains == ("math",)
    with pytest.raises(RunError, match="samples must be >= 2"):
        method_config(cls, (("samples", "1"),))


def test_leave_one_out_baseline():
    from bench.registry import get_method

    module = sys.modules[get_method(f"{RLOO_FILE}:RLOO").__module__]
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])  # two prompts, k = 4
    advantages = module.leave_one_out_advantages(rewards, 4)
    # Sample 0 of prompt 0: 1 - mean(0, 0, 1) = 2/3; an all-correct group gets no signal.
    assert advantages.tolist()[:4] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert advantages.tolist()[4:] == [0.0] * 4
    with pytest.raises(ValueError):
        module.leave_one_out_advantages(rewards, 3)


def _bench_imports(source: str) -> set[str]:
    """Modules of this project (bench, methods, tasks, reports) that `source` imports."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return {n for n in names if n.split(".")[0] in ("bench", "methods", "tasks", "reports")}


def test_sequence_kl_plugin_loads_from_its_file_and_validates_overrides():
    from bench.errors import RunError
    from bench.registry import get_method
    from bench.run.config import method_config

    cls = get_method(f"{SEQKL_FILE}:SeqKL")
    assert cls.name == "seqkl" and method_config(cls, (("samples", "8"),)).samples == 8
    with pytest.raises(RunError, match="samples >= 2"):
        method_config(cls, (("samples", "1"),))
    module = sys.modules[cls.__module__]
    teacher = torch.tensor([[0.0, -1.0, -1.0], [0.0, -2.0, -2.0]])
    student = torch.tensor([[0.0, -2.0, -3.0], [0.0, -2.0, -2.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1]])
    assert module.sequence_rewards(teacher, student, mask).tolist() == [1.5, 0.0]


def test_a_method_with_a_new_loss_is_two_files():
    built = ("build", "__pycache__")  # what an install or an import leaves behind
    files = sorted(p.name for p in SEQKL.iterdir()
                   if not p.name.startswith(".") and p.name not in built and not p.name.endswith(".egg-info"))
    assert files == ["opd_bench_seqkl.py", "pyproject.toml"]


def test_plugin_and_docs_example_use_only_the_public_api(tmp_path):
    import re

    from bench.registry import get_method

    for path in [*(EXAMPLE / "opd_bench_rloo").glob("*.py"), SEQKL_FILE]:
        assert _bench_imports(path.read_text()) <= {"bench.api"}, path
    # The minimal method in docs/plugins.md is a working plugin file as written.
    doc = (REPO / "docs" / "plugins.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    assert _bench_imports(snippet) == {"bench.api"}
    (tmp_path / "doc_rloo.py").write_text(snippet)
    cls = get_method(f"{tmp_path / 'doc_rloo.py'}:RLOO")
    assert cls.name == "rloo" and cls.Config().samples == 4
