"""opd-multi given its whole budget: does distilling on to the budget change claim 1? (docs/world.md)

    python benchmarks/full_budget.py OUT_DIR [--arm to-budget|whole-share|long-distill] [--seeds 0,1,2]
        [--suite math_code] [--profile tiny] [--budget FLOPS] [--jobs 2] [--reference leaderboard/records]

Per seed, two `bench run`s, each on one torch thread, `--jobs` at a time (a run already complete is
kept, an interrupted one resumed): joint GRPO into OUT_DIR/runs, shared by every arm, and opd-multi
into OUT_DIR/runs-<arm>. The opd-multi arm trains its experts one after another and has
distillation's convergence rules off (`--set distill.steps=1000000`), so that only the budget ends
distillation; with `--arm whole-share` the experts' stopping rule is off too (`--set
expert_patience=0`): each trains for its whole share of the budget (90%, split evenly by domain) and
distillation has the rest. `--arm long-distill` is whole-share at twice joint GRPO's budget and half
the experts' fraction (`--set expert_fraction=0.45`): the same experts, then distillation on.

Then, from the records alone:
- claim 1's metrics as the findings page computes them: savings at each target with their
  intervals, the verdict, final accuracy minus joint GRPO's at opd-multi's spend. Where opd-multi has
  a larger budget no board holds both methods, so the FLOPs to each target are read per seed,
  seeds paired, with opd-multi's distillation FLOPs alone beside them;
- per seed, where the world's KL rule would have stopped distillation, replayed on the step trace
  (the rule reads each step's reverse KL and draws nothing, so up to there the run is the method's
  default run), and the accuracy there, read off the curve as the report reads every curve;
- with `--reference`, the reference opd-multi records of the same seeds;
- to say why, each expert's held-out accuracy on its own domain, from the run's last checkpoint;
- distillation's cost: the distillation FLOPs at which the student first takes 50%, 75% and 90% of
  its experts' gain over the base, as a share of the experts' FLOPs;
- how many first steps each opd-multi run shares, value for value, with the same seed's run in
  another arm kept in OUT_DIR.

Writes OUT_DIR/full_budget-<arm>.json and OUT_DIR/full_budget-<arm>.png (each seed's curves with the
replayed stop, where distillation starts, the target and its experts' mean) and prints a table. Logs:
OUT_DIR/logs/<runs folder>/<run_id>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)

ARMS = {"to-budget": ("--phase-executor", "sequential", "--set", "distill.steps=1000000"),
        "whole-share": ("--phase-executor", "sequential", "--set", "distill.steps=1000000",
                        "--set", "expert_patience=0"),
        "long-distill": ("--phase-executor", "sequential", "--set", "distill.steps=1000000",
                         "--set", "expert_patience=0", "--set", "expert_fraction=0.45")}
ARM_LABELS = {"to-budget": "opd-multi, distilling to the budget",
              "whole-share": "opd-multi, experts' whole share, then distilling",
              "long-distill": "opd-multi, the same experts, then distilling on to twice the budget"}
# opd-multi's budget as a multiple of joint GRPO's: at twice the budget and half the experts' fraction,
# the long-distill arm's experts get the whole-share arm's FLOPs and distillation the rest
ARM_BUDGET_SCALE = {"long-distill": 2.0}
GAIN_SHARES = (0.5, 0.75, 0.9)  # the student's share of its experts' gain that distillation's cost is read at


def runs_dir(args: argparse.Namespace, method: str) -> Path:
    """Where the study keeps `method`'s runs: joint GRPO's serve every arm."""
    return args.out / ("runs" if method == "grpo-joint" else f"runs-{args.arm}")


def commands(args: argparse.Namespace) -> list[tuple[Path, list[str]]]:
    """(run directory, `bench run` arguments) of every run of the study."""
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    from bench.world.profiles import PROFILES

    budget = float(args.budget) if args.budget else PROFILES[args.profile].budget_flops
    out = []
    for seed in args.seeds:
        for method, extra in (("grpo-joint", ()), ("opd-multi", ARMS[args.arm])):
            scale = ARM_BUDGET_SCALE.get(args.arm, 1.0) if method == "opd-multi" else 1.0
            method_budget = budget * scale if args.budget or scale != 1.0 else None  # None: the profile's
            cmd = ["run", "--method", method, "--suite", args.suite, "--profile", args.profile,
                   "--seed", str(seed), "--runs", str(runs_dir(args, method)), *extra]
            if method_budget is not None:
                cmd += ["--budget", f"{method_budget:g}"]
            config = RunConfig(method=method, suite=args.suite, profile=args.profile, seed=seed,
                               budget_flops=method_budget, runs_dir=runs_dir(args, method))
            out.append((runs_dir(args, method) / Runner.run_id_for(config), cmd))
    return out


def run_missing(args: argparse.Namespace) -> None:
    """Run (or resume) every run of the study that has no record yet, `--jobs` at a time."""
    todo = []
    for run_dir, cmd in commands(args):
        if (run_dir / "summary.json").is_file():
            continue
        todo.append((run_dir, cmd + (["--resume"] if (run_dir / "config.json").is_file() else [])))
    if not todo:
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    bench_cli = [sys.executable, "-m", "bench.cli"]
    print(f"{len(todo)} runs to make, {args.jobs} at a time; logs in {args.out / 'logs'}", flush=True)

    def one(item: tuple[Path, list[str]]) -> tuple[str, int]:
        run_dir, cmd = item
        log_path = args.out / "logs" / run_dir.parent.name / f"{run_dir.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a") as log:
            rc = subprocess.run(bench_cli + cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
        run_id = f"{run_dir.parent.name}/{run_dir.name}"
        print(f"  {run_id}: {'done' if rc == 0 else f'failed (exit {rc}; see {log_path})'}", flush=True)
        return run_id, rc

    with ThreadPoolExecutor(args.jobs) as pool:
        failed = [run_id for run_id, rc in pool.map(one, todo) if rc]
    if failed:
        sys.exit(f"full_budget: {len(failed)} runs failed: {', '.join(failed)}")


def replay_kl_rule(record: dict) -> dict | None:
    """Where the KL rule of the record's own config would have stopped distillation, or None.

    `reward_rule`: whether that config also has the accuracy rule on. The trace does not keep the
    per-domain hits it reads, so it is not replayed, and the default would then stop here or sooner.
    """
    distill = record["method_config"]["distill"]
    threshold, patience = distill["kl_threshold"], distill["patience"]
    low = 0
    for i, step in enumerate(s for s in record["steps"] if s["phase"] == "distill"):
        low = low + 1 if step["reverse_kl"] < threshold else 0
        if low >= patience:
            return {"distill_steps": i + 1, "flops": step["flops"], "kl_threshold": threshold, "patience": patience,
                    "reward_rule": bool(distill["use_reward_rule"])}
    return None


def expert_accuracy(args: argparse.Namespace, record: dict) -> dict[str, float]:
    """Each opd-multi expert's greedy held-out accuracy on its own domain (the prompts the run scores),
    from the run's last checkpoint; kept in OUT_DIR/experts.json, so a second call reads it."""
    cache_path = args.out / "experts.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    key = f"{args.arm}/{record['run_id']}"
    if key in cache:
        return {d: cache[key][d] for d in record["domains"]}
    import torch

    from bench.accounting.ledger import Ledger
    from bench.evaluation import Evaluator
    from bench.policy import Policy
    from bench.run import checkpoint
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.prepare import prepare

    torch.set_num_threads(1)
    config = RunConfig(method="opd-multi", suite=record["suite"], difficulty=record["difficulty"],
                       profile=record["profile"], seed=record["seed"], runs_dir=runs_dir(args, "opd-multi"))
    runner = Runner(config, progress=False)
    saved = checkpoint.load(runner.dir)
    # the experts are final in a checkpoint taken after every one of their steps
    steps = {f"expert:{d}": sum(s["phase"] == f"expert:{d}" for s in record["steps"]) for d in record["domains"]}
    if saved is None or any(saved.trace["phase_steps"].get(phase, 0) != n for phase, n in steps.items()):
        sys.exit(f"full_budget: {runner.dir} has no checkpoint taken after its experts were trained")
    states = saved.context["policy_states"]
    model, tokenizer = prepare(runner.profile, progress=False, teacher=False).load_student()  # its hash checked
    ledger = Ledger(args.out / "experts-eval-ledger.jsonl")
    accuracy = {}
    for domain in record["domains"]:
        model.load_state_dict(states[f"expert:{domain}"]["model"])
        evaluator = Evaluator(runner.suite, record["eval_size"], runner.profile.eval_max_new_tokens, domains=[domain])
        policy = Policy(f"expert:{domain}", model, tokenizer, ledger=ledger, trainable=False)
        accuracy[domain] = evaluator.evaluate(policy)["accuracy"]
    cache[key] = accuracy
    cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True) + "\n")
    return accuracy


def accuracy_at(record: dict, flops: float) -> float:
    """The record's held-out accuracy at `flops`, read off its curve as the report reads every curve."""
    from reports.metrics import interpolate_curve

    return float(interpolate_curve(*curve_of(record), [flops])[0])


def curve_of(record: dict) -> tuple[list[float], list[float]]:
    points = sorted((p["flops"], p["accuracy"]) for p in record["curve"])
    return [f for f, _ in points], [a for _, a in points]


def expert_flops(record: dict) -> float:
    """The counted FLOPs of the record's expert phases."""
    return sum(float(row["flops"]) for row in record["ledger"]
               if row["category"] == "counted" and row["phase"].startswith("expert:"))


def distillation_cost(record: dict, experts: dict[str, float]) -> dict:
    """The distillation FLOPs (counted FLOPs past the experts') at which the student's held-out accuracy
    first reaches base + p x (its experts' mean on their own domains - base), for p in GAIN_SHARES,
    each also as a share of the experts' FLOPs; and the share of that gain the student ends with."""
    from reports.metrics import flops_to_target

    flops, accuracy = curve_of(record)
    spent = expert_flops(record)
    base, mean = accuracy[0], sum(experts.values()) / len(experts)
    out = {"expert_flops": spent, "base": base, "experts_mean": mean, "final_gain_share": None, "at": {}}
    if mean <= base:  # no gain to take
        return out
    out["final_gain_share"] = (record["final_accuracy"] - base) / (mean - base)
    for p in GAIN_SHARES:
        reached = flops_to_target(flops, accuracy, base + p * (mean - base))
        out["at"][str(p)] = None if reached is None else {"distill_flops": reached - spent,
                                                          "share_of_expert_flops": (reached - spent) / spent}
    return out


def steps_shared_with(args: argparse.Namespace, record: dict, arm: str) -> dict | None:
    """How many of the record's first steps equal, value for value, those of the same run in `arm`."""
    other = args.out / f"runs-{arm}" / record["run_id"] / "summary.json"
    if arm == args.arm or not other.is_file():
        return None
    theirs = json.loads(other.read_text())["steps"]
    equal = next((i for i, (a, b) in enumerate(zip(record["steps"], theirs)) if a != b),
                 min(len(record["steps"]), len(theirs)))
    return {"arm": arm, "equal_steps": equal, "their_steps": len(theirs)}


def matched_accuracy(targets: dict[float, float], joint: dict[int, dict], opd: dict[int, dict]) -> list[dict]:
    """Per target, seeds paired: each method's counted FLOPs to it, the savings 1 - opd-multi's / joint
    GRPO's, and opd-multi's distillation FLOPs alone to it; the IQM of the savings with its 95%
    bootstrap interval where every seed reaches the target."""
    from reports.metrics import flops_to_target, savings
    from reports.stats import estimate, rng_for

    rows = []
    for k, tau in sorted(targets.items()):
        seeds = {}
        for seed in sorted(set(joint) & set(opd)):
            fo = flops_to_target(*curve_of(opd[seed]), tau)
            fj = flops_to_target(*curve_of(joint[seed]), tau)
            saved = savings(np.nan if fo is None else fo, np.nan if fj is None else fj)
            seeds[seed] = {"opd-multi": fo, "grpo-joint": fj, "savings": float(saved) if np.isfinite(saved) else None,
                           "distill_only": None if fo is None else fo - expert_flops(opd[seed])}
        reached = all(v["savings"] is not None for v in seeds.values())
        est = estimate([v["savings"] for v in seeds.values()], rng_for("full_budget", str(k))) if reached else None
        if est is None:
            verdict = "does not hold: opd-multi never reaches it on every seed"
        elif est.high is not None and est.high < 0:
            verdict = "does not hold"
        elif est.low is not None and est.low > 0:
            verdict = "holds"
        else:
            verdict = "inconclusive"
        rows.append({"gain": k, "tau": tau, "seeds": seeds, "verdict": verdict,
                     "savings": None if est is None else {"value": est.value, "low": est.low, "high": est.high,
                                                          "stat": est.stat}})
    return rows


def analyse(args: argparse.Namespace) -> dict:
    from reports.boards import build_boards
    from reports.findings import claim_savings
    from reports.records import load_many, to_frames
    from reports.stats import estimate, rng_for

    records, bad = [], []
    for method in ("grpo-joint", "opd-multi"):
        found, unreadable = load_many([runs_dir(args, method)])
        records += [r for r in found if r["method"] == method]
        bad += unreadable
    if bad:
        sys.exit(f"full_budget: unreadable records: {bad}")
    boards = [b for b in build_boards(to_frames(records)) if b.key.suite == args.suite]
    joint_boards = [b for b in boards if any(m.method == "grpo-joint" for m in b.methods)]
    opd_boards = [b for b in boards if any(m.method == "opd-multi" for m in b.methods)]
    if len(joint_boards) != 1 or len(opd_boards) != 1:
        sys.exit(f"full_budget: expected joint GRPO's and opd-multi's {args.suite} runs each on one board in "
                 f"{args.out}, found {len(joint_boards)} and {len(opd_boards)}")
    board, opd_board = joint_boards[0], opd_boards[0]
    opd, ref = opd_board.method("opd-multi"), board.method("grpo-joint")

    def est(e) -> dict:
        return {"value": e.value, "low": e.low, "high": e.high, "stat": e.stat}

    by_seed: dict[int, dict] = {}
    reference = {}
    if args.reference:
        ref_records, _ = load_many([args.reference])
        reference = {r["seed"]: r for r in ref_records if r["method"] == "opd-multi" and r["suite"] == args.suite
                     and r["profile"] == args.profile and r["difficulty"] == records[0]["difficulty"]}
    for r in sorted(records, key=lambda r: (r["seed"], r["method"])):
        row = by_seed.setdefault(r["seed"], {})
        row[r["method"]] = {"final_accuracy": r["final_accuracy"], "counted_flops": r["flops"]["counted"],
                            "domain_accuracy": r["final_domain_accuracy"]}
        if r["method"] == "opd-multi":
            stop = replay_kl_rule(r)
            if stop is not None:
                stop["accuracy"] = accuracy_at(r, stop["flops"])
            row["kl_rule_stop"] = stop
            row["expert_accuracy"] = expert_accuracy(args, r)
            row["expert_steps"] = {d: sum(s["phase"] == f"expert:{d}" for s in r["steps"]) for d in r["domains"]}
            row["distillation_cost"] = distillation_cost(r, row["expert_accuracy"])
            row["steps_shared"] = [shared for arm in ARMS if (shared := steps_shared_with(args, r, arm))]
            if r["seed"] in reference:
                rr = reference[r["seed"]]
                row["reference_record"] = {"final_accuracy": rr["final_accuracy"],
                                           "counted_flops": rr["flops"]["counted"],
                                           "cpu": rr["provenance"]["hardware"].get("cpu")}
    costs = [row["distillation_cost"] for row in by_seed.values() if "distillation_cost" in row]
    cost_estimates = {}
    for p in map(str, GAIN_SHARES):
        shares = [c["at"].get(p) and c["at"][p]["share_of_expert_flops"] for c in costs]
        cost_estimates[p] = (est(estimate(shares, rng_for("full_budget", "cost", p)))
                             if shares and all(x is not None for x in shares) else None)
    if board is opd_board:  # one budget: claim 1 exactly as the findings page reads it
        claim = claim_savings(boards)
        claim_rows = [{"measure": row.measure, "estimate": est(row.estimate), "verdict": row.verdict,
                       "note": row.note, "decides": row.decides} for row in claim.rows]
        verdict, minus = claim.verdict, est(opd.relative.minus_reference_at_spend)
    else:  # opd-multi on a larger budget than joint GRPO: no board holds both, so seeds are paired
        claim_rows, verdict, minus = None, None, None
    joint = {r["seed"]: r for r in records if r["method"] == "grpo-joint"}
    opds = {r["seed"]: r for r in records if r["method"] == "opd-multi"}
    return {
        "arm": args.arm, "suite": args.suite, "profile": args.profile, "budget_flops": board.key.budget_flops,
        "opd_budget_flops": opd_board.key.budget_flops,
        "cpu": records[0]["provenance"]["hardware"].get("cpu"),
        "targets": board.targets,
        "claim_rows": claim_rows,
        "verdict": verdict,
        "matched_accuracy": matched_accuracy(board.targets, joint, opds),
        "distillation_cost": cost_estimates,
        "final_accuracy": {"opd-multi": est(opd.final_accuracy), "grpo-joint": est(ref.final_accuracy)},
        "minus_reference_at_spend": minus,
        "counted_flops": {"opd-multi": est(opd.counted_flops), "grpo-joint": est(ref.counted_flops)},
        "seeds": by_seed,
        "_curves": {(r["method"], r["seed"]): sorted((p["flops"], p["accuracy"]) for p in r["curve"])
                    for r in records},
    }


def describe(result: dict) -> str:
    def pct(e: dict, unit: str = "%") -> str:
        if e["value"] is None:
            return "never"
        if e["low"] is None:
            return f"{100 * e['value']:.1f}{unit}"
        return f"{100 * e['value']:.1f}{unit} [{100 * e['low']:.1f}, {100 * e['high']:.1f}]"

    def flops(x: float | None) -> str:
        return "never" if x is None else f"{x:.2e}"

    budget = f"budget {result['budget_flops']:.1e}"
    if result["opd_budget_flops"] != result["budget_flops"]:
        budget = f"budget {result['budget_flops']:.1e} (opd-multi {result['opd_budget_flops']:.1e})"
    lines = [f"{ARM_LABELS[result['arm']]}: {result['suite']} on {result['profile']} ({result['cpu']}), {budget}"]
    if result["claim_rows"] is not None:
        lines.append(f"claim 1 verdict: {result['verdict']}")
        for row in result["claim_rows"]:
            lines.append(f"  {row['measure']}: {pct(row['estimate'])}  {row['verdict']}  {row['note']}")
    else:
        lines.append("matched accuracy, seeds paired (FLOPs to the target: opd-multi / grpo-joint / opd-multi's "
                     "distillation alone; savings)")
        for row in result["matched_accuracy"]:
            per_seed = "; ".join(f"s{seed} {flops(v['opd-multi'])} / {flops(v['grpo-joint'])} / "
                                 f"{flops(v['distill_only'])}" for seed, v in row["seeds"].items())
            est = row["savings"]
            saving = pct(est) if est else "-"
            lines.append(f"  τ{row['gain']:g} = {row['tau']:.3f}: savings {saving}  {row['verdict']}  ({per_seed})")
    final = (f"  final accuracy: opd-multi {pct(result['final_accuracy']['opd-multi'])}, "
             f"grpo-joint {pct(result['final_accuracy']['grpo-joint'])}")
    if result["minus_reference_at_spend"] is not None:
        final += f"; opd-multi minus grpo-joint at opd-multi's spend {pct(result['minus_reference_at_spend'], ' points')}"
    lines.append(final)
    lines.append("distillation's FLOPs, as a share of the experts', to take each share of the experts' gain over "
                 "the base (IQM over seeds [95% interval], where every seed takes it)")
    for p, e in result["distillation_cost"].items():
        lines.append(f"  {float(p):.0%} of the gain: {pct(e) if e else 'not on every seed'}")
    for seed, row in sorted(result["seeds"].items()):
        cost = row.get("distillation_cost")
        if cost is None:
            continue
        shares = ", ".join(f"{float(p):.0%}: " + (f"{at['distill_flops']:.2e} ({100 * at['share_of_expert_flops']:.1f}%)"
                                                   if at else "never") for p, at in cost["at"].items())
        ends = cost["final_gain_share"]
        shared = "; ".join(f"first {x['equal_steps']} steps equal the {x['arm']} run's (of its {x['their_steps']})"
                           for x in row.get("steps_shared", []))
        lines.append(f"  seed {seed}: experts {cost['expert_flops']:.2e} FLOPs, their mean {100 * cost['experts_mean']:.1f}% "
                     f"(base {100 * cost['base']:.1f}%); {shares}; ends with "
                     + ("-" if ends is None else f"{100 * ends:.0f}%") + " of the gain"
                     + (f"; {shared}" if shared else ""))
    lines.append("seed  grpo-joint  opd-multi (FLOPs)      KL rule would stop at        reference record"
                 "       experts on their own domain (GRPO steps; joint GRPO there)")
    for seed, row in sorted(result["seeds"].items()):
        g, o, stop = row.get("grpo-joint"), row.get("opd-multi"), row.get("kl_rule_stop")
        gj = f"{100 * g['final_accuracy']:.1f}%" if g else "-"
        om = f"{100 * o['final_accuracy']:.1f}% ({o['counted_flops']:.2e})" if o else "-"
        st = (f"step {stop['distill_steps']}, {stop['flops']:.2e}: {100 * stop['accuracy']:.1f}%"
              + (" (or sooner: the accuracy rule is on)" if stop["reward_rule"] else "") if stop else "never")
        rr = row.get("reference_record")
        ref = f"{100 * rr['final_accuracy']:.1f}% at {rr['counted_flops']:.2e}" if rr else "-"
        experts = ", ".join(f"{d} {100 * a:.1f}% ({row['expert_steps'][d]}"
                            + (f"; {100 * g['domain_accuracy'][d]:.1f}%)" if g else ")")
                            for d, a in row.get("expert_accuracy", {}).items())
        lines.append(f"{seed:>4}  {gj:>10}  {om:>20}  {st:>27}  {ref:<21}  {experts}")
    return "\n".join(lines)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted(result["seeds"])
    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 4.0), sharey=True, squeeze=False)
    tau = result["targets"].get(0.9)
    for ax, seed in zip(axes[0], seeds):
        for method, colour in (("grpo-joint", "#1f77b4"), ("opd-multi", "#d62728")):
            curve = result["_curves"].get((method, seed))
            if curve:
                label = method if method == "grpo-joint" else ARM_LABELS[result["arm"]]
                ax.plot([f for f, _ in curve], [100 * a for _, a in curve], color=colour, label=label)
        stop = result["seeds"][seed].get("kl_rule_stop")
        if stop:
            ax.axvline(stop["flops"], color="#d62728", linestyle=":", label="where the KL rule stops it")
        cost = result["seeds"][seed].get("distillation_cost")
        if cost:
            ax.axvline(cost["expert_flops"], color="grey", linestyle=":", linewidth=0.8, label="distillation starts")
        experts = result["seeds"][seed].get("expert_accuracy")
        if experts:
            ax.axhline(100 * sum(experts.values()) / len(experts), color="#d62728", linestyle="--", linewidth=0.8,
                       label="its experts, each on its own domain (mean)")
        if tau is not None:
            ax.axhline(100 * tau, color="grey", linestyle="--", linewidth=0.8, label="target τ0.9")
        ax.set_title(f"seed {seed}")
        ax.set_xlabel("counted training FLOPs")
    axes[0][0].set_ylabel(f"held-out accuracy, {result['suite']} (%)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=3, frameon=False)  # below, clear of the curves
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arm", choices=sorted(ARMS), default="to-budget",
                        help="to-budget: distillation's rules off; whole-share: the experts' too; long-distill: "
                             "whole-share's experts, then distillation to twice the budget")
    parser.add_argument("--seeds", default="0,1,2", type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--suite", default="math_code")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--budget", default=None, help="counted training FLOPs (default: the profile's)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--reference", type=Path, default=None,
                        help="a folder of records whose opd-multi runs of the same seeds are shown beside")
    args = parser.parse_args()
    run_missing(args)
    result = analyse(args)
    print(describe(result))
    plot(result, args.out / f"full_budget-{args.arm}.png")
    result.pop("_curves")
    (args.out / f"full_budget-{args.arm}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
