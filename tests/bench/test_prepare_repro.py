"""A prepared base is the same bytes in any process and at any thread count, and its recipe is pinned.

The smoke base (the tiny world's tasks and student, a 30-step warm-up) is built in two fresh
processes, one with torch at one thread and one at two, and must have the same weights hash. The
hash is also held against the one recorded for this CPU (bench/reference/smoke-digest.json holds
one per CPU signature this project's CI has run on): a change to the code that builds a base that
changes its bytes fails here until the world version is bumped and the digests recorded again
(docs/world.md, Reproducibility). Kernels differ by processor, so on a CPU with no recorded digest
that check skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.world.profiles import PROFILES
from bench.world.reference import ROOT, cpu_signature

BUILD = """
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from bench.world.prepare import prepare
from bench.world.profiles import PROFILES
prepared = prepare(PROFILES["smoke"], progress=False, teacher=False)
print(json.dumps({"base": prepared.model_hashes()["base"]}))
"""


def _build(cache: Path, threads: int) -> str:
    env = {**os.environ, "OPD_BENCH_CACHE": str(cache), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", BUILD, str(threads)], capture_output=True, text=True, env=env,
                         timeout=900, check=True, cwd=Path(__file__).resolve().parents[2])
    return json.loads(out.stdout.strip().splitlines()[-1])["base"]


@pytest.mark.slow
def test_the_smoke_base_is_identical_across_processes_and_thread_counts(tmp_path):
    one, two = _build(tmp_path / "a", 1), _build(tmp_path / "b", 2)
    assert one == two
    recorded = json.loads((ROOT / "smoke-digest.json").read_text())
    assert recorded["world_version"] == PROFILES["smoke"].world_version, \
        "the world version changed: record the smoke base's digest again (python -m bench.world.prepare --smoke-digest)"
    if cpu_signature() not in recorded["base"]:
        pytest.skip(f"no digest recorded for this CPU ({cpu_signature()}; recorded: {', '.join(recorded['base'])}): "
                    f"python -m bench.world.prepare --smoke-digest records it")
    assert one == recorded["base"][cpu_signature()], \
        "the smoke base's bytes changed: bump the world version and record the digest"


def test_a_base_shipped_without_its_teacher_installs_and_the_teacher_builds_on_first_use(tmp_path, monkeypatch):
    """`bench prepare --rebuild --no-teacher --write-reference` ships the base alone; a fresh cache then
    installs that base (same files, no training) and builds the teacher only when a method asks."""
    from typer.testing import CliRunner

    from bench.accounting.ledger import Ledger
    from bench.cli import app
    from bench.world import prepare as prep
    from bench.world import reference

    monkeypatch.setattr(reference, "ROOT", tmp_path / "reference")
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache-1"))
    result = CliRunner().invoke(app, ["prepare", "--profile", "smoke", "--rebuild", "--no-teacher", "--write-reference"])
    assert result.exit_code == 0, result.output
    shipped = reference.manifest("smoke")
    assert "prepared.json" in shipped["files"] and not any(f.startswith("external") for f in shipped["files"])
    base = json.loads((tmp_path / "reference" / "smoke" / "prepared.json").read_text())["model_hashes"]["base"]

    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache-2"))
    with monkeypatch.context() as patch:
        patch.setattr(prep, "_build_student", lambda *a, **k: pytest.fail("the shipped base was rebuilt"))
        prepared = prep.prepare(PROFILES["smoke"], progress=False, teacher=False)
    assert prepared.model_hashes()["base"] == base and prepared.teacher_info() is None
    teacher = prepared.load_teacher("external", Ledger())  # built here: nothing shipped
    assert teacher.name == "external" and prepared.teacher_info()["model_hash"]

    result = CliRunner().invoke(app, ["prepare", "--profile", "smoke", "--check", "--no-teacher"])
    assert result.exit_code == 0, result.output
    assert f"base: rebuilt {base}, shipped {base}: identical" in result.output
    assert "built in" in result.output and "as shipped" not in result.output  # rebuilt here, same bytes

    # the base has its own recipe key: a change to the teacher's recipe alone still installs it, a
    # change to the student's builds it
    from dataclasses import replace

    smoke = PROFILES["smoke"]
    teacher_changed = replace(smoke, warmup=replace(smoke.warmup, teacher_steps=smoke.warmup.teacher_steps + 1))
    student_changed = replace(smoke, warmup=replace(smoke.warmup, student_steps=smoke.warmup.student_steps + 1))
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache-3"))
    with monkeypatch.context() as patch:
        patch.setattr(prep, "_build_student", lambda *a, **k: pytest.fail("the shipped base was rebuilt"))
        assert prep.prepare(teacher_changed, progress=False, teacher=False).model_hashes()["base"] == base

        def built(*args, **kwargs):
            raise RuntimeError("built")

        patch.setattr(prep, "_build_student", built)
        with pytest.raises(RuntimeError, match="built"):
            prep.prepare(student_changed, progress=False, teacher=False)

    # a bare `bench prepare` installs the shipped base and leaves the unshipped teacher (hours of
    # training in the worked world) to `--teacher` or to the first method that asks for it
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache-4"))
    with monkeypatch.context() as patch:
        patch.setattr(prep, "_build_student", lambda *a, **k: pytest.fail("the shipped base was rebuilt"))
        patch.setattr(prep, "_build_teacher", lambda *a, **k: pytest.fail("an unshipped teacher was built unasked"))
        result = CliRunner().invoke(app, ["prepare", "--profile", "smoke"])
    assert result.exit_code == 0, result.output
    assert "smoke's external teacher is not shipped: `bench prepare --profile smoke --teacher` builds it" in result.output
    assert "the external teacher not built)" in result.output
    assert "(the base as shipped (built in" in result.output  # its build time is where it was made, not here


def test_a_warmup_curve_checkpoint_is_the_base_of_that_many_steps_even_when_resumed(tmp_path):
    """benchmarks/warmup_curve.py: with the constant schedule, checkpoint N (saved, evaluated and
    calibrated along the way) has the bytes `bench prepare` gives a recipe of N steps, so a base
    chosen from the curve is rebuilt exactly; and a run stopped at a checkpoint and resumed from it
    (`--resume`) reaches the same bytes, with the warm-up's FLOPs of both legs in its ledger rows."""
    env = {**os.environ, "OPD_BENCH_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[2]
    steps, out = PROFILES["smoke"].warmup.student_steps, tmp_path / "curve"
    script = [sys.executable, str(root / "benchmarks" / "warmup_curve.py"), str(out), "--profile", "smoke",
              "--every", str(steps // 2), "--calibrate-from", "1"]
    subprocess.run([*script, "--steps", str(steps // 2)], env=env, cwd=root, check=True, capture_output=True,
                   timeout=900)
    subprocess.run([*script, "--steps", str(steps), "--resume", str(out / f"step{steps // 2}")], env=env, cwd=root,
                   check=True, capture_output=True, timeout=900)
    rows = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [steps // 2, steps] and all("calibration" in r for r in rows)
    assert all(set(r["base_rule"]) == {"spread", "room", "met"} for r in rows)
    assert rows[-1]["hash"] == _build(tmp_path / "cache", 1)
    assert not (out / f"step{steps // 2}" / "train_state.pt").exists()  # only the latest keeps its optimiser
    assert (out / f"step{steps}" / "train_state.pt").exists()

    built = json.loads(next((tmp_path / "cache").rglob("prepared.json")).read_text())["ledger"]
    legs = json.loads((out / f"step{steps}" / "ledger_rows.json").read_text())
    assert sum(r["flops"] for r in legs) == sum(r["flops"] for r in built if r["category"] == "shared")


def test_a_warmup_curve_runs_a_gpu_world_where_it_is_told(tmp_path):
    """`--device cpu` overrides the gpu-small profile's CUDA: its student is built and moved to the CPU
    (a CUDA-less machine fails there without it), and a curve of no steps writes nothing."""
    root = Path(__file__).resolve().parents[2]
    script = [sys.executable, str(root / "benchmarks" / "warmup_curve.py"), str(tmp_path / "curve"), "--profile",
              "gpu-small", "--steps", "0"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # as on a machine without a GPU
    assert subprocess.run(script, env=env, cwd=root, capture_output=True, timeout=300).returncode != 0
    subprocess.run([*script, "--device", "cpu"], env=env, cwd=root, check=True, capture_output=True, timeout=300)
    assert not (tmp_path / "curve" / "curve.jsonl").exists()


def test_a_teacher_shipped_from_its_warmup_checkpoint_is_what_a_build_from_scratch_gives(tmp_path, monkeypatch):
    """`bench prepare --from-checkpoint external=OUT/step<N> --write-reference` ships the teacher a
    warm-up run saved at its recipe's last step, without training it again; `--check` then rebuilds
    it from scratch and finds the same bytes. A checkpoint at another step is refused, nothing written."""
    from typer.testing import CliRunner

    from bench.cli import app
    from bench.world import reference

    steps, out = PROFILES["smoke"].warmup.teacher_steps, tmp_path / "curve"
    env = {**os.environ, "OPD_BENCH_CACHE": str(tmp_path / "cache-curve"), "OMP_NUM_THREADS": "1"}
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(root / "benchmarks" / "warmup_curve.py"), str(out), "--profile", "smoke",
                    "--teacher", "--steps", str(steps), "--every", str(steps // 2)], env=env, cwd=root, check=True,
                   capture_output=True, timeout=900)
    monkeypatch.setattr(reference, "ROOT", tmp_path / "reference")
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    bad = runner.invoke(app, ["prepare", "--profile", "smoke", "--from-checkpoint", f"external={out}/step{steps // 2}",
                              "--write-reference"])
    assert bad.exit_code == 2 and f"not a warm-up checkpoint at step {steps}" in bad.output
    assert reference.manifest("smoke") is None

    result = runner.invoke(app, ["prepare", "--profile", "smoke", "--from-checkpoint", f"external={out}/step{steps}",
                                 "--write-reference"])
    assert result.exit_code == 0, result.output
    shipped = json.loads((tmp_path / "reference" / "smoke" / "external.json").read_text())
    curve = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert shipped["model_hash"] == curve[-1]["hash"]
    rows = json.loads((out / f"step{steps}" / "ledger_rows.json").read_text())
    assert sum(r["flops"] for r in shipped["ledger"]) == sum(r["flops"] for r in rows) > 0
    # its seconds are loading and calibrating, not a build: said so, never passed off as the warm-up's time
    assert shipped["from_checkpoint"] == f"step{steps}"
    assert f"the external teacher taken from warm-up checkpoint step{steps} in" in result.output

    check = runner.invoke(app, ["prepare", "--profile", "smoke", "--check"])
    assert check.exit_code == 0, check.output
    assert f"external: rebuilt {shipped['model_hash']}, shipped {shipped['model_hash']}: identical" in check.output
