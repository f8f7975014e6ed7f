"""The read-outs of benchmarks/full_budget.py, from a study's records alone (docs/world.md).

Per opd-multi record: where the KL rule would have stopped distillation (`replay_kl_rule`). What
distillation cost to take each share of its experts' gain, and each method's FLOPs to each target with
seeds paired, are read by reports.paired, as the study pages read them. Then the printed table
(`describe`) and the figure (`plot`) of the result that `full_budget.analyse` builds.

    python benchmarks/full_budget_readout.py FIGURE.png OUT/full_budget-<arm>.json [...]

draws the students' share of their experts' gain against distillation's FLOPs as a share of the
experts', per seed, for each study's result given (`plot_cost`), beside the paper's shares.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

from reports.paired import GAIN_SHARES, curve_of  # noqa: E402

PAPER_SHARE = {2: 0.052, 4: 0.080}  # the paper's distillation FLOPs as a share of the experts', by domains


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


def accuracy_at(record: dict, flops: float) -> float:
    """The record's held-out accuracy at `flops`, read off its curve as the report reads every curve."""
    from reports.metrics import interpolate_curve

    return float(interpolate_curve(*curve_of(record), [flops])[0])


def pct(e: dict, unit: str = "%") -> str:
    """An estimate (`Estimate.to_dict`) of a fraction as a percentage, with its interval where it has
    one; an unbounded end is written as `Estimate.to_dict` writes it ("-inf")."""
    def end(x: float | str) -> str:
        return x if isinstance(x, str) else f"{100 * x:.1f}"

    if e["value"] is None:
        return "never"
    if e["low"] is None:
        return f"{100 * e['value']:.1f}{unit}"
    return f"{100 * e['value']:.1f}{unit} [{end(e['low'])}, {end(e['high'])}]"


def flops_text(x: float | None) -> str:
    return "never" if x is None else f"{x:.2e}"


def describe(result: dict) -> str:
    """The printed read-out: against joint GRPO, distillation's cost, then one row per seed."""
    budget = f"budget {result['budget_flops']:.1e}"
    if result["opd_budget_flops"] != result["budget_flops"]:
        budget += f" (opd-multi {result['opd_budget_flops']:.1e})"
    lines = [f"{result['label']}: {result['suite']} on {result['profile']} ({result['cpu']}), {budget}"]
    lines += describe_against_joint(result) + describe_cost(result)
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


def describe_against_joint(result: dict) -> list[str]:
    """Claim 1's rows as the findings page reads them where both methods share a budget, else the
    FLOPs to each target with seeds paired; then both methods' final accuracy."""
    if result["claim_rows"] is not None:
        lines = [f"claim 1 verdict: {result['verdict']}"]
        lines += [f"  {row['measure']}: {pct(row['estimate'])}  {row['verdict']}  {row['note']}"
                  for row in result["claim_rows"]]
    else:
        lines = ["matched accuracy, seeds paired (FLOPs to the target: opd-multi / grpo-joint / opd-multi's "
                 "distillation alone; savings)"]
        for row in result["matched_accuracy"]:
            per_seed = "; ".join(f"s{seed} {flops_text(v['opd-multi'])} / {flops_text(v['grpo-joint'])} / "
                                 f"{flops_text(v['distill_only'])}" for seed, v in row["seeds"].items())
            saving = pct(row["savings"]) if row["savings"] else "-"
            verdict = f"{row['verdict']}: {row['why']}" if row["why"] else row["verdict"]
            lines.append(f"  τ{row['gain']:g} = {row['tau']:.3f}: savings {saving}  {verdict}  ({per_seed})")
    final = (f"  final accuracy: opd-multi {pct(result['final_accuracy']['opd-multi'])}, "
             f"grpo-joint {pct(result['final_accuracy']['grpo-joint'])}")
    if result["minus_reference_at_spend"] is not None:
        final += ("; opd-multi minus grpo-joint at opd-multi's spend "
                  f"{pct(result['minus_reference_at_spend'], ' points')}")
    return lines + [final]


def describe_cost(result: dict) -> list[str]:
    """Distillation's cost over seeds, then per seed, with the steps each run shares with another arm's."""
    lines = ["distillation's FLOPs, as a share of the experts', to take each share of the experts' gain over "
             "the base (IQM over seeds [95% interval], where every seed takes it)"]
    lines += [f"  {float(p):.0%} of the gain: {pct(e) if e else 'not on every seed'}"
              for p, e in result["distillation_cost"].items()]
    for seed, row in sorted(result["seeds"].items()):
        cost = row.get("distillation_cost")
        if cost is None:
            continue
        shares = ", ".join(f"{float(p):.0%}: " + (f"{at['distill_flops']:.2e} "
                                                   f"({100 * at['share_of_expert_flops']:.1f}%)" if at else "never")
                           for p, at in cost["at"].items())
        ends = "-" if cost["final_gain_share"] is None else f"{100 * cost['final_gain_share']:.0f}%"
        shared = "".join(f"; first {x['equal_steps']} steps equal the {x['arm']} run's (of its {x['their_steps']})"
                         for x in row.get("steps_shared", []))
        lines.append(f"  seed {seed}: experts {cost['expert_flops']:.2e} FLOPs, their mean "
                     f"{100 * cost['experts_mean']:.1f}% (base {100 * cost['base']:.1f}%); {shares}; ends with {ends} "
                     f"of the gain{shared}")
    return lines


def plot(result: dict, path: Path) -> None:
    """Each seed's curves, with where distillation starts, where the KL rule stops it, its experts'
    mean and the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seeds = sorted(result["seeds"])
    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 4.0), sharey=True, squeeze=False)
    tau = result["targets"].get(0.9)
    for ax, seed in zip(axes[0], seeds):
        for method, colour in (("grpo-joint", "#1f77b4"), ("opd-multi", "#d62728")):
            if (method, seed) in result["_curves"]:
                flops, accuracy = result["_curves"][(method, seed)]
                label = method if method == "grpo-joint" else result["label"]
                ax.plot(flops, [100 * a for a in accuracy], color=colour, label=label)
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


def plot_cost(results: list[dict], path: Path) -> None:
    """Per study result, each seed's share of its experts' gain against distillation's FLOPs as a share
    of the experts', with the levels the cost is read at and the paper's share for that many domains."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from tasks.suites import SUITES

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    colours = plt.get_cmap("tab10").colors
    for i, result in enumerate(results):
        colour, label = colours[i % len(colours)], f"{result['suite']}, {result['arm']} arm"
        for _, row in sorted(result["seeds"].items()):
            curve = (row.get("distillation_cost") or {}).get("curve")
            if curve:
                ax.plot([100 * x for x, _ in curve], [100 * y for _, y in curve], color=colour, linewidth=1.0,
                        label=label)
                label = None  # one legend entry per study
        paper = PAPER_SHARE.get(len(SUITES.get(result["suite"], ())))
        if paper is not None:
            ax.axvline(100 * paper, color=colour, linestyle="--", linewidth=0.8,
                       label=f"the paper's share, {len(SUITES[result['suite']])} domains ({100 * paper:.1f}%)")
    for level in GAIN_SHARES:
        ax.axhline(100 * level, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("distillation FLOPs, % of the experts' FLOPs")
    ax.set_ylabel("student's share of its experts' gain over the base (%)")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description="distillation's cost of several full_budget.py studies, in one figure")
    parser.add_argument("figure", type=Path)
    parser.add_argument("results", type=Path, nargs="+", help="full_budget-<arm>.json files")
    args = parser.parse_args()
    results = []
    for path in args.results:
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            parser.error(f"{path}: {e}")
        if not isinstance(result, dict) or not {"suite", "arm", "seeds"} <= result.keys():
            parser.error(f"{path}: not a result of benchmarks/full_budget.py (full_budget-<arm>.json)")
        results.append(result)
    plot_cost(results, args.figure)
    print(f"wrote {args.figure}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
