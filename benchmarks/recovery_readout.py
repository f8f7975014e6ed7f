"""Claim 4's read-out, keeping only the seeds on which the student measurably forgot (docs/world.md,
"Recovery where the student forgets").

    python benchmarks/recovery_readout.py RUNS [RUNS ...] [--suite SUITE] [--figure PNG] [--scatter PNG]

RUNS: runs folders or folders of records, each loaded on its own, so that studies whose runs share
names (`bench sweep --set` keeps a run's name) can be read together; a run found in two folders counts
once. For every protocol, a board (profile, suite, difficulty, budget) at one `forget_scale`, one row per seed:
the self-teacher's and the lost student's accuracy on the domain, their difference against two
standard errors of one check (`reports.metrics.recovery_forgetting`), the target, each arm's FLOPs
to it, the ratio GRPO / self-OPD, self-OPD's best check and, where it never reached the target, the
mean of its checks over the second half of the FLOPs it spent (both where the record keeps its
checks), and the student's final held-out accuracy on the domain, after self-OPD. Then the ratio's estimate and
verdict twice: over the seeds that measurably forgot, and over every seed, as the board computes it.
`--figure PNG` draws each seed's recovery (`plot`); `--scatter PNG` every seed's ratio against how much
it forgot, one colour per protocol (`scatter`). Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reports.boards import build_boards  # noqa: E402
from reports.findings import direction  # noqa: E402
from reports.metrics import forgot_measurably, recovery_forgetting, self_teacher_reduction  # noqa: E402
from reports.records import SEED_KEY, load_many, to_frames  # noqa: E402
from reports.stats import Estimate  # noqa: E402

METHOD = "recover"


def recoveries(records: list[dict]) -> list[dict]:
    """The records of the recovery protocol that carry its result."""
    return [r for r in records if r["method"] == METHOD and r.get("recovery")]


def forget_scale(record: dict) -> float:
    """The protocol's `forget_scale` (records made before it was a setting ran at 1)."""
    return float((record.get("method_config") or {}).get("forget_scale", 1.0))


def protocol(record: dict) -> tuple[str, str, str, float, float]:
    """(profile, suite, difficulty, forget_scale, budget): the records read together, one board's."""
    return record["profile"], record["suite"], record["difficulty"], forget_scale(record), float(record["budget_flops"])


def load(folders: list[Path]) -> tuple[list[dict], int]:
    """The records of every folder, each folder loaded on its own (`load_many`), and how many were left
    out as the same run as one loaded before: same method, board, budget, seed and forget_scale."""
    records, seen, repeated = [], set(), 0
    for folder in folders:
        for r in load_many([folder])[0]:
            key = (*(r.get(k) for k in SEED_KEY), forget_scale(r))
            if key in seen:
                repeated += 1
                continue
            seen.add(key)
            records.append(r)
    return records, repeated


def measured(record: dict) -> bool | None:
    """Whether the student lost more than nothing and at least two standard errors of one check;
    None where the record lacks the accuracies."""
    lost, noise = recovery_forgetting(record.get("recovery"))
    return None if lost is None else forgot_measurably(lost, noise)


def final_domain_accuracy(record: dict) -> float | None:
    """The run's last held-out evaluation on the recovered domain: the self-OPD arm's student (the run's
    deliverable) where self-OPD ran last, on the record's `eval_size` prompts, which include the checks'."""
    return (record.get("final_domain_accuracy") or {}).get(record["recovery"]["domain"])


def best_check(record: dict, arm: str = "opd") -> float | None:
    """An arm's best held-out check, where the record keeps its checks."""
    checks = (record["recovery"].get("checks") or {}).get(arm)
    return max(a for _, a in checks) if checks else None


def late_checks(record: dict, arm: str = "opd") -> float | None:
    """The mean of an arm's checks over the second half of the FLOPs it spent, where it never reached the
    target (where it kept or lost what its first steps gained); None where it did, or without checks."""
    rec = record["recovery"]
    checks = (rec.get("checks") or {}).get(arm)
    if not checks or rec.get(f"{arm}_flops") is not None:
        return None
    half = checks[-1][0] / 2
    late = [a for f, a in checks if f >= half]
    return sum(late) / len(late)


def reduction_estimates(records: list[dict]) -> tuple[Estimate, Estimate] | None:
    """The board's self-teacher reduction over these records (one board) and, as the findings page
    gives it, over the seeds that measurably forgot (`MethodResult.forgot_reduction`); None without
    records."""
    for board in build_boards(to_frames(records)) if records else []:
        for m in board.methods:
            if m.method == METHOD:
                return m.self_teacher_reduction, m.forgot_reduction
    return None


def _flops(value: float | None) -> str:
    return "not within the cap" if value is None else f"{value:.2e}"


def _ratio(value: float | None) -> str:
    if value is None:
        return "undefined"
    return "∞x" if math.isinf(value) else f"{value:.2f}x"


def _estimate(est: Estimate | None) -> str:
    if est is None or est.value is None:
        return "none"
    if est.low is None:
        return f"{_ratio(est.value)} ({est.stat})"
    return f"{_ratio(est.value)} [{_ratio(est.low)}, {_ratio(est.high)}] ({est.stat} of {est.n_seeds})"


def by_protocol(records: list[dict]) -> dict[tuple, list[dict]]:
    """The recovery records by `protocol`, in its order, each group in seed order."""
    groups: dict[tuple, list[dict]] = {}
    for r in recoveries(records):
        groups.setdefault(protocol(r), []).append(r)
    return {key: sorted(group, key=lambda r: r["seed"]) for key, group in sorted(groups.items())}


def _protocol_label(key: tuple) -> str:
    profile, suite, difficulty, scale, budget = key
    return f"{suite} · {difficulty} · {profile} · forget_scale {scale:g} · {budget:.2g} FLOPs"


def readout(records: list[dict]) -> list[str]:
    """The printed read-out, one block per protocol (board and forget_scale)."""
    lines: list[str] = []
    for key, group in by_protocol(records).items():
        lines += [f"## {_protocol_label(key)}", "",
                  "| seed | self-teacher | lost | forgot, points (2 SE) | measured | target | GRPO FLOPs "
                  "| self-OPD FLOPs | GRPO / self-OPD | self-OPD's best check | self-OPD's late checks "
                  "| student at the end |",
                  "| --- " * 12 + "|"]
        for r in group:
            rec = r["recovery"]
            lost, noise = recovery_forgetting(rec)
            lines.append(
                f"| {r['seed']} | {_pct(rec.get('teacher_accuracy'))} | {_pct(rec.get('lost_accuracy'))} "
                f"| {_pts(lost)} ({_pts(noise)}) | {_yes(measured(r))} | {_pct(rec.get('target'))} "
                f"| {_flops(rec['grpo_flops'])} | {_flops(rec['opd_flops'])} | {_ratio(self_teacher_reduction(rec))} "
                f"| {_pct(best_check(r))} | {_pct(late_checks(r))} | {_pct(final_domain_accuracy(r))} |")
        kept = [r for r in group if measured(r)]
        every, forgot = reduction_estimates(group)
        for name, subset, est in (("seeds that measurably forgot", kept, forgot),
                                  ("every seed (the board's)", group, every)):
            verdict = direction(est, 1.0, want_above=True) if est.value is not None else "not measured"
            lines.append(f"- {name}: {len(subset)} of {len(group)}; GRPO / self-OPD {_estimate(est)}: {verdict}")
        lines.append("")
    return lines


def recovery_start(record: dict) -> float | None:
    """Counted FLOPs when the recovery began: the last evaluation before either arm had spent a FLOP."""
    before = [p["flops"] for p in record["curve"]
              if not any((p.get("phase_flops") or {}).get(arm) for arm in ("recover:grpo", "recover:opd"))]
    return max(before) if before else None


def plot(records: list[dict], path: Path) -> None:
    """One panel per seed: the student's held-out accuracy on the domain against its counted FLOPs (it
    learns the domain, loses it to the others, then self-OPD recovers it), the target, and the
    recovery from the lost student: each arm's checks where the record keeps them (GRPO's arm ran on
    a clone, so its checks branch off), else a line to the FLOPs at which GRPO reached the target."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = sorted(records, key=lambda r: (r["profile"], r["suite"], r["seed"]))
    cols = min(3, len(records))
    rows = -(-len(records) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), sharey=True, squeeze=False)
    for ax, r in zip(axes.flat, records):
        rec, domain = r["recovery"], r["recovery"]["domain"]
        # the student's own path: the FLOPs of the GRPO arm (a clone, run first) are not its
        points = []
        for p in r["curve"]:
            accuracy = (p.get("domain_accuracy") or {}).get(domain)
            if accuracy is not None:
                points.append((p["flops"] - (p.get("phase_flops") or {}).get("recover:grpo", 0.0), accuracy))
        points.sort()
        ax.plot([f / 1e12 for f, _ in points], [100 * a for _, a in points], marker=".", linewidth=1.0,
                color="tab:blue", label="student (self-OPD last)")
        ax.axhline(100 * rec["target"], color="grey", linestyle=":", linewidth=0.8, label="target")
        start = recovery_start(r)
        checks = rec.get("checks") or {}
        if start is not None:
            ax.axvline(start / 1e12, color="grey", linewidth=0.6)
            for arm, colour in (("grpo", "tab:orange"), ("opd", "tab:green")):
                if checks.get(arm):
                    ax.plot([(start + f) / 1e12 for f, _ in checks[arm]], [100 * a for _, a in checks[arm]],
                            color=colour, marker=".", markersize=2, linewidth=0.8,
                            label=f"{'GRPO' if arm == 'grpo' else 'self-OPD'}'s checks")
            if not checks and rec.get("grpo_flops") is not None and rec.get("lost_accuracy") is not None:
                ax.plot([start / 1e12, (start + rec["grpo_flops"]) / 1e12],
                        [100 * rec["lost_accuracy"], 100 * rec["target"]], color="tab:orange", marker="o",
                        markersize=3, linewidth=1.2, label="GRPO from the lost student")
        ax.set_title(f"{r['suite']} ({r['profile']}), seed {r['seed']}: GRPO / self-OPD "
                     f"{_ratio(self_teacher_reduction(rec))}", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes.flat[len(records):]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("counted FLOPs (1e12)", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("held-out accuracy on the domain (%)", fontsize=7)
    axes.flat[0].legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def scatter_points(records: list[dict]) -> dict[tuple, tuple[list[tuple[float, float, bool]], int]]:
    """Per protocol (`protocol`): each seed's (points forgotten, GRPO / self-OPD, forgot measurably)
    where the ratio is finite and above 0 (both arms reached the target, one after a step at least),
    and how many seeds it has."""
    out = {}
    for key, group in by_protocol(records).items():
        points = [(recovery_forgetting(r["recovery"])[0], self_teacher_reduction(r["recovery"]), measured(r))
                  for r in group]
        out[key] = ([(100 * lost, ratio, bool(known)) for lost, ratio, known in points
                     if lost is not None and ratio is not None and 0 < ratio < math.inf], len(group))
    return out


def scatter(records: list[dict], path: Path) -> None:
    """Per seed, GRPO / self-OPD (log scale) against the points the student forgot, one colour per protocol:
    filled where it forgot measurably (two standard errors of a check), hollow where not (`scatter_points`
    says which seeds are drawn). Lines at 1x and at the paper's 50x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ratios, handles = [], []
    for i, (key, (shown, n_seeds)) in enumerate(scatter_points(records).items()):
        ratios += [ratio for _, ratio, _ in shown]
        ax.scatter([lost for lost, _, _ in shown], [ratio for _, ratio, _ in shown], s=36, edgecolors=f"C{i}",
                   facecolors=[f"C{i}" if known else "none" for _, _, known in shown], linewidths=1.2)
        handles.append(Line2D([], [], marker="o", linestyle="", color=f"C{i}",
                              label=f"{_protocol_label(key)}: {len(shown)} of {n_seeds} seeds with a ratio"))
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.axhline(50.0, color="grey", linestyle="--", linewidth=0.8)
    ax.text(ax.get_xlim()[0], 50.0, " the paper: up to 50x", va="bottom", fontsize=7, color="grey")
    ax.set_ylim(min(ratios + [1.0]) / 1.5, 80.0)
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if t >= ax.get_ylim()[0]]
    ax.set_yticks(ticks, [f"{t:g}x" for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("points the student forgot (self-teacher minus lost student, on the checks)", fontsize=8)
    ax.set_ylabel("GRPO / self-OPD FLOPs to the target", fontsize=8)
    ax.set_title("filled: forgot measurably (two standard errors of a check); hollow: did not", fontsize=8)
    ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(0.0, 0.9))
    ax.tick_params(labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _pts(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="runs folders or folders of result records")
    parser.add_argument("--suite", help="read only this suite's records")
    parser.add_argument("--figure", type=Path, help="also draw each seed's recovery into this PNG")
    parser.add_argument("--scatter", type=Path, help="also draw each seed's ratio against what it forgot")
    args = parser.parse_args(argv)
    for path in args.runs:
        if not path.is_dir():
            parser.error(f"{path}: not a folder")
    records, repeated = load(args.runs)
    records = [r for r in records if args.suite in (None, r["suite"])]
    if repeated:
        print(f"{repeated} record(s) left out as runs already loaded from an earlier folder", file=sys.stderr)
    if not recoveries(records):
        suite = f" of suite {args.suite}" if args.suite else ""
        parser.error(f"no {METHOD} records{suite} with a recovery block under {', '.join(map(str, args.runs))}")
    print("\n".join(readout(records)))
    if args.figure:
        plot(recoveries(records), args.figure)
        print(f"wrote {args.figure}")
    if args.scatter:
        scatter(recoveries(records), args.scatter)
        print(f"wrote {args.scatter}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
