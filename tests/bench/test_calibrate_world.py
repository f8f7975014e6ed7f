"""benchmarks/calibrate_world.py end to end on the smoke world: every single-method run it plans
finishes, and each criterion it writes is what the runs' own records say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.world.regime import _calibration_rows
from tests.bench.support import benchmark_module

ROOT = Path(__file__).resolve().parents[2]
calibrate_world = benchmark_module("calibrate_world")


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    out = tmp_path_factory.mktemp("calibration")
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "calibrate_world.py"), "--profile", "smoke",
                    "--expert-budget", "4e10", "--opd-budget", "2e10", "--eval-size", "16", "--jobs", "1",
                    "--mults", "1", "--runs", str(out / "runs"), "--out", str(out / "cal.json")],
                   check=True, cwd=ROOT, capture_output=True, text=True, timeout=900)
    return json.loads((out / "cal.json").read_text()), out / "runs"


def record(runs: Path, name: str) -> dict:
    return json.loads((runs / name / "summary.json").read_text())


def test_every_criterion_is_measured_from_the_runs(calibration):
    result, runs = calibration
    c = result["criteria"]
    domains = c["domains"]
    assert domains == ["code", "graphs", "math", "strings"] and result["lr_mults"] == [1.0] and result["joint_run"]
    for a in domains:
        expert = record(runs, f"grpo-{a}-x1")
        assert expert["method"] == "grpo" and expert["suite"] == "four_domain"
        for b in domains:  # the transfer matrix: the expert on every domain
            assert c["transfer"][a][b] == pytest.approx(
                expert["final_domain_accuracy"][b] - expert["base_domain_accuracy"][b])
        shares = [s["zero_adv_share"] for s in expert["steps"]]
        assert c["zero_adv_share"][a] == pytest.approx(sum(shares) / len(shares))
        opd = record(runs, f"opd-{a}-x1")  # distilled from that expert's final folder
        assert opd["method"] == "opd-external" and c["informative_tokens"][a] == opd["steps"][0]["informative_tokens"]
        assert set(c["plateau"][a]) == {"grpox1", "opdx1"}
        # the GRPO ceiling and the plateau read the expert's own domain, not the four-domain mean
        assert c["expert_ceiling"][a] == max(p["domain_accuracy"][a] for p in expert["curve"])
        assert c["plateau"][a]["grpox1"]["best"] == c["expert_ceiling"][a]
    joint = record(runs, "grpo-joint")
    assert c["joint_vs_expert"] == pytest.approx(
        {d: joint["final_domain_accuracy"][d] - c["expert_accuracy"][d] for d in domains})
    assert 0 < c["rollout_share"] < 1 and 0 < c["completion_share"] <= 1


def test_the_regime_table_reads_it(calibration):
    rows = _calibration_rows(calibration[0]["criteria"])
    names = {r["criterion"] for r in rows}
    assert {"completion share of update tokens", "GRPO groups with zero advantage (expert training)"} <= names
    assert all(r["met"] in (True, False, None) for r in rows)


def test_the_sites_regime_tables_load_no_model_and_write_nothing(monkeypatch):
    """`bench report` reads the shipped worlds' files: it never loads (so never hashes, nor marks) a model."""
    from bench.world import prepare, reference
    from bench.world.regime import shipped_worlds

    def refuse(*args, **kwargs):
        raise AssertionError("a report loaded a model")

    monkeypatch.setattr(prepare, "load_model", refuse)
    before = {p: p.read_bytes() for p in sorted(reference.ROOT.rglob("*")) if p.is_file()}
    worlds = shipped_worlds()
    assert {"tiny", "direct"} <= {w["profile"] for w in worlds}
    assert {p: p.read_bytes() for p in sorted(reference.ROOT.rglob("*")) if p.is_file()} == before
    assert not list(reference.ROOT.parent.glob("reference/*.lock"))


def test_the_stopping_rule_fires_on_its_patience_th_step_in_a_row_below_the_threshold():
    kls = [0.1, 0.01, 0.01, 0.2, 0.01, 0.01, 0.01, 0.01]
    assert calibrate_world.fire_step(kls, 0.05, 3) == 7
    assert calibrate_world.fire_step(kls, 0.05, 2) == 3
    assert calibrate_world.fire_step(kls, 0.005, 1) is None


def test_the_stopping_threshold_is_the_largest_that_fires_no_earlier_than_each_plateau(calibration):
    """Replayed from the OPD runs' own traces: the chosen threshold fires at or after every domain's
    plateau (or never), and every larger one of the grid fires before some domain's plateau."""
    result, runs = calibration
    rule = result["criteria"]["stop_rule"]
    kls = {d: [s["reverse_kl"] for s in record(runs, f"opd-{d}-x1")["steps"]] for d in result["criteria"]["domains"]}
    plateaus = {d: result["criteria"]["plateau"][d]["opdx1"]["steps"] for d in kls}
    assert rule["plateau_steps"] == plateaus and rule["patience"] == 3

    def late(threshold):
        fires = {d: calibrate_world.fire_step(k, threshold, 3) for d, k in kls.items()}
        return all(f is None or f >= plateaus[d] for d, f in fires.items())

    chosen = rule["threshold"]
    larger = [t for t in rule["grid"] if chosen is None or t > chosen]
    assert chosen is None or late(chosen)
    assert not any(late(t) for t in larger)


def test_the_accuracy_rule_is_replayed_against_each_experts_last_rewards(calibration):
    result, runs = calibration
    rule = result["criteria"]["stop_rule"]["reward_rule"]
    plateaus = result["criteria"]["stop_rule"]["plateau_steps"]
    for d, fired in rule["fires"].items():
        last = [s["reward"] for s in record(runs, f"grpo-{d}-x1")["steps"]][-3:]
        assert rule["targets"][d] == pytest.approx(sum(last) / len(last))
        student = [s["reward"] for s in record(runs, f"opd-{d}-x1")["steps"]]
        pooled = [sum(student[i - 3:i]) / 3 for i in range(3, len(student) + 1)]
        hit = next((i + 3 for i, r in enumerate(pooled) if r >= rule["targets"][d]), None)
        assert fired == hit
    assert rule["kept"] == all(f is None or f >= plateaus[d] for d, f in rule["fires"].items())
