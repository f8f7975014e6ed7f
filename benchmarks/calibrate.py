"""Calibration check of the tiny world (issue #4): do methods differ by more than noise?

For each domain of a suite and each seed, runs that domain's GRPO expert exactly as `opd-multi` would
train it (method `grpo` on the one-domain suite, at opd-multi's default per-expert budget:
expert_fraction x the profile's budget / number of domains), and prints base vs expert greedy accuracy
on the domain's held-out prompts. Then runs `opd-multi` with its defaults on the suite (one run per
seed) and prints its wall time and its suite-accuracy gain over the base. Also prints the
calibration figures `bench prepare` stored (base pass@1 / pass@8, teacher pass@1, lengths).

    OMP_NUM_THREADS=1 python benchmarks/calibrate.py                       # math_code, seeds 0 1 2
    OMP_NUM_THREADS=1 python benchmarks/calibrate.py --suite four_domain --seeds 0 --skip-opd

Targets (issue #4): base greedy 20-50% per domain, pass@8 well above pass@1, each expert +15 points on
its domain, opd-multi on math_code within 5 minutes and >= 8 points of suite accuracy above the base.
Runs go to a scratch folder (default a temporary directory) and are deleted unless --runs is given.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)


def _run(method: str, suite: str, seed: int, runs: Path, budget: float | None, overrides: tuple = (),
         eval_every: float = 0.1) -> dict:
    from bench.runner import RunConfig, Runner

    config = RunConfig(method=method, suite=suite, seed=seed, budget_flops=budget, overrides=overrides,
                       runs_dir=runs, eval_every=eval_every, run_name=f"{method}-{suite}-s{seed}")
    return Runner(config, progress=False).run()


def _mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{100 * values[0]:5.1f}"
    return f"{100 * statistics.mean(values):5.1f} ± {100 * statistics.stdev(values):4.1f}"


def experts(suite_name: str, seeds: list[int], runs: Path) -> None:
    """Per domain: base and expert accuracy on each seed, at opd-multi's default per-expert budget."""
    from bench.profiles import PROFILES
    from bench.registry import get_suite
    from methods.opd_multi import OPDMultiConfig

    profile = PROFILES["tiny"]
    domains = get_suite(suite_name, "easy", profile.task_format).domains
    per_expert = OPDMultiConfig().expert_fraction * profile.budget_flops / len(domains)
    print(f"GRPO experts at opd-multi's per-expert budget {per_expert:.2e} FLOPs ({suite_name}, seeds {seeds})")
    print(f"{'domain':<8} {'base':>7} {'expert (mean ± sd)':>20} {'gain':>6} {'per seed':<30} {'wall s':>6}")
    for domain in domains:
        finals, walls, base = [], [], None
        for seed in seeds:
            summary = _run("grpo", domain, seed, runs, per_expert, eval_every=0.5)
            base = summary["base_accuracy"]  # the base is shared: the same on every seed
            finals.append(summary["final_accuracy"])
            walls.append(summary["wall_s"])
        gain = statistics.mean(finals) - base
        per_seed = " ".join(f"{100 * f:.1f}" for f in finals)
        print(f"{domain:<8} {100 * base:6.1f}% {_mean_sd(finals):>20} {100 * gain:+6.1f} {per_seed:<30} "
              f"{statistics.mean(walls):6.0f}", flush=True)


def opd_multi(suite_name: str, seeds: list[int], runs: Path) -> None:
    """opd-multi with every default: wall time and suite-accuracy gain over the base, per seed."""
    print(f"opd-multi defaults on {suite_name}")
    for seed in seeds:
        t0 = time.perf_counter()
        summary = _run("opd-multi", suite_name, seed, runs, None)
        wall = time.perf_counter() - t0
        domains = " ".join(f"{d} {100 * summary['base_domain_accuracy'][d]:.1f}->{100 * a:.1f}"
                           for d, a in summary["final_domain_accuracy"].items())
        print(f"seed {seed}: base {100 * summary['base_accuracy']:.1f}% final {100 * summary['final_accuracy']:.1f}% "
              f"gain {100 * (summary['final_accuracy'] - summary['base_accuracy']):+.1f} ({domains}); "
              f"wall {wall:.0f} s (run {summary['wall_s']:.0f} s), counted {summary['flops']['counted']:.2e} FLOPs",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="math_code")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--runs", type=Path, default=None, help="keep run directories here")
    parser.add_argument("--skip-experts", action="store_true")
    parser.add_argument("--skip-opd", action="store_true")
    args = parser.parse_args()

    from bench.prepare import format_calibration, prepare
    from bench.profiles import PROFILES

    t0 = time.perf_counter()
    prepared = prepare(PROFILES["tiny"], progress=False)
    built = prepared.info.get("wall_s", "?")
    print(f"prepare: {time.perf_counter() - t0:.0f} s now, {built} s when built -> {prepared.folder}")
    print("\n".join(format_calibration(prepared.calibration())))
    with tempfile.TemporaryDirectory(prefix="opd-calibrate-") as scratch:
        runs = args.runs or Path(scratch)
        if not args.skip_experts:
            experts(args.suite, args.seeds, runs)
        if not args.skip_opd:
            opd_multi(args.suite, args.seeds, runs)


if __name__ == "__main__":
    main()
