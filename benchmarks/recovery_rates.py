"""Calibrate the recovery protocol's learning rates by single-arm runs (docs/world.md, "Calibrating the
recovery rates").

    OMP_NUM_THREADS=1 python benchmarks/recovery_rates.py OUT_DIR [--seeds 10,11] [--suite four_domain]
        [--profile tiny] [--jobs 2] [--grpo-lrs 1.25e-4,2.5e-4,5e-4] [--distill-lrs 1.25e-4,2.5e-4,5e-4,1e-3]
        [--check-every 2]

Per seed one run of `RecoveryRates` (below, a method plugin, so the ledger meters it as it
meters any method): the recovery protocol's first half exactly as `recover` runs it at the protocol's
budget (learn the domain, freeze the self-teacher, lose the domain to the other domains' GRPO), then,
from that one lost student, each arm at each rate on a copy of its own: GRPO on the domain, and
on-policy distillation from the self-teacher. No arm looks at a target or at the other arm: each runs
to the protocol's cap, its greedy held-out accuracy on the domain checked every `--check-every` steps
on the protocol's check prompts. The seeds' runs are one `bench sweep` into OUT_DIR/runs (one torch
thread each, `--jobs` at a time; a complete run is kept, an interrupted one resumed), its progress on
stderr and in OUT_DIR/runs/sweep.log.

Then, from the records alone, per arm and rate: the mean of its checks after its first step (how
high the arm brought the domain, and kept it, over its whole cap), per seed and over the seeds, and
its best check; the rule of docs/world.md picks each arm's rate from those means. Writes
OUT_DIR/recovery_rates.json and OUT_DIR/recovery_rates.png (each seed's checks per arm and rate) and
prints the table. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.api import RunContext  # noqa: E402
from methods.distill import distill_step  # noqa: E402
from methods.grpo import grpo_step  # noqa: E402
from methods.recover import RecoverConfig, forget, protocol_flops, recover_until  # noqa: E402

ARMS = ("grpo", "opd")
GRPO_LRS = (1.25e-4, 2.5e-4, 5e-4)
DISTILL_LRS = (1.25e-4, 2.5e-4, 5e-4, 1e-3)
# The rule: an arm's default moves to the best rate only when it beats the default by this many points.
# The defaults it is held against are the rates the arms took before this calibration: the world's GRPO
# and distillation rates (`calibrate_world.base_rates`).
MARGIN_POINTS = 1.0


def world_rates(profile: str) -> dict[str, float]:
    """Per arm, the world's rate of its family; the protocol's stages keep the GRPO one."""
    from calibrate_world import base_rates

    rates = base_rates(profile)
    return {"grpo": rates["grpo"], "opd": rates["distill"]}


def arm_phase(arm: str, lr: float) -> str:
    """The ledger phase of `arm` at rate `lr`; no phase's name is the start of another's."""
    return f"recover:{arm}@{lr:.2e}"


def arm_and_rate(phase: str) -> tuple[str, float]:
    """`arm_phase` read back: (arm, rate)."""
    arm, lr = phase.removeprefix("recover:").split("@")
    return arm, float(lr)


@dataclass(frozen=True)
class RecoveryRatesConfig(RecoverConfig):
    """`recover`'s settings plus the protocol's budget (it places the stages and the arms' cap) and
    the rates each arm runs at (`grpo_arm_lr` and `distill.lr` go unused: every arm runs at each of
    its rates); the run's own budget must hold the stages and every arm's cap."""

    protocol_budget: float = 2e13
    grpo_lrs: tuple[float, ...] = GRPO_LRS
    distill_lrs: tuple[float, ...] = DISTILL_LRS

    def __post_init__(self) -> None:
        super().__post_init__()
        # `--set grpo_lrs=a,b` arrives as strings
        object.__setattr__(self, "grpo_lrs", tuple(float(x) for x in self.grpo_lrs))
        object.__setattr__(self, "distill_lrs", tuple(float(x) for x in self.distill_lrs))
        rates = self.grpo_lrs + self.distill_lrs
        if not rates or not all(r > 0 and math.isfinite(r) for r in rates) or not self.protocol_budget > 0:
            raise ValueError("grpo_lrs and distill_lrs must be positive rates, protocol_budget > 0")

    def lrs(self, arm: str) -> tuple[float, ...]:
        return self.grpo_lrs if arm == "grpo" else self.distill_lrs


class RecoveryRates:
    """The recovery protocol's stages once, then every arm at every rate to its cap, from the same lost
    student, each on its own copy and in its own ledger phase."""

    name = "recovery-rates"
    reads_heldout = ("a calibration of the recovery protocol: every arm's checks of the domain's held-out "
                     "accuracy, at each of its candidate rates")
    Config = RecoveryRatesConfig

    def __init__(self, config: RecoveryRatesConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        config = self.config
        domain, teacher = forget(ctx, config, config.protocol_budget)
        if ctx.should_stop():
            return
        cap = protocol_flops(config, config.protocol_budget)[2]
        # every copy is taken from the lost student before any arm trains (a resumed run gets them back)
        policies = {(arm, lr): ctx.clone(ctx.student, arm_phase(arm, lr)) for arm in ARMS for lr in config.lrs(arm)}
        for (arm, lr), policy in policies.items():
            phase = arm_phase(arm, lr)
            sampler = ctx.sampler(phase, [domain])
            if arm == "grpo":
                step = lambda p=policy, s=sampler, c=replace(config.grpo, lr=lr): grpo_step(ctx, p, s, c)  # noqa: E731
            else:
                step = lambda p=policy, s=sampler, c=replace(config.distill, lr=lr): distill_step(  # noqa: E731
                    ctx, p, {domain: teacher}, s, c)
            recover_until(ctx, phase, policy, step, math.inf, cap, config, domain)
        # every check as two numbers, the arm's FLOPs so far and its accuracy (a record's method metrics
        # are numbers): `<phase>/<index>/flops`, `<phase>/<index>/accuracy`
        for phase in (arm_phase(*key) for key in policies):
            for index, (flops, accuracy) in enumerate(ctx.state[phase]["checks"]):
                ctx.report(f"{phase}/{index}/flops", flops)
                ctx.report(f"{phase}/{index}/accuracy", accuracy)


# -- the study: runs and read-out ------------------------------------------------------------------


def budget(grpo_lrs: tuple[float, ...], distill_lrs: tuple[float, ...], protocol_budget: float,
           stage_fraction: float = 0.5) -> float:
    """A run's budget: the protocol's stages and every arm's cap, and half as much again, since each phase
    ends on the step that crosses its share; only the arms' caps end the run, never the budget."""
    cap = (1 - stage_fraction) / 2 * protocol_budget
    return 1.5 * (stage_fraction * protocol_budget + (len(grpo_lrs) + len(distill_lrs)) * cap)


def sets(args: argparse.Namespace) -> dict[str, object]:
    """The plugin's settings, the same for every seed."""
    out = {"grpo.lr": world_rates(args.profile)["grpo"], "check_every": args.check_every,
           "protocol_budget": args.protocol_budget, "grpo_lrs": ",".join(map(repr, args.grpo_lrs)),
           "distill_lrs": ",".join(map(repr, args.distill_lrs))}
    if args.check_size:
        out["check_size"] = args.check_size
    return out


def sweep_command(plugin: str, args: argparse.Namespace, budget: float, settings: dict[str, object]) -> list[str]:
    """The `bench sweep` of every seed's run of `plugin` (a method plugin of a file under benchmarks/):
    into OUT/runs, `--jobs` at a time, evaluating only at the budget's end."""
    cmd = [sys.executable, "-m", "bench.cli", "sweep", "--methods", plugin,
           "--suites", args.suite, "--seeds", ",".join(map(str, args.seeds)), "--profile", args.profile,
           "--runs", str(args.out / "runs"), "--jobs", str(args.jobs), "--budget", repr(budget),
           "--eval-size", str(args.eval_size), "--eval-every", "1.0", "--eval-early", ""]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def seed_run(runs: Path, seed: int) -> Path | None:
    """The run folder of `seed` under `runs` once `bench run` has begun it (its config.json comes first)."""
    found = sorted(path.parent for path in runs.glob(f"*__s{seed}/config.json"))
    return found[0] if found else None


def sweep_records(cmd: list[str], args: argparse.Namespace, name: str) -> list[dict]:
    """Run the sweep `cmd` (one torch thread per run; its runs' progress on stderr and in
    OUT/runs/sweep.log; complete runs kept, interrupted ones resumed); the records, seed by seed. A
    failed sweep: one line that starts with `name`, exit 2."""
    done = subprocess.run(cmd, stdout=sys.stderr, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    if done.returncode:
        print(f"{name}: the sweep failed (exit {done.returncode}); see {args.out / 'runs'}", file=sys.stderr)
        raise SystemExit(2)
    return [json.loads((seed_run(args.out / "runs", seed) / "summary.json").read_text()) for seed in args.seeds]


def seed_list(text: str) -> list[int]:
    """`--seeds`: comma-separated integers, at least one."""
    try:
        seeds = [int(s) for s in text.split(",") if s]
    except ValueError:
        seeds = []
    if not seeds:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    return seeds


def checks_of(record: dict) -> dict[str, list[tuple[float, float]]]:
    """Per arm phase of a `RecoveryRates` record, its checks in order as (the arm's FLOPs, accuracy)."""
    checks: dict[str, dict[int, list[float]]] = {}
    for key, value in record["method_metrics"].items():
        phase, index, what = key.rsplit("/", 2)
        checks.setdefault(phase, {}).setdefault(int(index), [0.0, 0.0])[what == "accuracy"] = value
    return {phase: [tuple(v) for _, v in sorted(rows.items())] for phase, rows in checks.items()}


def arm_rows(records: list[dict]) -> list[dict]:
    """Per record, arm and rate: the mean of its checks after the first (the lost student, the same for
    every arm), its best check, and whether it spent its whole cap (`spent`: its counted FLOPs)."""
    rows = []
    for record in records:
        config = record["method_config"]
        cap = protocol_flops(RecoverConfig(stage_fraction=config["stage_fraction"],
                                           forget_scale=config.get("forget_scale", 1.0)), config["protocol_budget"])[2]
        for phase, checks in checks_of(record).items():
            arm, lr = arm_and_rate(phase)
            later = [a for _, a in checks[1:]]
            spent = sum(r["flops"] for r in record["ledger"] if r["phase"] == phase and r["category"] == "counted")
            rows.append({"seed": record["seed"], "arm": arm, "lr": lr, "checks": len(checks),
                         "lost": checks[0][1], "mean": sum(later) / len(later) if later else math.nan,
                         "best": max(later) if later else math.nan, "spent": spent, "to_cap": spent >= cap})
    return rows


def choose(rows: list[dict], defaults: dict[str, float], margin: float = MARGIN_POINTS / 100) -> dict:
    """Per arm: each rate's mean over seeds of its mean check, the best rate, and the rule's choice (the
    best rate where it beats the default's mean by `margin`, else the default)."""
    out = {}
    for arm in ARMS:
        by_lr: dict[float, list[float]] = {}
        for row in rows:
            if row["arm"] == arm:
                by_lr.setdefault(row["lr"], []).append(row["mean"])
        if not by_lr:
            continue
        means = {lr: sum(v) / len(v) for lr, v in sorted(by_lr.items())}
        best = max(means, key=means.get)
        default = defaults[arm]
        chosen = best if default not in means or means[best] >= means[default] + margin else default
        out[arm] = {"means": means, "best": best, "default": default, "chosen": chosen,
                    "at_edge": best in (min(means), max(means)) and len(means) > 1}
    return out


def plot(records: list[dict], path: Path) -> None:
    """Each seed's checks per arm and rate against the arm's FLOPs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    # one colour per rate, the same in every panel, from the lowest rate to the highest
    lrs = sorted({arm_and_rate(phase)[1] for record in records for phase in checks_of(record)})
    colour = dict(zip(lrs, sns.color_palette("colorblind", len(lrs))))
    fig, axes = plt.subplots(len(records), len(ARMS), figsize=(11, 3.4 * len(records)), squeeze=False)
    for row, record in zip(axes, sorted(records, key=lambda r: r["seed"])):
        checks = checks_of(record)
        for ax, arm in zip(row, ARMS):
            for lr, phase in sorted((arm_and_rate(p)[1], p) for p in checks if arm_and_rate(p)[0] == arm):
                ax.plot([f / 1e12 for f, _ in checks[phase]], [100 * a for _, a in checks[phase]], marker=".",
                        color=colour[lr], label=f"lr {lr:.3g}")
            ax.set_title(f"seed {record['seed']}: {'GRPO' if arm == 'grpo' else 'self-OPD'} arm")
            ax.set_xlabel("the arm's counted FLOPs (e12)")
            ax.set_ylabel("held-out accuracy on the domain (%)")
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def positive_numbers(text: str) -> tuple[float, ...]:
    """Comma-separated positive, finite numbers, at least one (rates, scales)."""
    try:
        values = tuple(float(x) for x in text.split(",") if x)
    except ValueError:
        values = ()
    if not values or not all(v > 0 and math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive numbers, got {text!r}")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=seed_list, default="10,11")
    parser.add_argument("--suite", default="four_domain")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--grpo-lrs", type=positive_numbers, default=GRPO_LRS)
    parser.add_argument("--distill-lrs", type=positive_numbers, default=DISTILL_LRS)
    parser.add_argument("--check-every", type=int, default=2)
    parser.add_argument("--check-size", type=int, default=0, help="held-out prompts per check (default: recover's)")
    parser.add_argument("--protocol-budget", type=float, default=2e13)
    parser.add_argument("--eval-size", type=int, default=100, help="the runner's own evaluations (not read)")
    parser.error = lambda message: parser.exit(2, f"recovery_rates: {message}\n")  # one line, no usage
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.check_every < 1 or args.check_size < 0 or args.eval_size < 1:
        parser.exit(2, "recovery_rates: need --jobs and --check-every >= 1, --check-size >= 0, --eval-size >= 1\n")
    from bench.world.profiles import PROFILES

    if args.profile not in PROFILES:
        parser.exit(2, f"recovery_rates: unknown profile {args.profile!r}; known: {', '.join(PROFILES)}\n")
    cmd = sweep_command(f"{Path(__file__).resolve()}:RecoveryRates", args,
                        budget(args.grpo_lrs, args.distill_lrs, args.protocol_budget), sets(args))
    records = sweep_records(cmd, args, "recovery_rates")
    rows = arm_rows(records)
    chosen = choose(rows, world_rates(args.profile))
    (args.out / "recovery_rates.json").write_text(json.dumps({"rows": rows, "chosen": chosen}, indent=1))
    plot(records, args.out / "recovery_rates.png")
    print("| seed | arm | rate | lost | mean check after the first | best check | checks | FLOPs spent |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in sorted(rows, key=lambda r: (r["arm"], r["lr"], r["seed"])):
        short = "" if r["to_cap"] else " (short of the cap)"
        print(f"| {r['seed']} | {r['arm']} | {r['lr']:.3g} | {100 * r['lost']:.1f}% | {100 * r['mean']:.1f}% "
              f"| {100 * r['best']:.1f}% | {r['checks']} | {r['spent']:.3g}{short} |")
    for arm, c in chosen.items():
        means = ", ".join(f"{lr:.3g}: {100 * m:.1f}%" for lr, m in c["means"].items())
        print(f"{arm}: mean over seeds {means}; best {c['best']:.3g}{' (at the edge)' if c['at_edge'] else ''}; "
              f"the rule keeps or moves the default {c['default']:.3g} to {c['chosen']:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
