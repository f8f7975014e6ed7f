"""benchmarks/distill_uptake.py end to end, briefly, on the direct world: its per-prompt answers are those
the run's own held-out evaluations scored, and a second call reads what the first wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "distill_uptake.py"
ARGS = ["--profile", "direct", "--steps", "3", "--every", "2", "--expert-flops", "5e10", "--eval-size", "50",
        "--seeds", "0"]


def test_the_answers_are_the_runs_evaluations_and_a_rerun_reads_them(tmp_path):
    run = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *ARGS], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((tmp_path / "seed0.json").read_text())
    prompts = record["prompts"]
    assert len(prompts) == 50 and record["schedule"] == record["steps"] == 3 and len(record["reverse_kl"]) == 3
    assert [p["steps"] for p in record["curve"]] == [0, 2, 3]
    # the run evaluated the base at the experts' end and the final student at the end: the same
    # greedy answers, scored, as those the script reads again
    assert record["curve"][0]["accuracy"] == sum(p["base"] for p in prompts) / 50
    assert record["curve"][-1]["accuracy"] == sum(p["student"] for p in prompts) / 50
    # and each evaluation's saved student, answering again, is right on as many prompts as it scored
    for point in record["curve"]:
        assert len(point["right"]) == 50 and point["right"].count("1") / 50 == point["accuracy"]
    assert record["curve"][0]["right"] == "".join("1" if p["base"] else "0" for p in prompts)
    assert record["curve"][-1]["right"] == "".join("1" if p["student"] else "0" for p in prompts)
    # the same answer text scores the same
    assert all(p["base"] == p["expert"] for p in prompts if p["base_is_expert"])
    assert all(p["student"] == p["expert"] for p in prompts if p["student_is_expert"])
    assert 5e10 <= record["expert_flops"] < 6e10 and record["distill_flops"] > 0
    assert (tmp_path / "uptake.png").stat().st_size > 10_000
    assert run.stdout.startswith("seed 0: base ")

    again = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *ARGS], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == run.stdout, again.stderr[-3000:]
    other = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *ARGS[:2], "--steps", "4", *ARGS[4:]],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert other.returncode != 0 and "choose another OUT_DIR" in other.stderr
