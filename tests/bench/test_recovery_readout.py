"""benchmarks/recovery_readout.py on records whose forgetting is known by hand: which seeds measurably
forgot, the ratio over them and over every seed, the student's final accuracy on the domain, and the
one-line error on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.support import benchmark_module
from tests.reports.factory import make_record, write_runs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "recovery_readout.py"


def _recover(seed: int, lost: float, opd_flops: float | None, suite: str = "math_code", **kw) -> dict:
    """A recover record: the self-teacher at 60% on 300 prompts (two standard errors: 5.7 points)."""
    record = make_record("recover", suite=suite, seed=seed, **kw)
    record["recovery"] = {"domain": "math", "target": 0.5, "grpo_flops": 1e12, "opd_flops": opd_flops,
                          "check_size": 300, "teacher_accuracy": 0.6, "lost_accuracy": 0.6 - lost}
    return record


def test_only_seeds_that_measurably_forgot_decide(tmp_path):
    readout = benchmark_module("recovery_readout")
    # seeds 0-2 forgot 8, 10 and 6 points (measured); seeds 3-4 forgot 0.3 and 5 (under 5.7: not measured)
    records = [_recover(0, 0.08, None), _recover(1, 0.10, None), _recover(2, 0.06, 5e11),
               _recover(3, 0.003, 5e11), _recover(4, 0.05, 1e11)]
    assert [readout.measured(r) for r in records] == [True, True, True, False, False]
    assert readout.measured(make_record("recover", recovery={"domain": "math", "grpo_flops": 1.0,
                                                              "opd_flops": 1.0})) is None
    records[0]["final_domain_accuracy"] = {"math": 0.55, "code": 0.2}
    # self-OPD never reached the target on seed 0: its checks from half its FLOPs on are 0.57 and 0.53
    records[0]["recovery"]["checks"] = {"grpo": [[0.0, 0.52], [1e11, 0.6]],
                                        "opd": [[0.0, 0.52], [4e10, 0.56], [5e10, 0.57], [1e11, 0.53]]}
    records[2]["recovery"]["checks"] = {"grpo": [[0.0, 0.54], [1e12, 0.6]], "opd": [[0.0, 0.54], [5e11, 0.58]]}
    records[2]["final_domain_accuracy"]["math"] = 0.6
    del records[3]["final_domain_accuracy"]["math"]
    write_runs(records, tmp_path)
    figure = tmp_path / "recovery.png"
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--figure", str(figure)], capture_output=True,
                         text=True, check=True, cwd=ROOT).stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {figure}" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")
            and line.split("|")[1].strip().isdigit()}
    assert "| 8.0 (5.7) | yes |" in rows["0"] and rows["0"].rstrip().endswith("| 57.0% | 55.0% | 55.0% |")
    assert rows["2"].rstrip().endswith("| 58.0% | - | 60.0% |")  # it reached the target: no late checks
    assert "| 0.3 (5.7) | no |" in rows["3"] and "| 2.00x |" in rows["3"] and rows["3"].rstrip().endswith("| - | - | - |")
    assert "not within the cap | 0.00x |" in rows["1"]
    # the measured seeds' ratios are 0, 0 and 2; an IQM of three runs trims none: 0.67, its interval spanning 1
    measured = next(line for line in out.splitlines() if line.startswith("- seeds that measurably forgot"))
    assert "3 of 5" in measured and "0.67x [0.00x, 2.00x] (iqm of 3)" in measured and "inconclusive" in measured
    every = next(line for line in out.splitlines() if line.startswith("- every seed"))
    assert "5 of 5" in every and "(iqm of 5)" in every
    # only the two seeds where self-OPD failed: 0x on both, wholly below 1; both forgot, so the same
    every, forgot = readout.reduction_estimates(records[:2])
    assert (every.value, every.low, every.high) == (0.0, 0.0, 0.0) and forgot == every


def test_the_scatter_draws_each_seed_with_a_ratio_against_what_it_forgot(tmp_path):
    readout = benchmark_module("recovery_readout")
    # seed 0: self-OPD failed (0x), seed 1: GRPO failed (inf), seed 2: neither needed a step (None): none drawn
    records = [_recover(0, 0.08, None), _recover(1, 0.10, 1e12), _recover(2, 0.0, 5e11), _recover(3, 0.06, 5e11),
               _recover(4, 0.05, 1e11)]
    records[1]["recovery"]["grpo_flops"] = None
    records[2]["recovery"].update(grpo_flops=0.0, opd_flops=0.0)
    other = _recover(0, 0.07, 2e12, suite="four_domain")
    points = readout.scatter_points(records + [other])
    assert sorted(points) == [("tiny", "four_domain", "easy", 1.0, 3e14), ("tiny", "math_code", "easy", 1.0, 3e14)]
    shown, n_seeds = points[("tiny", "math_code", "easy", 1.0, 3e14)]
    assert n_seeds == 5 and [(round(lost, 6), ratio, known) for lost, ratio, known in shown] == [
        (6.0, 2.0, True), (5.0, 10.0, False)]
    assert points[("tiny", "four_domain", "easy", 1.0, 3e14)][0] == [(pytest.approx(7.0), 0.5, True)]
    write_runs(records + [other], tmp_path / "runs")
    figure = tmp_path / "scatter.png"
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "runs"), "--scatter", str(figure)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {figure}" in out


def test_studies_whose_runs_share_names_are_read_together_and_a_run_in_two_folders_counts_once(tmp_path):
    readout = benchmark_module("recovery_readout")
    # the same seeds at forget_scale 1 (2e13) and 3 (3e13): `bench sweep --set` gives them the same run ids
    short = [_recover(seed, 0.02, 5e11) for seed in (0, 1)]
    long = [_recover(seed, 0.12, 2.5e11, budget_flops=3e13) for seed in (0, 1)]
    for r in long:
        r["method_config"] = {**r["method_config"], "forget_scale": 3}
    assert [r["run_id"] for r in short] == [r["run_id"] for r in long]
    write_runs(short, tmp_path / "short")
    write_runs(long, tmp_path / "long")
    write_runs(short[:1], tmp_path / "again")  # seed 0 at forget_scale 1 once more: left out
    records, repeated = readout.load([tmp_path / "short", tmp_path / "long", tmp_path / "again"])
    assert len(records) == 4 and repeated == 1
    assert sorted(readout.by_protocol(records)) == [("tiny", "math_code", "easy", 1.0, 3e14),
                                                    ("tiny", "math_code", "easy", 3.0, 3e13)]
    proc = subprocess.run([sys.executable, str(SCRIPT), *(str(tmp_path / d) for d in ("short", "long", "again")),
                           "--suite", "math_code"], capture_output=True, text=True, check=True, cwd=ROOT)
    heads = [line for line in proc.stdout.splitlines() if line.startswith("## ")]
    assert heads == ["## math_code · easy · tiny · forget_scale 1 · 3e+14 FLOPs",
                     "## math_code · easy · tiny · forget_scale 3 · 3e+13 FLOPs"]
    # forget_scale 3: 12 points lost on both seeds (measured), each at 4.00x; forget_scale 1: 2 points, none
    assert "- seeds that measurably forgot: 2 of 2; GRPO / self-OPD 4.00x" in proc.stdout
    assert "- seeds that measurably forgot: 0 of 2" in proc.stdout
    assert "1 record(s) left out" in proc.stderr
    other = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "short"), "--suite", "four_domain"],
                           capture_output=True, text=True, cwd=ROOT)
    assert other.returncode == 2 and "of suite four_domain" in other.stderr.strip().splitlines()[-1]


def test_bad_input_gets_one_line_and_exit_2(tmp_path):
    for args in ([str(tmp_path / "missing")], [str(tmp_path)]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
        assert "error:" in proc.stderr.strip().splitlines()[-1]


def test_the_recovery_starts_at_the_last_evaluation_before_either_arm_spent_a_flop():
    readout = benchmark_module("recovery_readout")
    record = _recover(0, 0.08, None)
    record["curve"] = [{"flops": 0.0, "accuracy": 0.3, "phase_flops": {}},
                       {"flops": 4e12, "accuracy": 0.4, "phase_flops": {"stage:math": 4e12}},
                       {"flops": 5e12, "accuracy": 0.3, "phase_flops": {"stage:math": 4e12, "stage:code": 1e12}},
                       {"flops": 6e12, "accuracy": 0.3, "phase_flops": {"stage:math": 4e12, "stage:code": 1e12,
                                                                         "recover:grpo": 1e12}},
                       {"flops": 7e12, "accuracy": 0.35, "phase_flops": {"stage:math": 4e12, "stage:code": 1e12,
                                                                          "recover:grpo": 1e12, "recover:opd": 1e12}}]
    assert readout.recovery_start(record) == 5e12
