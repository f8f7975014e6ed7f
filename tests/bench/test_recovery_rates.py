"""benchmarks/recovery_rates.py: the recovery protocol's first half as `recover` runs it, then every arm at
every rate from the same lost student to its cap; the rule that picks a rate; bad input."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from tests.bench.support import BENCHMARKS, benchmark_module
from tests.methods.support import SMALL_DISTILL, SMALL_GRPO, grouped, phase_flops, run_method

rates = benchmark_module("recovery_rates")

BUDGET = 6e10
COMMON = {**grouped("grpo", SMALL_GRPO, lr="0.0005"), **SMALL_DISTILL, "domain": "code", "check_size": 16}
PLUGIN = f"{BENCHMARKS / 'recovery_rates.py'}:RecoveryRates"


def _stage_rows(record: dict) -> list[tuple]:
    return [(r["phase"], r["kind"], r["model"], r["category"], r["flops"], r["tokens"], r["calls"])
            for r in record["ledger"] if r["phase"].startswith("stage:")]


def test_every_arm_and_rate_runs_to_its_cap_from_the_protocols_lost_student(fast_profile, tmp_path):
    grpo_lrs, distill_lrs = (2.5e-4, 5e-4), (5e-4, 1e-3)
    record = run_method(fast_profile, tmp_path / "rates", PLUGIN, rates.budget(grpo_lrs, distill_lrs, BUDGET),
                        protocol_budget=BUDGET, check_every=2, grpo_lrs="2.5e-4,5e-4", distill_lrs="5e-4,1e-3",
                        **COMMON)
    protocol = run_method(fast_profile, tmp_path / "protocol", "recover", BUDGET, **COMMON)
    # The first half is the protocol's own, row for row, so every arm starts from its lost student.
    assert _stage_rows(record) and _stage_rows(record) == _stage_rows(protocol)
    checks = rates.checks_of(record)
    phases = {rates.arm_phase("grpo", lr) for lr in grpo_lrs} | {rates.arm_phase("opd", lr) for lr in distill_lrs}
    assert set(checks) == phases
    assert {c[0] for c in checks.values()} == {(0.0, protocol["recovery"]["lost_accuracy"])}
    cap = 0.25 * BUDGET
    for phase, arm_checks in checks.items():
        flops = [f for f, _ in arm_checks]
        assert flops == sorted(set(flops)) and len(flops) >= 3
        assert phase_flops(record, phase) >= cap  # never cut short by the run's budget
        models = {r["model"] for r in record["ledger"] if r["phase"] == phase and r["kind"] == "update"}
        assert models == {phase}  # each arm and rate trains a copy of its own
        if "opd@" in phase:
            assert phase_flops(record, phase, kind="score", model="self:code") > 0
    assert list(record["method_config"]["grpo_lrs"]) == list(grpo_lrs)
    assert list(record["method_config"]["distill_lrs"]) == list(distill_lrs)
    # the study finds a seed's run by what `bench run` writes first, so a killed one is resumed
    assert rates.seed_run(tmp_path / "rates", 0).name == record["run_id"]
    assert rates.seed_run(tmp_path / "rates", 1) is None
    rows = rates.arm_rows([record])
    assert len(rows) == 4 and all(r["to_cap"] for r in rows)
    for row in rows:
        later = [a for _, a in checks[rates.arm_phase(row["arm"], row["lr"])][1:]]
        assert row["mean"] == pytest.approx(sum(later) / len(later)) and row["best"] == max(later)


def test_a_killed_run_resumes_to_the_record_of_a_whole_one(fast_profile, tmp_path):
    """Its config holds tuples (the rates), which JSON reads back as lists: resuming still matches them."""
    from bench.errors import RunError
    from bench.run.runner import Runner
    from tests.methods.support import Killed, comparable, counting, run_config

    config = run_config(fast_profile, tmp_path, PLUGIN, rates.budget((5e-4,), (5e-4, 1e-3), BUDGET),
                        eval_every=0.05, protocol_budget=BUDGET, check_every=2, grpo_lrs="5e-4",
                        distill_lrs="5e-4,1e-3", **COMMON)
    runs = []
    for name, kill, resume in (("whole", False, False), (None, True, False), (None, False, True)):
        runner = Runner(dataclasses.replace(config, run_name=name) if name else config, resume=resume,
                        progress=False)
        # killed inside the second arm of three after it checkpointed (milestones every 5% of the budget)
        killed_in = rates.arm_phase("opd", 5e-4)
        runner.method_cls = counting([], runner.dir if kill else None, base=rates.RecoveryRates, phase=killed_in)
        if kill:
            with pytest.raises(RunError, match=Killed.__name__):  # a plugin's exception comes wrapped
                runner.run()
        else:
            runs.append(runner.run())
    whole, resumed = runs
    assert comparable(resumed) == comparable(whole)
    assert rates.checks_of(resumed) == rates.checks_of(whole)
    # run once more, the complete run is known for the same configuration and kept as it is
    again = Runner(config, progress=False)
    assert again.run()["run_id"] == resumed["run_id"] and again.already_complete


def _rows(arm: str, means: dict[float, list[float]]) -> list[dict]:
    return [{"seed": s, "arm": arm, "lr": lr, "mean": m} for lr, ms in means.items() for s, m in enumerate(ms)]


def test_the_rule_moves_a_default_only_by_a_point_or_more():
    rows = _rows("grpo", {1.25e-4: [0.60, 0.62], 2.5e-4: [0.60, 0.61], 5e-4: [0.61, 0.615]}) + _rows(
        "opd", {2.5e-4: [0.62, 0.64], 5e-4: [0.60, 0.61], 1e-3: [0.55, 0.50]})
    chosen = rates.choose(rows, {"grpo": 2.5e-4, "opd": 5e-4})
    # GRPO: the best (61.25% at 5e-4) is 0.75 points above the default's 60.5%: the default stays.
    assert chosen["grpo"]["best"] == 5e-4 and chosen["grpo"]["chosen"] == 2.5e-4 and chosen["grpo"]["at_edge"]
    assert chosen["grpo"]["means"][2.5e-4] == pytest.approx(0.605)
    # self-OPD: 63% at 2.5e-4 against 60.5% at the default: it moves, and the best is at the sweep's edge.
    assert chosen["opd"]["chosen"] == 2.5e-4 and chosen["opd"]["at_edge"]
    middle = rates.choose(_rows("opd", {2.5e-4: [0.5], 5e-4: [0.6], 1e-3: [0.52]}), {"opd": 1e-3})
    assert middle["opd"]["chosen"] == 5e-4 and not middle["opd"]["at_edge"]


@pytest.mark.parametrize("bad", [["--seeds", "x"], ["--distill-lrs", "0"], ["--check-every", "0"],
                                 ["--profile", "tinny"]])
def test_bad_input_is_one_line_and_exit_2(tmp_path, bad):
    done = subprocess.run([sys.executable, str(BENCHMARKS / "recovery_rates.py"), str(tmp_path / "out"), *bad],
                          capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert not (tmp_path / "out" / "runs").exists()


def test_the_rule_holds_each_arm_against_its_worlds_rate():
    assert rates.world_rates("tiny") == {"grpo": 2.5e-4, "opd": 5e-4}
    assert rates.world_rates("direct") == {"grpo": 5e-4, "opd": 5e-4}


def test_config_rejects_bad_rates():
    with pytest.raises(ValueError):
        rates.RecoveryRatesConfig(distill_lrs=(0.0,))
    assert rates.RecoveryRatesConfig(grpo_lrs=("1e-4", "2e-4")).grpo_lrs == (1e-4, 2e-4)
