"""benchmarks/full_budget_readout.py's distillation cost on a record whose answer is known by hand: the
FLOPs past the experts' at which the student takes each share of its experts' gain, and the curve of
that share that the cost figure draws."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.support import benchmark_module

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "full_budget_readout.py"


def _record(accuracy_at: dict[float, float]) -> dict:
    """Experts spend 6e11 + 4e11 counted FLOPs, then distillation; the student starts at 20%."""
    ledger = [{"category": "counted", "phase": "expert:math", "flops": 6e11},
              {"category": "counted", "phase": "expert:code", "flops": 4e11},
              {"category": "eval", "phase": "eval", "flops": 9e11},  # not the experts'
              {"category": "counted", "phase": "distill", "flops": 5e11}]
    curve = [{"flops": f, "accuracy": a} for f, a in accuracy_at.items()]
    return {"curve": curve, "ledger": ledger, "final_accuracy": curve[-1]["accuracy"]}


def test_the_cost_of_each_share_of_the_gain_is_read_where_the_curve_takes_it():
    readout = benchmark_module("full_budget_readout")
    # the experts' mean is 40%, so the gain is 20 points: half is 30%, three quarters 35%, 90% 38%
    record = _record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.3, 1.2e12: 0.35, 1.5e12: 0.38})
    cost = readout.distillation_cost(record, {"math": 0.5, "code": 0.3})
    assert cost["expert_flops"] == 1e12 and cost["base"] == 0.2 and cost["experts_mean"] == pytest.approx(0.4)
    assert cost["final_gain_share"] == pytest.approx(0.9)
    for p, distilled in (("0.5", 1e11), ("0.75", 2e11), ("0.9", 5e11)):
        assert cost["at"][p]["distill_flops"] == pytest.approx(distilled)
        assert cost["at"][p]["share_of_expert_flops"] == pytest.approx(distilled / 1e12)
    # from distillation's start on: (distillation FLOPs / experts' FLOPs, share of the gain)
    assert [v for point in cost["curve"] for v in point] == pytest.approx([0, 0, 0.1, 0.5, 0.2, 0.75, 0.5, 0.9])


def test_a_share_between_evaluations_lies_between_them_and_one_never_taken_is_none():
    readout = benchmark_module("full_budget_readout")
    record = _record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.28, 1.2e12: 0.32, 1.4e12: 0.34})
    cost = readout.distillation_cost(record, {"math": 0.5, "code": 0.3})
    assert 0.1 < cost["at"]["0.5"]["share_of_expert_flops"] < 0.2
    assert cost["at"]["0.75"] is None and cost["at"]["0.9"] is None
    assert cost["final_gain_share"] == pytest.approx(0.7)
    # experts no better than the base: no gain to take, so no cost and no curve
    flat = readout.distillation_cost(record, {"math": 0.2, "code": 0.2})
    assert flat["at"] == {} and flat["curve"] is None and flat["final_gain_share"] is None


def test_the_cost_figure_draws_each_study_and_keeps_what_it_drew_on_bad_input(tmp_path):
    readout = benchmark_module("full_budget_readout")
    cost = readout.distillation_cost(_record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.3, 1.5e12: 0.38}),
                                     {"math": 0.5, "code": 0.3})
    result = tmp_path / "full_budget-long-distill.json"
    result.write_text(json.dumps({"suite": "math_code", "arm": "long-distill",
                                  "seeds": {"0": {"distillation_cost": cost}}}))
    figure = tmp_path / "cost.png"
    drawn = subprocess.run([sys.executable, str(SCRIPT), str(figure), str(result)], capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    before = figure.read_bytes()
    assert len(before) > 10_000
    not_a_result = tmp_path / "records.json"
    not_a_result.write_text("[1, 2]")
    for bad_input in (tmp_path / "missing.json", tmp_path, not_a_result):
        bad = subprocess.run([sys.executable, str(SCRIPT), str(figure), str(result), str(bad_input)],
                             capture_output=True, text=True)
        last = bad.stderr.strip().splitlines()[-1]
        assert bad.returncode == 2 and "error:" in last and str(bad_input) in last
    assert figure.read_bytes() == before
