"""benchmarks/forgetting_scale.py: the protocol's stage on the domain, then the other domain's stage
checked at each scale, each check the lost student `recover` at that forget_scale starts from; the
rule that picks a scale; bad input."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.bench.support import BENCHMARKS, benchmark_module
from tests.methods.support import SMALL_GRPO, grouped, run_method

scale = benchmark_module("forgetting_scale")

BUDGET = 6e10
COMMON = {**grouped("grpo", SMALL_GRPO, lr="0.0005"), "domain": "code", "check_size": 16}
PLUGIN = f"{BENCHMARKS / 'forgetting_scale.py'}:ForgettingScale"


def test_each_check_is_the_lost_student_recover_starts_from_at_that_scale(fast_profile, tmp_path):
    record = run_method(fast_profile, tmp_path / "scales", PLUGIN, scale.budget(BUDGET, (1.0, 2.0)),
                        protocol_budget=BUDGET, scales="2,1", **COMMON)
    assert list(record["method_config"]["scales"]) == [1.0, 2.0]
    quick = {**COMMON, "target": 1e-9}  # both arms reach it at once
    for factor, at in ((1.0, "1"), (2.0, "2")):
        # the budget that keeps the domain's stage where it is: 1 + (scale - 1) x stage_fraction / 2
        protocol = run_method(fast_profile, tmp_path / f"recover{at}", "recover", BUDGET * (1 + (factor - 1) / 4),
                              forget_scale=factor, **quick)
        assert record["method_metrics"][f"lost@{at}"] == protocol["recovery"]["lost_accuracy"]
        assert record["method_metrics"]["teacher"] == protocol["recovery"]["teacher_accuracy"]
        stage = sum(r["flops"] for r in protocol["ledger"] if r["phase"] == "stage:math" and r["category"] == "counted")
        assert record["method_metrics"][f"flops@{at}"] == stage >= factor * BUDGET / 4
    # no arm ran: the protocol's two stages only
    assert {r["phase"] for r in record["ledger"] if r["category"] == "counted"} == {"stage:code", "stage:math"}
    table = scale.rows([record])
    assert [r["scale"] for r in table] == [1.0, 2.0]
    for row in table:
        assert row["forgot"] == pytest.approx(row["teacher"] - row["lost"])
        assert row["measurable"] == (row["forgot"] > 0 and row["forgot"] >= row["two_ses"])


def test_needs_a_suite_of_two_domains(fast_profile, tmp_path):
    from bench.errors import RunError

    with pytest.raises(RunError, match="two domains"):  # a plugin's exception comes wrapped
        run_method(fast_profile, tmp_path, PLUGIN, BUDGET, domain="logic")


def test_the_rule_takes_the_smallest_scale_where_enough_seeds_forgot():
    def row(seed, s, forgot):
        return {"seed": seed, "scale": s, "measurable": forgot}

    table = [row(0, 1.0, False), row(1, 1.0, True), row(0, 2.0, True), row(1, 2.0, False),
             row(0, 3.0, True), row(1, 3.0, True), row(0, 4.0, True), row(1, 4.0, True)]
    assert scale.choose(table, 2) == {"counts": {1.0: 1, 2.0: 1, 3.0: 2, 4.0: 2}, "need": 2, "chosen": 3.0,
                                      "met": True}
    assert scale.choose(table, 1)["chosen"] == 1.0
    never = scale.choose([row(0, 1.0, False), row(0, 2.0, False)], 1)
    assert never["chosen"] == 2.0 and not never["met"]
    # the claim 4 read-outs' criterion: two standard errors of a check at the self-teacher's accuracy
    checked = {"seed": 0, "method_config": {"check_size": 300, "scales": [1.0, 2.0]},
               "method_metrics": {"teacher": 0.6, "lost@1": 0.55, "flops@1": 1.0, "lost@2": 0.5, "flops@2": 2.0}}
    first, second = scale.rows([checked])
    assert first["two_ses"] == second["two_ses"] == pytest.approx(0.0566, abs=1e-4)
    assert (first["measurable"], second["measurable"]) == (False, True)
    nothing = {**checked, "method_metrics": {**checked["method_metrics"], "teacher": 0.0, "lost@1": 0.0}}
    assert not scale.rows([nothing])[0]["measurable"]  # a check at 0% has no error, and nothing was lost


@pytest.mark.parametrize("bad", [["--seeds", "x"], ["--scales", "0"], ["--need", "7"], ["--suite", "maths"],
                                 ["--profile", "tinny"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path, bad):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "forgetting_scale.py"), str(tmp_path / "out"), *bad],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert not (tmp_path / "out" / "runs").exists()


def test_config_rejects_bad_scales():
    with pytest.raises(ValueError):
        scale.ForgettingScaleConfig(scales=(0.0,))
    assert scale.ForgettingScaleConfig(scales=("2", "1")).scales == (1.0, 2.0)
