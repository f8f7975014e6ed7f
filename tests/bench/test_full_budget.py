"""benchmarks/full_budget.py end to end on direct-smoke: its opd-multi arm (distillation's rules off) is
the default method's run, value for value, up to the step where the replayed KL rule says the default
stops, and the experts' held-out scores it reads are their own; a second call makes no run and prints
the same read-out; the whole-share arm reuses the joint GRPO runs and trains each expert for its whole
share; and the long-distill arm, at twice the budget, is the whole-share run step for step and then
distils on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "full_budget.py"
ARGS = ["--profile", "direct-smoke", "--seeds", "0", "--jobs", "2"]


def read_result(path: Path) -> dict:
    """The study's JSON, parsed strictly: JSON has no Infinity or NaN (an unbounded interval end is "-inf")."""
    def refuse(constant: str) -> None:
        raise AssertionError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def experts_from_checkpoint(run_dir: Path, record: dict) -> dict[str, float]:
    """Each expert's greedy accuracy on its own domain's held-out prompts, evaluated from the run's last
    checkpoint (taken after the experts were trained) apart from the run."""
    import torch

    from bench.accounting.ledger import Ledger
    from bench.evaluation import Evaluator
    from bench.policy import Policy
    from bench.run import checkpoint
    from bench.world.prepare import prepare
    from bench.world.profiles import PROFILES
    from tasks.suites import get_suite

    profile = PROFILES[record["profile"]]
    states = checkpoint.load(run_dir).context["policy_states"]
    model, tokenizer = prepare(profile, progress=False, teacher=False).load_student()
    suite = get_suite(record["suite"], record["difficulty"], profile.task_format)
    ledger = Ledger(run_dir.parent / "independent-eval.jsonl")
    out = {}
    for domain in record["domains"]:
        model.load_state_dict(states[f"expert:{domain}"]["model"])
        evaluator = Evaluator(suite, record["eval_size"], profile.eval_max_new_tokens, domains=[domain])
        with torch.no_grad():
            out[domain] = evaluator.evaluate(Policy(f"expert:{domain}", model, tokenizer, ledger=ledger,
                                                    trainable=False))["accuracy"]
    return out


# Twice the profile's budget, so that the KL rule has room to fire whatever the CPU's rounding: its
# replay stops distillation at step 16 on an AMD EPYC, past where the profile's 4e11 ends (15 steps).
STOP_BUDGET = "8e11"


def test_the_arm_is_the_default_run_up_to_the_replayed_stop(tmp_path):
    study = [sys.executable, str(SCRIPT), str(tmp_path), *ARGS, "--budget", STOP_BUDGET]
    run = subprocess.run(study, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    result = read_result(tmp_path / "full_budget-to-budget.json")
    stop = result["seeds"]["0"]["kl_rule_stop"]
    assert stop is not None and stop["kl_threshold"] > 0 and stop["patience"] >= 1
    # this world also has the accuracy rule, which the trace cannot replay: the default here is run
    # with the KL rule alone, as on the worked world
    assert stop["reward_rule"]

    default_runs = tmp_path / "default"
    default = subprocess.run(
        [sys.executable, "-m", "bench.cli", "run", "--method", "opd-multi", "--suite", "math_code", "--profile",
         "direct-smoke", "--seed", "0", "--budget", STOP_BUDGET, "--phase-executor", "sequential", "--set",
         "distill.use_reward_rule=false", "--runs", str(default_runs)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert default.returncode == 0, default.stderr[-3000:]
    run_id = "opd-multi__math_code-easy__direct-smoke__s0"
    d = json.loads((default_runs / run_id / "summary.json").read_text())
    arm = json.loads((tmp_path / "runs-to-budget" / run_id / "summary.json").read_text())
    # the default stopped by its KL rule, at the step and FLOPs the replay names...
    assert d["method_metrics"]["distill_stop_flops"] > 0
    assert sum(s["phase"] == "distill" for s in d["steps"]) == stop["distill_steps"]
    assert d["steps"][-1]["flops"] == stop["flops"]
    # ...and every step until then is the arm's, which went on to the budget
    assert d["steps"] == arm["steps"][: len(d["steps"])]
    assert len(arm["steps"]) > len(d["steps"]) and arm["flops"]["counted"] >= arm["budget_flops"]
    assert d["flops"]["counted"] < arm["budget_flops"]
    # the accuracy read at the stop lies between the arm's two evaluations around it
    before = max((p for p in arm["curve"] if p["flops"] <= stop["flops"]), key=lambda p: p["flops"])
    after = min((p for p in arm["curve"] if p["flops"] >= stop["flops"]), key=lambda p: p["flops"])
    assert min(before["accuracy"], after["accuracy"]) <= stop["accuracy"] <= max(before["accuracy"], after["accuracy"])

    assert set(result["seeds"]["0"]) >= {"grpo-joint", "opd-multi", "kl_rule_stop"}
    assert result["seeds"]["0"]["opd-multi"]["final_accuracy"] == arm["final_accuracy"]
    experts = result["seeds"]["0"]["expert_accuracy"]
    # what the run reported is each expert's own score: its checkpoint, evaluated here, gives the same
    assert experts == experts_from_checkpoint(tmp_path / "runs-to-budget" / run_id, arm)
    assert experts != {d: arm["base_domain_accuracy"][d] for d in experts}  # they learnt: not the base's
    assert (tmp_path / "full_budget-to-budget.png").stat().st_size > 10_000

    # the sweeps' progress went to stderr, so stdout is the read-out alone: a second call makes no run
    # and prints the same
    again = subprocess.run(study, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == run.stdout, again.stderr[-3000:]
    assert again.stderr.count("0 runs done, 1 already complete, 0 failed") == 2


def test_the_whole_share_arm_trains_each_expert_for_its_share_and_long_distill_extends_it(tmp_path):
    first = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *ARGS], cwd=ROOT, capture_output=True,
                           text=True, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--arm", "whole-share", *ARGS], cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    # joint GRPO's run is the first arm's, kept; the arm's own is made
    assert run.stderr.index("0 runs done, 1 already complete") < run.stderr.index("1 runs done, 0 already complete")
    joint = tmp_path / "runs" / "grpo-joint__math_code-easy__direct-smoke__s0" / "summary.json"
    made = joint.stat().st_mtime_ns
    arm = json.loads((tmp_path / "runs-whole-share" / "opd-multi__math_code-easy__direct-smoke__s0" / "summary.json")
                     .read_text())
    assert arm["method_config"]["expert_patience"] == 0 and arm["method_config"]["distill"]["steps"] == 1000000
    share = 0.9 * arm["budget_flops"] / 2
    for domain in ("math", "code"):
        spent = sum(row["flops"] for row in arm["ledger"]
                    if row["category"] == "counted" and row["phase"] == f"expert:{domain}")
        assert share <= spent < share + arm["max_step_flops"]
    assert any(s["phase"] == "distill" for s in arm["steps"]) and arm["flops"]["counted"] >= arm["budget_flops"]
    result = read_result(tmp_path / "full_budget-whole-share.json")
    assert result["arm"] == "whole-share" and set(result["seeds"]["0"]["expert_accuracy"]) == {"math", "code"}
    assert "opd-multi__math_code-easy__direct-smoke__s0" in (tmp_path / "runs-whole-share" / "sweep.log").read_text()

    # twice the budget, half the experts' fraction: the same experts, step for step, then distillation on
    long = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--arm", "long-distill", *ARGS], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert long.returncode == 0, long.stderr[-3000:]
    assert "1 runs done, 0 already complete" in long.stderr and joint.stat().st_mtime_ns == made
    extended = json.loads((tmp_path / "runs-long-distill" / "opd-multi__math_code-easy__direct-smoke__s0"
                           / "summary.json").read_text())
    assert extended["budget_flops"] == 2 * arm["budget_flops"] and extended["method_config"]["expert_fraction"] == 0.45
    assert extended["steps"][: len(arm["steps"])] == arm["steps"] and len(extended["steps"]) > len(arm["steps"])
    assert extended["flops"]["counted"] >= extended["budget_flops"]
    result = read_result(tmp_path / "full_budget-long-distill.json")
    seed = result["seeds"]["0"]
    assert {"arm": "whole-share", "equal_steps": len(arm["steps"]), "their_steps": len(arm["steps"])} \
        in seed["steps_shared"]
    assert result["claim_rows"] is None and result["opd_budget_flops"] == 2 * result["budget_flops"]
    # the FLOPs to each target, read per seed, are the curves' own, and distillation's are those past the experts
    cost = seed["distillation_cost"]
    experts_spent = sum(row["flops"] for row in extended["ledger"]
                        if row["category"] == "counted" and row["phase"].startswith("expert:"))
    assert cost["expert_flops"] == experts_spent
    for row in result["matched_accuracy"]:
        reached = row["seeds"]["0"]
        if reached["opd-multi"] is None:  # it would need unbounded FLOPs: the claim's rule says it fails
            assert row["verdict"].startswith("does not hold") and row["savings"] is None
        else:
            assert experts_spent < reached["opd-multi"] <= extended["flops"]["counted"]
            assert reached["distill_only"] == reached["opd-multi"] - experts_spent
            assert reached["savings"] == 1 - reached["opd-multi"] / reached["grpo-joint"]
    for at in cost["at"].values():
        if at is not None:
            assert 0 < at["distill_flops"] <= extended["flops"]["counted"] - experts_spent
    # (on direct-smoke the experts may gain nothing over the base, and then `at` is empty: the costs are
    # checked on a record whose answer is known in tests/reports/test_paired.py); the cost figure reads the JSON
    figure = tmp_path / "cost.png"
    drawn = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "full_budget_readout.py"), str(figure),
                            str(tmp_path / "full_budget-long-distill.json")], capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    assert figure.stat().st_size > 10_000


def test_one_folder_holds_two_suites_read_apart(tmp_path, monkeypatch):
    """One OUT_DIR holds both suites' runs (run ids name the suite): each suite's read-out reads its own
    records only, and the two read-outs do not share a file."""
    import argparse
    import importlib.util

    from tests.reports.factory import make_record

    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as when run as a script: its read-outs sit beside it
    spec = importlib.util.spec_from_file_location("full_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for suite in ("math_code", "four_domain"):
        for method, folder in (("grpo-joint", "runs"), ("opd-multi", "runs-long-distill")):
            record = make_record(method, suite=suite, seed=0)
            (tmp_path / folder / record["run_id"]).mkdir(parents=True)
            (tmp_path / folder / record["run_id"] / "summary.json").write_text(json.dumps(record))
    for suite in ("math_code", "four_domain"):
        args = argparse.Namespace(out=tmp_path, arm="long-distill", suite=suite, profile="tiny")
        assert sorted((r["method"], r["suite"]) for r in module.load(args)) == [("grpo-joint", suite),
                                                                               ("opd-multi", suite)]
    names = {suite: module.result_stem(argparse.Namespace(arm="long-distill", suite=suite))
             for suite in ("math_code", "four_domain")}
    assert names == {"math_code": "full_budget-long-distill", "four_domain": "full_budget-long-distill-four_domain"}
    parse = module.suite_list(["four_domain", "math_code"])
    assert parse("math_code, four_domain,math_code") == ["math_code", "four_domain"]
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"unknown suite\(s\) math; choose from four_domain, math_code"):
        parse("math_code,math")


def _sweep_options(command: list[str]) -> dict:
    """A `bench sweep` command's options, read as the CLI reads them: seeds as the list they name,
    `--set`s in any order, `--jobs` (how many at once, not which runs) left out."""
    from bench.cli.common import _seeds

    assert command[:2] == ["bench", "sweep"], command
    options: dict = {"--set": []}
    for key, value in zip(command[2::2], command[3::2]):
        if key == "--set":
            options["--set"].append(value)
        elif key != "--jobs":
            options[key] = _seeds(value) if key == "--seeds" else value
    options["--set"].sort()
    return options


def test_each_study_read_out_by_the_script_shows_the_sweeps_it_runs(monkeypatch):
    """For every study on the site whose read-out is this script, the commands the study's page shows
    are those the script runs for that read-out, option for option: what the script makes when a run
    is missing is what the page says makes the study's records."""
    import importlib.util
    import shlex

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("full_budget", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    manifests = [json.loads(p.read_text()) for p in sorted((ROOT / "leaderboard" / "studies").glob("*/study.json"))]
    read_here = [m for m in manifests if m["readout"].startswith("python benchmarks/full_budget.py ")]
    assert len(read_here) >= 3  # the claim-1 studies
    for manifest in read_here:
        args = module.arguments().parse_args(shlex.split(manifest["readout"])[2:])
        runs = [_sweep_options(["bench", *cmd]) for cmd in module.sweeps(args)]
        assert runs == [_sweep_options(shlex.split(cmd)) for cmd in manifest["sweep"]], manifest["title"]
