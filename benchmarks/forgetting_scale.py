"""Calibrate how long the recovery protocol's student forgets (docs/world.md, "Forgetting for longer").

    OMP_NUM_THREADS=1 python benchmarks/forgetting_scale.py OUT_DIR [--seeds 10,11,12,13,14,15]
        [--suite math_code] [--profile tiny] [--jobs 2] [--scales 1,2,3,4] [--need 5]

Per seed one run of `ForgettingScale` (below, a method plugin, so the ledger meters it as it
meters any method): the protocol's stage on the domain exactly as `recover` runs it, a check of the
student there (the self-teacher) on the protocol's check prompts, then GRPO on the suite's one other
domain, checked again each time that stage's FLOPs reach a scale x the domain's stage. The other
domain's stage is one phase that only grows, so the check at scale k is the lost student that
`recover --set forget_scale=k` starts its arms from. No arm runs: nothing here recovers anything.
The seeds' runs are one `bench sweep` into OUT_DIR/runs (one torch thread each, `--jobs` at a time; a
complete run is kept, an interrupted one resumed), its progress on stderr and in OUT_DIR/runs/sweep.log.

Then, from the records alone, per seed and scale: the self-teacher's and the lost student's
accuracy, the points forgotten and two binomial standard errors of one check at the self-teacher's
accuracy; the rule picks the smallest scale at which at least `--need` seeds forgot by two standard
errors or more (none: the largest, said so). Writes OUT_DIR/forgetting_scale.json and
OUT_DIR/forgetting_scale.png and prints the table. Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from bench.api import RunContext  # noqa: E402
from methods.grpo import grpo_phase  # noqa: E402
from methods.recover import RecoverConfig, heldout_accuracy, protocol_flops  # noqa: E402
from recovery_rates import positive_numbers, seed_list, sweep_command, sweep_records, world_rates  # noqa: E402

SCALES = (1.0, 2.0, 3.0, 4.0)


@dataclass(frozen=True)
class ForgettingScaleConfig(RecoverConfig):
    """`recover`'s settings plus the protocol's budget (it places the domain's stage) and the scales at
    which the lost student is checked; the run's own budget must hold the stage and the largest scale."""

    protocol_budget: float = 2e13
    scales: tuple[float, ...] = SCALES

    def __post_init__(self) -> None:
        super().__post_init__()
        # `--set scales=1,2` arrives as strings
        object.__setattr__(self, "scales", tuple(sorted(float(x) for x in self.scales)))
        if not self.scales or not all(0 < s < math.inf for s in self.scales) or not self.protocol_budget > 0:
            raise ValueError("scales must be positive numbers, protocol_budget > 0")


class ForgettingScale:
    """The protocol's stage on the domain, then the other domain's stage checked at every scale."""

    name = "forgetting-scale"
    reads_heldout = ("a calibration of the recovery protocol: the domain's held-out accuracy, as the protocol "
                     "checks it, after each stage of forgetting")
    Config = ForgettingScaleConfig

    def __init__(self, config: ForgettingScaleConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        config = self.config
        domain = config.domain or ctx.domains[0]
        others = [d for d in ctx.domains if d != domain]
        if domain not in ctx.domains or len(others) != 1:
            raise ValueError(f"forgetting-scale needs a suite of two domains, one of them {domain!r}; "
                             f"this one has {', '.join(ctx.domains)}")
        learn = protocol_flops(config, config.protocol_budget)[0]
        state = ctx.state.setdefault("forgetting", {"teacher": None, "checks": []})
        grpo_phase(ctx, ctx.student, f"stage:{domain}", [domain], learn, config.grpo)
        if ctx.should_stop():
            return
        if state["teacher"] is None:
            state["teacher"] = heldout_accuracy(ctx, ctx.student, domain, config.check_size)
        phase = f"stage:{others[0]}"
        for scale in config.scales[len(state["checks"]):]:
            grpo_phase(ctx, ctx.student, phase, [others[0]], scale * learn, config.grpo)
            if ctx.should_stop():
                return
            state["checks"].append([scale, ctx.phase_flops(phase),
                                    heldout_accuracy(ctx, ctx.student, domain, config.check_size)])
        ctx.report("teacher", state["teacher"])
        for scale, flops, accuracy in state["checks"]:
            ctx.report(f"lost@{scale:g}", accuracy)
            ctx.report(f"flops@{scale:g}", flops)


# -- the study: runs and read-out ------------------------------------------------------------------


def budget(protocol_budget: float, scales: tuple[float, ...]) -> float:
    """A run's budget: the domain's stage and the other's to the largest scale, and half as much again,
    since each stage ends on the step that crosses its share; the scales end the run, never the budget."""
    learn = protocol_flops(RecoverConfig(), protocol_budget)[0]
    return 1.5 * learn * (1 + max(scales))


def sets(args: argparse.Namespace) -> dict[str, object]:
    """The plugin's settings, the same for every seed."""
    return {"grpo.lr": world_rates(args.profile)["grpo"], "protocol_budget": args.protocol_budget,
            "scales": ",".join(map(repr, args.scales))}


def rows(records: list[dict]) -> list[dict]:
    """Per record and scale: the self-teacher, the lost student, the points forgotten, two standard
    errors of one check at the self-teacher's accuracy and whether the student forgot measurably, by
    the criterion the claim 4 read-outs apply (`reports.metrics.recovery_forgetting`, `forgot_measurably`)."""
    from reports.metrics import forgot_measurably, recovery_forgetting

    out = []
    for record in records:
        metrics, size = record["method_metrics"], record["method_config"]["check_size"]
        teacher = metrics["teacher"]
        for scale in record["method_config"]["scales"]:
            lost = metrics.get(f"lost@{scale:g}")
            if lost is None:
                continue
            forgot, noise = recovery_forgetting({"teacher_accuracy": teacher, "lost_accuracy": lost,
                                                 "check_size": size})
            out.append({"seed": record["seed"], "scale": float(scale), "teacher": teacher, "lost": lost,
                        "flops": metrics[f"flops@{scale:g}"], "forgot": forgot, "two_ses": noise,
                        "measurable": forgot_measurably(forgot, noise)})
    return out


def choose(table: list[dict], need: int) -> dict:
    """Per scale, how many seeds forgot measurably; the rule's choice: the smallest scale with at least
    `need`, else the largest (`met` False)."""
    scales = sorted({r["scale"] for r in table})
    counts = {s: sum(r["measurable"] for r in table if r["scale"] == s) for s in scales}
    met = [s for s in scales if counts[s] >= need]
    return {"counts": counts, "need": need, "chosen": met[0] if met else scales[-1], "met": bool(met)}


def plot(table: list[dict], path: Path) -> None:
    """Per seed, the points forgotten against the scale, with two standard errors of a check."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    sns.set_theme(style="whitegrid")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    seeds = sorted({r["seed"] for r in table})
    for seed, colour in zip(seeds, sns.color_palette("colorblind", len(seeds))):
        mine = sorted((r for r in table if r["seed"] == seed), key=lambda r: r["scale"])
        ax.plot([r["scale"] for r in mine], [100 * r["forgot"] for r in mine], marker="o", color=colour,
                label=f"seed {seed}")
    ax.axhline(100 * sum(r["two_ses"] for r in table) / len(table), color="black", linestyle="--",
               label="two standard errors of a check")
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xlabel("the other domain's stage, in multiples of the domain's stage (forget_scale)")
    ax.set_ylabel("points forgotten (self-teacher - lost student)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", type=seed_list, default="10,11,12,13,14,15")
    parser.add_argument("--suite", default="math_code")
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--scales", type=positive_numbers, default=SCALES)
    parser.add_argument("--need", type=int, default=5, help="seeds that must forget measurably at a scale")
    parser.add_argument("--protocol-budget", type=float, default=2e13)
    parser.add_argument("--eval-size", type=int, default=100, help="the runner's own evaluation (not read)")
    parser.error = lambda message: parser.exit(2, f"forgetting_scale: {message}\n")  # one line, no usage
    args = parser.parse_args(argv)
    seeds = args.seeds
    if args.jobs < 1 or not 1 <= args.need <= len(seeds) or args.eval_size < 1:
        parser.exit(2, "forgetting_scale: need --jobs >= 1, --need from 1 to the seeds' count, --eval-size >= 1\n")
    from bench.world.profiles import PROFILES
    from tasks import SUITES

    if args.profile not in PROFILES:
        parser.exit(2, f"forgetting_scale: unknown profile {args.profile!r}; known: {', '.join(PROFILES)}\n")
    if args.suite not in SUITES:
        parser.exit(2, f"forgetting_scale: unknown suite {args.suite!r}; known: {', '.join(SUITES)}\n")
    cmd = sweep_command(f"{Path(__file__).resolve()}:ForgettingScale", args,
                        budget(args.protocol_budget, args.scales), sets(args))
    records = sweep_records(cmd, args, "forgetting_scale")
    table = rows(records)
    chosen = choose(table, args.need)
    (args.out / "forgetting_scale.json").write_text(json.dumps({"rows": table, "chosen": chosen}, indent=1))
    plot(table, args.out / "forgetting_scale.png")
    print("| seed | forget_scale | the other domain's FLOPs | self-teacher | lost student | forgot, points "
          "(two SEs) | measurable |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in sorted(table, key=lambda r: (r["scale"], r["seed"])):
        print(f"| {r['seed']} | {r['scale']:g} | {r['flops']:.3g} | {100 * r['teacher']:.1f}% | "
              f"{100 * r['lost']:.1f}% | {100 * r['forgot']:.1f} ({100 * r['two_ses']:.1f}) | "
              f"{'yes' if r['measurable'] else 'no'} |")
    counts = ", ".join(f"{s:g}: {n} of {len(seeds)}" for s, n in chosen["counts"].items())
    verdict = "meets" if chosen["met"] else f"no scale has {args.need}; the largest is taken"
    print(f"seeds that forgot measurably per scale: {counts}; the rule picks {chosen['chosen']:g} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
