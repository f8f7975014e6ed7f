"""The `gpu-small` world on the device (the check's `gpu_small` and `gpu_small_more` parts).

`gpu_small` chooses the world's base and measures the learning goal in one call: the student's
warm-up curve up to the first checkpoint that meets the base-choosing rule (docs/world.md), then
`bench prepare` from scratch at that many steps, then the default run. With the warm-up's constant
learning rate, checkpoint N of the curve and an N-step `bench prepare` are the same training (their
weights hashes are compared), so the base the rule chose is the one the run starts from. Where the
rule is not met (or the curve does not fit), the recipe's steps are used and the results say so.
`gpu_small_more` builds the external teacher."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

from gpucheck import common
from gpucheck.common import Check, timed


def _small_profile(dry: bool, student_steps: int | None = None):
    """The gpu-small world (in a dry run, the tiny world's small student on the CPU, a few steps), its
    base warmed up for `student_steps` where given (the curve's choice), registered under its name in
    this process's profiles, where `bench run` finds it."""
    from bench.world.profiles import PROFILES

    profile = PROFILES["gpu-small"]
    if dry:
        profile = dataclasses.replace(profile, name="gpu-small-dry", device="cpu", student="tiny-llama",
                                      teacher="tiny-llama", budget_flops=2e10, eval_size=4, max_new_tokens=16,
                                      eval_max_new_tokens=16,
                                      warmup=dataclasses.replace(profile.warmup, student_steps=4, teacher_steps=4))
    if student_steps is not None:
        profile = dataclasses.replace(profile, warmup=dataclasses.replace(profile.warmup, student_steps=student_steps))
    PROFILES[profile.name] = profile
    return profile


def _prepare_small(profile) -> dict:
    """`bench prepare` for the profile (its base only, as `bench prepare` builds an unshipped world),
    timed, with the base's calibration (which it computes anyway) and the base-choosing rule on it."""
    from bench.world.prepare import prepare
    from bench.world.warmup import calibration_figures

    built = []  # its warm-up's progress, a line per tenth, goes to the check's log
    seconds = timed(lambda: built.append(prepare(profile, progress=True, teacher=False)))
    info = built[0].info
    return {"seconds": round(seconds, 1), "model_hash": info["model_hashes"]["base"],
            **calibration_figures(info["calibration"])}


def _run_small(profile) -> dict:
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    runs = Path(os.environ["OPD_BENCH_CACHE"]) / "runs"
    config = RunConfig(method="opd-multi", suite="math_code", profile=profile.name, runs_dir=runs)
    start = time.perf_counter()
    # its progress lines (one per evaluation: counted FLOPs, accuracy, time elapsed and left) go to the
    # check's log, so a run stopped at the budget's end still shows how far it got
    record = Runner(config, progress=True).run()
    # where a run falls short, what calibrating the world next needs: the curve, and per phase its
    # steps with the mean reward of the first and last five (a rise, a plateau or a collapse)
    phases: dict[str, list] = {}
    for step in record["steps"]:
        phases.setdefault(step.get("phase", ""), []).append(step.get("reward"))

    def mean(xs: list) -> float | None:
        return None if None in xs or not xs else sum(xs) / len(xs)

    return {"wall_s": round(time.perf_counter() - start, 1), "base_accuracy": record["base_accuracy"],
            "final_accuracy": record["final_accuracy"], "counted_flops": record["flops"]["counted"],
            "gain_points": 100 * (record["final_accuracy"] - record["base_accuracy"]),
            "base_domain_accuracy": record["base_domain_accuracy"],
            "final_domain_accuracy": record["final_domain_accuracy"],
            "curve": [{k: point.get(k) for k in ("flops", "phase", "accuracy", "domain_accuracy", "wall_s")}
                      for point in record["curve"]],
            "phases": {phase: {"steps": len(rewards), "reward_first5": mean(rewards[:5]),
                               "reward_last5": mean(rewards[-5:])} for phase, rewards in phases.items()},
            "throughput": record.get("throughput")}


def gpu_small(check: Check, _folder: Path, out: dict) -> None:
    """The gpu-small world from scratch (an empty OPD_BENCH_CACHE, the check's own): the warm-up curve,
    which chooses the base's steps, then `bench prepare` (its base) at those steps, then the default
    run, each timed."""
    recipe = _small_profile(check.dry)
    out["profile"] = recipe.name
    if check.fits("curve", "gpu_small: curve"):
        failed = check.measure("gpu-small warm-up curve", _curve_small, check, recipe, out)
        if failed:
            out["curve_error"] = failed["error"]
    chosen = out.get("chosen_step")
    profile = _small_profile(check.dry, chosen)
    if out.get("curve"):  # `bench prepare` trains as the curve did, calibrations and all
        check.costs["prepare"] = _pace(out["curve"]) * profile.warmup.student_steps
    out["student_steps"] = profile.warmup.student_steps
    if check.fits("prepare", "gpu_small: prepare"):
        out["prepare"] = check.measure("gpu-small prepare", _prepare_small, profile)
        point = next((p for p in out.get("curve", []) if p["step"] == out["student_steps"]), None)
        if point is not None and "model_hash" in out["prepare"]:  # one training, twice: the same weights?
            out["prepare"]["same_weights_as_the_curve"] = point["model_hash"] == out["prepare"]["model_hash"]
        if "seconds" in out["prepare"] and check.fits("run", "gpu_small: run"):
            out["run"] = check.measure("gpu-small run", _run_small, profile)
    prep, run = out.get("prepare", {}), out.get("run", {})
    out["goals"] = {"base_rule": prep["base_rule"]["met"] if "base_rule" in prep else None,
                    "prepare_3min": prep["seconds"] <= 180 if "seconds" in prep else None,
                    "run_3min": run["wall_s"] <= 180 if "wall_s" in run else None,
                    "gain_8_points": run["gain_points"] >= 8 if "gain_points" in run else None}


def _teacher_small(profile) -> dict:
    """The external teacher's build (`bench prepare --teacher`), into the prepared base's folder."""
    from bench.world.prepare import prepare

    prepared = prepare(profile, progress=False, teacher=False)  # the base gpu_small built: found in the cache
    start = time.perf_counter()
    info = prepared.ensure_teacher(progress=False)
    return {"seconds": round(time.perf_counter() - start, 1), "model_hash": info.get("model_hash")}


def _pace(curve: list[dict]) -> float:
    """Seconds per warm-up step along the curve so far, its checkpoints' calibrations included."""
    return curve[-1]["wall_s"] / curve[-1]["step"]


class _CurveDone(Exception):
    """Raised from the warm-up's step callback to end the curve early, saying why."""


def _curve_small(check: Check, profile, out: dict) -> None:
    """The student's warm-up along one run, every `every` steps `bench prepare`'s calibration and the
    base-choosing rule on it, saved point by point; it ends at the first checkpoint that meets the rule
    (the base the rule chooses: later ones cannot change that), at `steps`, or where going on to the
    next checkpoint would leave too little time for `bench prepare` and the default run after it."""
    from bench.accounting.ledger import Ledger
    from bench.registry import get_suite
    from bench.world.models import state_digest
    from bench.world.prepare import calibrate
    from bench.world.warmup import WARMUP_SUITE, calibration_figures, warm_up

    sizes, started = common.SIZES["curve"], time.perf_counter()
    suite = get_suite(WARMUP_SUITE, profile.warmup.difficulty, profile.task_format)
    curve = out.setdefault("curve", [])

    def on_step(step: int, policy, loss: float) -> None:
        if step % sizes["every"] == 0:  # the figures the base-choosing rule reads, at `bench prepare`'s sizes
            rows = calibrate(policy, suite, profile)
            curve.append({"step": step, "loss": round(loss, 4), **calibration_figures(rows),
                          "model_hash": state_digest(policy._model), "wall_s": round(time.perf_counter() - started, 1)})
            print(f"  gpu-small warm-up {json.dumps(curve[-1])}", flush=True)
            check.save()  # a part stopped from outside keeps the points so far
            if curve[-1]["base_rule"]["met"]:
                out["chosen_step"] = step
                raise _CurveDone(f"the base-choosing rule met at step {step}")
            # on to the next checkpoint only if the time left after it still holds what the curve is for:
            # `bench prepare` of the base it may choose there (those steps, or the recipe's where the rule
            # is not met), at the curve's pace, then the default run
            upto = step + sizes["every"]
            if check.left() <= _pace(curve) * (sizes["every"] + max(upto, profile.warmup.student_steps)) \
                    + check.cost("run"):
                raise _CurveDone(f"the rest of the budget kept for prepare and the run, at step {step}")

    curved = dataclasses.replace(profile, warmup=dataclasses.replace(profile.warmup, student_steps=sizes["steps"]))
    try:
        warm_up(curved, "base", Ledger(), progress=False, on_step=on_step)
        out["curve_end"] = f"{sizes['steps']} steps, the rule never met"
    except _CurveDone as done:
        out["curve_end"] = str(done)
    out["curve_s"] = round(time.perf_counter() - started, 1)


def gpu_small_more(check: Check, _folder: Path, out: dict) -> None:
    """The gpu-small teacher's build, into the folder of the base `gpu_small` prepared (at the steps
    it chose), or of the recipe's base, prepared here first where `gpu_small` did not run."""
    profile = _small_profile(check.dry, check.results.get("gpu_small", {}).get("chosen_step"))
    built = "seconds" in check.results.get("gpu_small", {}).get("prepare", {})
    if not built and check.fits("prepare", "gpu_small_more: the base, for the teacher"):
        out["base_prepare"] = check.measure("gpu-small prepare", _prepare_small, profile)
        built = "seconds" in out["base_prepare"]
    if built and check.fits("teacher", "gpu_small_more: teacher"):
        out["teacher"] = check.measure("gpu-small teacher", _teacher_small, profile)
