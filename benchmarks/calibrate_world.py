"""Calibrate a world by single-method runs and measure its regime criteria (docs/world.md).

Runs, from the profile's prepared base, only single-method runs (no method is compared with another):
- per domain, a GRPO expert (`grpo`, that domain alone) at learning rate x0.5, x1 and x2 of the
  world's rate (`Profile.method_defaults`, else the library's; `--grpo-lr` sets it); the x1
  expert trains on the four-domain suite's prompts of its domain and is evaluated on every domain
  (the transfer matrix);
- per domain, OPD from that domain's x1 expert (saved by its run as a Hugging Face folder) into the
  base (`opd-external` with the expert as its teacher), at x0.5, x1 and x2 of the distillation rate;
- one `grpo-joint` run on the four domains with four experts' budget (the joint-vs-expert gap).
Then computes every criterion, and opd-multi's distillation stopping threshold (the rule replayed on
the x1 OPD runs' traces, `stop_threshold`), and writes them, with the per-run figures, to a JSON file
that `bench prepare` prints beside its own measurements (bench/reference/<profile>-calibration.json).

    OMP_NUM_THREADS=1 python benchmarks/calibrate_world.py --jobs 2            # tiny, all of it
    OMP_NUM_THREADS=1 python benchmarks/calibrate_world.py --profile smoke --expert-budget 4e10 \\
        --opd-budget 2e10 --eval-size 16 --out /tmp/cal.json                    # a quick dry run
    OMP_NUM_THREADS=1 python benchmarks/calibrate_world.py --grpo-lr 5e-4 --skip-joint \\
        --runs runs-calibration-first                                           # the first pass

Runs are kept under --runs (default runs-calibration/) and skipped when complete, so an
interrupted calibration continues where it stopped.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)

LR_MULTS = (0.5, 1.0, 2.0)
SUITE = "four_domain"
# opd-multi's stopping thresholds tried, largest first (docs/world.md, Calibration)
STOP_GRID = (0.05, 0.04, 0.03, 0.025, 0.02, 0.015, 0.01)


def _run(spec: dict) -> dict:
    """One run in a worker process; returns its record (an existing complete run is read back)."""
    import torch

    torch.set_num_threads(1)
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    summary = Path(spec["runs"]) / spec["name"] / "summary.json"
    if summary.exists():
        return json.loads(summary.read_text())
    config = RunConfig(
        method=spec["method"], suite=spec["suite"], profile=spec["profile"], seed=0,
        budget_flops=spec["budget"], runs_dir=Path(spec["runs"]), run_name=spec["name"],
        eval_size=spec["eval_size"], overrides=tuple(spec["overrides"].items()),
        teachers=tuple(spec.get("teachers", {}).items()),
    )
    started = time.perf_counter()
    record = Runner(config, progress=False).run()
    print(f"{spec['name']}: {100 * record['base_accuracy']:.1f}% -> {100 * record['final_accuracy']:.1f}% "
          f"in {time.perf_counter() - started:.0f} s", flush=True)
    return record


def base_rates(profile: str, grpo: float | None = None, distill: float | None = None) -> dict[str, float]:
    """The x1 rates: `grpo` / `distill` where given (--grpo-lr, --distill-lr), else the world's calibrated
    defaults (`Profile.method_defaults`), else the library's."""
    from bench.world.profiles import PROFILES
    from methods.distill import DistillStepConfig
    from methods.grpo import GRPOStepConfig

    world = PROFILES[profile]
    return {"grpo": grpo or float(dict(world.defaults_for("grpo")).get("lr", GRPOStepConfig().lr)),
            "distill": distill or float(dict(world.defaults_for("opd-external")).get("distill.lr",
                                                                                    DistillStepConfig().lr))}


def _lr(rates: dict[str, float], family: str, mult: float) -> dict:
    """The `--set` of `mult` times the family's x1 rate (`grpo` or `distill`)."""
    return {"lr" if family == "grpo" else "distill.lr": str(rates[family] * mult)}


def plan(args: argparse.Namespace, domains: tuple[str, ...], rates: dict[str, float]
         ) -> tuple[list[dict], list[dict], dict | None]:
    common = {"profile": args.profile, "runs": str(args.runs), "eval_size": args.eval_size}
    experts = [{**common, "name": f"grpo-{d}-x{m:g}", "method": "grpo", "suite": SUITE if m == 1 else d,
                "budget": args.expert_budget, "domain": d, "mult": m,
                "overrides": {"domain": d, **_lr(rates, "grpo", m)}}
               for d in domains for m in args.mults]
    # The rule never fires: OPD runs its whole budget, so the curve shows where it plateaus.
    opd = [{**common, "name": f"opd-{d}-x{m:g}", "method": "opd-external", "suite": d, "budget": args.opd_budget,
            "domain": d, "mult": m, "teachers": {f"expert-{d}": str(args.runs / f"grpo-{d}-x1" / "final")},
            "overrides": {"teacher": f"expert-{d}", "distill.kl_threshold": "0", "distill.use_reward_rule": "false",
                          **_lr(rates, "distill", m)}}
           for d in domains for m in args.mults]
    joint = None if args.skip_joint else {**common, "name": "grpo-joint", "method": "grpo-joint", "suite": SUITE,
                                          "budget": args.expert_budget * len(domains),
                                          "overrides": _lr(rates, "grpo", 1)}
    return experts, opd, joint


def plateau_step(record: dict, domain: str) -> dict:
    """The first evaluation within one binomial standard error of the run's best on `domain` (an
    expert trained on one domain is judged there, whichever suite evaluated it), as steps and FLOPs."""
    curve = record["curve"]
    acc = [p["domain_accuracy"][domain] for p in curve]
    best = max(acc)
    se = math.sqrt(best * (1 - best) / record["eval_size"])
    i = next(i for i, a in enumerate(acc) if a >= best - se)
    steps = sum(1 for s in record["steps"] if s["flops"] <= curve[i]["flops"])
    return {"steps": steps, "flops": curve[i]["flops"], "accuracy": acc[i], "best": best}


def fire_step(kls: list[float], threshold: float, patience: int) -> int | None:
    """The step (1-based) at which the per-token reverse-KL rule fires on this trace: its `patience`-th
    step in a row below `threshold`, as `methods.distill` counts it; None if it never does."""
    below = 0
    for step, kl in enumerate(kls, 1):
        below = below + 1 if kl < threshold else 0
        if below >= patience:
            return step
    return None


def stop_threshold(opd: dict[str, dict], experts: dict[str, dict], plateaus: dict[str, int], patience: int) -> dict:
    """opd-multi's distillation stopping rules, replayed on each domain's OPD trace (its rules off, the
    whole budget run; `opd`, `experts`: domain -> record of the OPD run and of the expert it distils).

    - the reverse-KL threshold: the largest of STOP_GRID at which the rule fires no earlier than that
      run's plateau step, or never (the budget then ends distillation), on every domain;
    - the reward rule (the student's sample reward over the last `patience` steps reaches its expert's
      over the expert's last 3 GRPO steps, `methods.grpo.grpo_phase`'s figure): kept only if it too
      fires no earlier than every domain's plateau, or never.
    """
    fires = {t: {d: fire_step([s["reverse_kl"] for s in r["steps"]], t, patience) for d, r in opd.items()}
             for t in STOP_GRID}
    late = lambda fired: all(f is None or f >= plateaus[d] for d, f in fired.items())  # noqa: E731
    chosen = next((t for t in STOP_GRID if late(fires[t])), None)
    targets = {d: _mean([s["reward"] for s in experts[d]["steps"][-3:]]) for d in opd}
    reached = {d: next((i for i in range(patience, len(r["steps"]) + 1)
                        if _mean([s["reward"] for s in r["steps"][i - patience:i]]) >= targets[d]), None)
               for d, r in opd.items()}
    return {"grid": list(STOP_GRID), "patience": patience, "plateau_steps": plateaus,
            "fires": {repr(t): f for t, f in fires.items()}, "threshold": chosen,
            "reward_rule": {"targets": targets, "fires": reached, "kept": late(reached)}}


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def criteria(experts: list[dict], opd: list[dict], joint: dict | None, records: dict, prepared_info: dict) -> dict:
    """Every criterion of docs/world.md from the calibration's records (a partial calibration, run at
    fewer learning rates or without the joint run, leaves out what it did not measure)."""
    domains = sorted({e["domain"] for e in experts})
    rec = lambda spec: records[spec["name"]]  # noqa: E731
    x1 = {e["domain"]: rec(e) for e in experts if e["mult"] == 1}
    out: dict = {"domains": domains}
    base = {r["domain"]: r for r in prepared_info["calibration"]}
    out["completion_length"] = {d: base[d]["base_length"] for d in domains}
    update_steps = [s for e in experts for s in rec(e)["steps"]]
    out["completion_share"] = _mean([s.get("completion_share") for s in update_steps])
    first = {o["domain"]: rec(o)["steps"][0] for o in opd if o["mult"] == 1}
    out["informative_tokens"] = {d: first[d].get("informative_tokens") for d in domains}
    out["max_position_share"] = {d: first[d].get("max_position_share") for d in domains}
    out["zero_adv_share"] = {d: _mean([s.get("zero_adv_share") for s in x1[d]["steps"]]) for d in domains}
    out["plateau"] = {
        d: {f"{how}x{m:g}": plateau_step(rec(spec), d) for how, group in (("grpo", experts), ("opd", opd))
            for spec in group if spec["domain"] == d for m in [spec["mult"]]}
        for d in domains
    }
    from methods.distill import DistillConfig

    out["stop_rule"] = stop_threshold({o["domain"]: rec(o) for o in opd if o["mult"] == 1}, x1,
                                      {d: out["plateau"][d]["opdx1"]["steps"] for d in domains},
                                      DistillConfig().patience)
    out["transfer"] = {a: {b: x1[a]["final_domain_accuracy"][b] - x1[a]["base_domain_accuracy"][b] for b in domains}
                       for a in domains}
    out["expert_accuracy"] = {d: x1[d]["final_domain_accuracy"][d] for d in domains}
    # the student's GRPO ceiling: the best held-out accuracy any expert of the domain reached, at any rate
    out["expert_ceiling"] = {d: max(p["best"] for k, p in out["plateau"][d].items() if k.startswith("grpo"))
                             for d in domains}
    if joint is not None:
        joint = rec(joint)
        out["joint_accuracy"] = dict(joint["final_domain_accuracy"])
        out["joint_vs_expert"] = {d: joint["final_domain_accuracy"][d] - x1[d]["final_domain_accuracy"][d]
                                  for d in domains}
    rollout = sum(r["flops"] for e in experts for r in rec(e)["ledger"]
                  if r["category"] == "counted" and r["kind"] == "rollout")
    counted = sum(rec(e)["flops"]["counted"] for e in experts)
    out["rollout_share"] = rollout / counted if counted else None
    out["base"] = {d: {k: base[d][k] for k in ("base_pass1", "base_pass8", "base_sample_acc")} for d in domains}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--runs", type=Path, default=Path("runs-calibration"))
    parser.add_argument("--out", type=Path, default=None,
                        help="default: bench/reference/<profile>-calibration.json, which bench prepare prints")
    parser.add_argument("--expert-budget", type=float, default=1e13)
    parser.add_argument("--opd-budget", type=float, default=5e12)
    parser.add_argument("--eval-size", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--mults", type=lambda v: tuple(float(x) for x in v.split(",")), default=LR_MULTS,
                        help="learning-rate multipliers, comma-separated (1 is always needed: the transfer matrix)")
    parser.add_argument("--skip-joint", action="store_true",
                        help="leave out the grpo-joint run (a partial calibration)")
    parser.add_argument("--grpo-lr", type=float, default=None, help="the x1 GRPO rate (default: the world's)")
    parser.add_argument("--distill-lr", type=float, default=None,
                        help="the x1 distillation rate (default: the world's)")
    args = parser.parse_args()
    if 1.0 not in args.mults:
        parser.error("--mults must include 1")

    from bench.world.prepare import prepare
    from bench.world.profiles import PROFILES
    from bench.registry import get_suite

    from bench.world.regime import calibration_path

    profile = PROFILES[args.profile]
    args.out = args.out or calibration_path(args.profile)
    prepared = prepare(profile, teacher=False)  # single-method runs from the base; no external teacher
    domains = get_suite(SUITE, "easy", profile.task_format).domains
    rates = base_rates(args.profile, args.grpo_lr, args.distill_lr)
    experts, opd, joint = plan(args, domains, rates)
    records: dict[str, dict] = {}
    started = time.perf_counter()
    with ProcessPoolExecutor(args.jobs) as pool:
        # experts first (OPD needs their final weights), the joint run beside them
        first = [*experts, *([joint] if joint else [])]
        for spec, record in zip(first, pool.map(_run, first)):
            records[spec["name"]] = record
        for spec, record in zip(opd, pool.map(_run, opd)):
            records[spec["name"]] = record
    result = {
        "profile": args.profile, "world_version": profile.world_version,
        "model_hashes": prepared.model_hashes(), "expert_budget": args.expert_budget,
        "opd_budget": args.opd_budget, "eval_size": args.eval_size,
        "lr_mults": list(args.mults), "joint_run": joint is not None,
        "base_lr": rates,
        "wall_s": round(time.perf_counter() - started),
        "criteria": criteria(experts, opd, joint, records, prepared.info),
    }
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(json.dumps(result["criteria"], indent=1, sort_keys=True))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
