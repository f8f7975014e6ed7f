"""opd-multi given its whole budget: does distilling on to the budget change claim 1? (docs/world.md)

    python benchmarks/full_budget.py OUT_DIR [--arm to-budget|whole-share|long-distill] [--seeds 0,1,2]
        [--suite math_code[,four_domain]] [--profile tiny] [--budget FLOPS] [--jobs 2] [--reference leaderboard/records]

Two `bench sweep`s, the commands the study's page on the site shows (each run on one torch thread,
`--jobs` at a time; a run already complete is kept, an interrupted one resumed): joint GRPO into
OUT_DIR/runs, shared by every arm, and opd-multi into OUT_DIR/runs-<arm>. The opd-multi arm trains
its experts one after another, scores each on its own domain's held-out prompts once trained (`--set
score_experts=true`), and has distillation's convergence rules off (`--set distill.steps=1000000`),
so that only the budget ends distillation; with `--arm whole-share` the experts' stopping rule is
off too (`--set expert_patience=0`): each trains for its whole share of the budget (90%, split
evenly by domain) and distillation has the rest. `--arm long-distill` is whole-share at twice joint
GRPO's budget and half the experts' fraction (`--set expert_fraction=0.45`): the same experts, then
distillation on.

Then, from the records alone (the read-outs are in benchmarks/full_budget_readout.py):
- claim 1's metrics as the findings page computes them: savings at each target with their
  intervals, the verdict, final accuracy minus joint GRPO's at opd-multi's spend. Where opd-multi has
  a larger budget no board holds both methods, so the FLOPs to each target are read per seed,
  seeds paired, with opd-multi's distillation FLOPs alone beside them;
- per seed, where the world's KL rule would have stopped distillation, replayed on the step trace
  (the rule reads each step's reverse KL and draws nothing, so up to there the run is the method's
  default run), and the accuracy there, read off the curve as the report reads every curve;
- with `--reference`, the reference opd-multi records of the same seeds;
- to say why, each expert's held-out accuracy on its own domain, as the run reported it;
- distillation's cost: the distillation FLOPs at which the student first takes 50%, 75% and 90% of
  its experts' gain over the base, as a share of the experts' FLOPs;
- how many first steps each opd-multi run shares, value for value, with the same seed's run in
  another arm kept in OUT_DIR.

Writes OUT_DIR/full_budget-<arm>.json and OUT_DIR/full_budget-<arm>.png (each seed's curves with the
replayed stop, where distillation starts, the target and its experts' mean; -<suite> added to the
names for a suite other than math_code) and prints a table. The sweeps' progress goes to stderr and
to each runs folder's sweep.log (each run's own to its progress.log). `python
benchmarks/full_budget_readout.py FIGURE.png JSON...` draws distillation's cost of several studies
in one figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)
from full_budget_readout import accuracy_at, describe, plot, replay_kl_rule  # noqa: E402

from reports.paired import cost_estimates, curve_of, distillation_cost, matched_accuracy  # noqa: E402

# every arm scores its experts on their own domain (`score_experts`): the gain distillation's cost is read against
_ARM = ("--set", "score_experts=true", "--set", "distill.steps=1000000")
ARMS = {"to-budget": _ARM,
        "whole-share": (*_ARM, "--set", "expert_patience=0"),
        "long-distill": (*_ARM, "--set", "expert_patience=0", "--set", "expert_fraction=0.45")}
ARM_LABELS = {"to-budget": "opd-multi, distilling to the budget",
              "whole-share": "opd-multi, experts' whole share, then distilling",
              "long-distill": "opd-multi, the same experts, then distilling on to twice the budget"}
# opd-multi's budget as a multiple of joint GRPO's: at twice the budget and half the experts' fraction,
# the long-distill arm's experts get the whole-share arm's FLOPs and distillation the rest
ARM_BUDGET_SCALE = {"long-distill": 2.0}


def runs_dir(args: argparse.Namespace, method: str) -> Path:
    """Where the study keeps `method`'s runs: joint GRPO's serve every arm."""
    return args.out / ("runs" if method == "grpo-joint" else f"runs-{args.arm}")


def sweeps(args: argparse.Namespace) -> list[list[str]]:
    """The study's two `bench sweep` commands, as its page on the site shows them: joint GRPO at the
    budget, then the arm's opd-multi (at `ARM_BUDGET_SCALE` times it), every suite and seed."""
    from bench.world.profiles import PROFILES

    budget = args.budget or PROFILES[args.profile].budget_flops
    seeds = ",".join(map(str, args.seeds)) if len(args.seeds) > 1 else f"{args.seeds[0]}-{args.seeds[0]}"
    out = []
    for method, extra in (("grpo-joint", ()), ("opd-multi", ARMS[args.arm])):
        scale = ARM_BUDGET_SCALE.get(args.arm, 1.0) if method == "opd-multi" else 1.0
        given = ["--budget", f"{budget * scale:g}".replace("e+", "e")] if args.budget or scale != 1.0 else []
        out.append(["sweep", "--methods", method, "--suites", ",".join(args.suite), "--seeds", seeds,
                    "--profile", args.profile, *given, *extra, "--out", str(runs_dir(args, method)),
                    "--jobs", str(args.jobs)])
    return out


def run_missing(args: argparse.Namespace) -> None:
    """Run the study's sweeps: each makes its runs that have no record yet, resumes the interrupted
    ones and keeps the complete ones. Their progress goes to stderr and each runs folder's sweep.log,
    so that stdout holds the read-out alone."""
    for cmd in sweeps(args):
        print("bench " + " ".join(cmd), file=sys.stderr, flush=True)
        if subprocess.run([sys.executable, "-m", "bench.cli", *cmd], stdout=sys.stderr).returncode:
            sys.exit(f"full_budget: `bench {' '.join(cmd)}` failed; see {cmd[cmd.index('--out') + 1]}/sweep.log")


def expert_accuracy(record: dict) -> dict[str, float]:
    """Each opd-multi expert's greedy held-out accuracy on its own domain (the prompts the run scores
    the student on), as the run reported it once the expert was trained."""
    from reports.paired import experts_heldout

    if (experts := experts_heldout(record)) is None:
        sys.exit(f"full_budget: {record['run_id']} does not report its experts' held-out accuracy (made without "
                 "--set score_experts=true): move it away and run the study again")
    return experts


def steps_shared_with(args: argparse.Namespace, record: dict, arm: str) -> dict | None:
    """How many of the record's first steps equal, value for value, those of the same run in `arm`."""
    other = args.out / f"runs-{arm}" / record["run_id"] / "summary.json"
    if arm == args.arm or not other.is_file():
        return None
    theirs = json.loads(other.read_text())["steps"]
    equal = next((i for i, (a, b) in enumerate(zip(record["steps"], theirs)) if a != b),
                 min(len(record["steps"]), len(theirs)))
    return {"arm": arm, "equal_steps": equal, "their_steps": len(theirs)}


def load(args: argparse.Namespace) -> list[dict]:
    """The study's joint GRPO and opd-multi records of this arm, suite and profile (one OUT_DIR may
    hold several suites' runs)."""
    from reports.records import load_many

    records, bad = [], []
    for method in ("grpo-joint", "opd-multi"):
        found, unreadable = load_many([runs_dir(args, method)])
        records += [r for r in found
                    if r["method"] == method and r["suite"] == args.suite and r["profile"] == args.profile]
        bad += unreadable
    if bad:
        sys.exit(f"full_budget: unreadable records: {bad}")
    return records


def seed_row(args: argparse.Namespace, r: dict, reference: dict[int, dict]) -> dict:
    """What the read-out shows of one opd-multi record beside its seed's joint GRPO run."""
    stop = replay_kl_rule(r)
    if stop is not None:
        stop["accuracy"] = accuracy_at(r, stop["flops"])
    experts = expert_accuracy(r)
    row = {"kl_rule_stop": stop, "expert_accuracy": experts,
           "expert_steps": {d: sum(s["phase"] == f"expert:{d}" for s in r["steps"]) for d in r["domains"]},
           "distillation_cost": distillation_cost(r, experts),
           "steps_shared": [shared for arm in ARMS if (shared := steps_shared_with(args, r, arm))]}
    if r["seed"] in reference:
        rr = reference[r["seed"]]
        row["reference_record"] = {"final_accuracy": rr["final_accuracy"], "counted_flops": rr["flops"]["counted"],
                                   "cpu": rr["provenance"]["hardware"].get("cpu")}
    return row


def analyse(args: argparse.Namespace) -> dict:
    from reports.boards import build_boards
    from reports.findings import claim_savings
    from reports.records import load_many, to_frames

    records = load(args)
    boards = [b for b in build_boards(to_frames(records)) if b.key.suite == args.suite]
    joint_boards = [b for b in boards if any(m.method == "grpo-joint" for m in b.methods)]
    opd_boards = [b for b in boards if any(m.method == "opd-multi" for m in b.methods)]
    if len(joint_boards) != 1 or len(opd_boards) != 1:
        sys.exit(f"full_budget: expected joint GRPO's and opd-multi's {args.suite} runs each on one board in "
                 f"{args.out}, found {len(joint_boards)} and {len(opd_boards)}")
    board, opd_board = joint_boards[0], opd_boards[0]
    opd, ref = opd_board.method("opd-multi"), board.method("grpo-joint")
    reference = {}
    if args.reference:
        ref_records, _ = load_many([args.reference])
        reference = {r["seed"]: r for r in ref_records if r["method"] == "opd-multi" and r["suite"] == args.suite
                     and r["profile"] == args.profile and r["difficulty"] == records[0]["difficulty"]}
    by_seed: dict[int, dict] = {}
    for r in sorted(records, key=lambda r: (r["seed"], r["method"])):
        row = by_seed.setdefault(r["seed"], {})
        row[r["method"]] = {"final_accuracy": r["final_accuracy"], "counted_flops": r["flops"]["counted"],
                            "domain_accuracy": r["final_domain_accuracy"]}
        if r["method"] == "opd-multi":
            row.update(seed_row(args, r, reference))
    claim_rows, verdict, minus = None, None, None  # opd-multi on a larger budget: no board holds both
    if board is opd_board:  # one budget: claim 1 exactly as the findings page reads it
        claim = claim_savings(boards)
        claim_rows = [{"measure": row.measure, "estimate": row.estimate.to_dict(), "verdict": row.verdict,
                       "note": row.note, "decides": row.decides} for row in claim.rows]
        verdict, minus = claim.verdict, opd.relative.minus_reference_at_spend.to_dict()
    by_method = {m: {r["seed"]: r for r in records if r["method"] == m} for m in ("grpo-joint", "opd-multi")}
    return {
        "arm": args.arm, "label": ARM_LABELS[args.arm], "suite": args.suite, "profile": args.profile,
        "budget_flops": board.key.budget_flops, "opd_budget_flops": opd_board.key.budget_flops,
        "cpu": records[0]["provenance"]["hardware"].get("cpu"),
        "targets": board.targets,
        "claim_rows": claim_rows,
        "verdict": verdict,
        "matched_accuracy": [{**row, "savings": row["savings"] and row["savings"].to_dict()} for row in
                             matched_accuracy(board.targets, by_method["grpo-joint"], by_method["opd-multi"])],
        "distillation_cost": {p: e and e.to_dict() for p, e in cost_estimates(
            [row["distillation_cost"] for row in by_seed.values() if "distillation_cost" in row]).items()},
        "final_accuracy": {"opd-multi": opd.final_accuracy.to_dict(), "grpo-joint": ref.final_accuracy.to_dict()},
        "minus_reference_at_spend": minus,
        "counted_flops": {"opd-multi": opd.counted_flops.to_dict(), "grpo-joint": ref.counted_flops.to_dict()},
        "seeds": by_seed,
        "_curves": {(r["method"], r["seed"]): curve_of(r) for r in records},
    }


def positive(kind: type) -> Callable[[str], int | float]:
    """An argparse type: a number of `kind` above 0."""

    def parse(text: str) -> int | float:
        value = kind(text)
        if not value > 0:
            raise ValueError(text)
        return value
    parse.__name__ = f"positive {kind.__name__}"
    return parse


def seed_list(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def suite_list(known: list[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated suites, each one of `known`."""

    def parse(text: str) -> list[str]:
        suites = [x.strip() for x in text.split(",")]
        if bad := [x for x in suites if x not in known]:
            raise argparse.ArgumentTypeError(f"unknown suite(s) {', '.join(bad)}; choose from {', '.join(known)}")
        return list(dict.fromkeys(suites))
    return parse


def result_stem(args: argparse.Namespace) -> str:
    """full_budget-<arm>, with the suite added where it is not math_code, so that one OUT_DIR holds
    both suites' read-outs."""
    return f"full_budget-{args.arm}" + ("" if args.suite == "math_code" else f"-{args.suite}")


def arguments() -> argparse.ArgumentParser:
    from bench.world.profiles import PROFILES
    from tasks.suites import SUITES

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--arm", choices=sorted(ARMS), default="to-budget",
                        help="to-budget: distillation's rules off; whole-share: the experts' too; long-distill: "
                             "whole-share's experts, then distillation to twice the budget")
    parser.add_argument("--seeds", default="0,1,2", type=seed_list, help="comma-separated, e.g. 0,1,2")
    several = sorted(k for k, v in SUITES.items() if len(v) > 1)
    parser.add_argument("--suite", default=["math_code"], type=suite_list(several),
                        help=f"comma-separated, each read out on its own: {', '.join(several)}")
    parser.add_argument("--profile", default="tiny", choices=sorted(PROFILES))
    parser.add_argument("--budget", default=None, type=positive(float),
                        help="counted training FLOPs (default: the profile's)")
    parser.add_argument("--jobs", type=positive(int), default=2)
    parser.add_argument("--reference", type=Path, default=None,
                        help="a folder of records whose opd-multi runs of the same seeds are shown beside")
    return parser


def main() -> None:
    args = arguments().parse_args()
    run_missing(args)
    for one in (argparse.Namespace(**{**vars(args), "suite": suite}) for suite in args.suite):
        result = analyse(one)
        print(describe(result))
        stem = result_stem(one)
        plot(result, one.out / f"{stem}.png")
        result.pop("_curves")
        (one.out / f"{stem}.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
