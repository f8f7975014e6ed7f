"""Claim 2's read-out from opd-multi records: per seed, distillation's share of the experts' FLOPs at the
held-out plateau and at the stopping rule, then each share's IQM with its 95% interval and verdict, as
the findings page computes them (docs/world.md, "Claim 2 over ten seeds on four_domain").

    python benchmarks/distillation_share_readout.py RUNS [RUNS ...] [--figure PNG]

RUNS: runs folders or folders of result records. One block per board with opd-multi records of two or
four domains (the paper gives a share for those only). `--figure PNG` draws each seed's two shares
beside the paper's share and the band the verdict reads (`plot`). Bad input: one line, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reports.boards import build_boards  # noqa: E402
from reports.findings import Claim, claim_distillation_share  # noqa: E402
from reports.metrics import distillation_share, evaluation_prompts, plateau_distillation_share  # noqa: E402
from reports.records import load_many, to_frames  # noqa: E402

METHOD = "opd-multi"
PAPER_SHARE = {2: 0.052, 4: 0.080}  # the paper's distillation share by number of domains
BAND = 2.0  # the verdict's factor around the paper's share (reports.findings.within_factor)


def shares(record: dict) -> tuple[float | None, float | None]:
    """(share at the stopping rule, share at the held-out plateau) of one opd-multi record."""
    return (distillation_share(record["ledger"]),
            plateau_distillation_share(record["curve"], evaluation_prompts(
                record.get("eval_size"), len(record["domains"]), record.get("domain_eval_size"))))


def boards_of(records: list[dict]) -> dict[tuple[str, str, str], list[dict]]:
    """opd-multi records with a paper share, by (profile, suite, difficulty), each by seed."""
    out: dict[tuple[str, str, str], list[dict]] = {}
    for r in records:
        if r["method"] == METHOD and len(r["domains"]) in PAPER_SHARE:
            out.setdefault((r["profile"], r["suite"], r["difficulty"]), []).append(r)
    return {key: sorted(group, key=lambda r: r["seed"]) for key, group in sorted(out.items())}


def readings(records: list[dict]) -> dict[tuple[str, str, str], tuple[list[dict], list[tuple], Claim]]:
    """Per board (`boards_of`): its records, each one's `shares`, and claim 2 as the findings page
    computes it from them, each computed once for the read-out and the figure."""
    return {key: (group, [shares(r) for r in group], claim_distillation_share(build_boards(to_frames(group))))
            for key, group in boards_of(records).items()}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def readout(boards: dict) -> list[str]:
    """The printed read-out of `readings`: per board a row per seed, then the findings page's rows for
    claim 2."""
    lines: list[str] = []
    for key, (group, seed_shares, claim) in boards.items():
        paper = PAPER_SHARE[len(group[0]["domains"])]
        lines += [f"## {' · '.join(key)} (the paper: {_pct(paper)}; the band: {_pct(paper / BAND)} to "
                  f"{_pct(paper * BAND)})", "",
                  "| seed | final accuracy | counted FLOPs | share at the stopping rule | share at the plateau |",
                  "| --- " * 5 + "|"]
        for r, (stop, plateau) in zip(group, seed_shares):
            lines.append(f"| {r['seed']} | {_pct(r['final_accuracy'])} | {r['flops']['counted']:.2e} "
                         f"| {_pct(stop)} | {_pct(plateau)} |")
        for row in claim.rows:
            est = row.estimate
            interval = "" if est.low is None else f" [{100 * est.low:.1f}, {100 * est.high:.1f}]"
            lines.append(f"- {row.measure}: {_pct(est.value)}{interval} ({est.stat} of {est.n_seeds}): {row.verdict}")
        lines += [f"- claim 2 on this board: {claim.verdict}", ""]
    return lines


def plot(boards: dict, path: Path) -> None:
    """One panel per board of `readings`: each seed's share at the stopping rule and at the plateau
    (dots), their IQM with its 95% interval (a square with bars), the paper's share and the band within
    a factor of two of it, which the verdict reads."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(boards), figsize=(4.2 * len(boards), 3.4), squeeze=False, sharey=True)
    for ax, (key, (group, seed_shares, claim)) in zip(axes.flat, boards.items()):
        paper = PAPER_SHARE[len(group[0]["domains"])]
        ax.axhspan(100 * paper / BAND, 100 * paper * BAND, color="tab:green", alpha=0.12,
                   label=f"within x{BAND:g} of the paper's share")
        ax.axhline(100 * paper, color="tab:green", linestyle="--", linewidth=0.9, label=f"the paper: {_pct(paper)}")
        for x, where in enumerate(("stopping rule", "plateau")):
            values = [100 * pair[x] for pair in seed_shares if pair[x] is not None]
            offsets = [(i - (len(values) - 1) / 2) * 0.025 for i in range(len(values))]
            ax.scatter([x + 0.12 + o for o in offsets], values, s=18, color=f"C{x}", alpha=0.7, zorder=3)
            est = next(row.estimate for row in claim.rows if where in row.measure)
            if est.value is not None and est.low is not None:
                ax.errorbar([x - 0.18], [100 * est.value], yerr=[[100 * (est.value - est.low)],
                                                                 [100 * (est.high - est.value)]],
                            fmt="s", color=f"C{x}", capsize=4, markersize=5, zorder=4)
        ax.set_xticks([0, 1], ["at the stopping rule", "at the held-out plateau"], fontsize=8)
        ax.set_xlim(-0.5, 1.5)
        ax.set_title(f"{key[1]} ({key[0]}), {len(group)} seeds", fontsize=9)
        ax.tick_params(labelsize=7)
    axes.flat[0].set_ylabel("distillation FLOPs / experts' FLOPs (%)", fontsize=8)
    axes.flat[0].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="runs folders or folders of result records")
    parser.add_argument("--figure", type=Path, help="also draw each seed's shares into this PNG")
    args = parser.parse_args(argv)
    for path in args.runs:
        if not path.is_dir():
            parser.error(f"{path}: not a folder")
    records, _ = load_many(args.runs)
    boards = readings(records)
    if not boards:
        parser.error(f"no {METHOD} records of two or four domains under {', '.join(map(str, args.runs))}")
    print("\n".join(readout(boards)))
    if args.figure:
        plot(boards, args.figure)
        print(f"wrote {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
