"""Joint GRPO and opd-multi run on different budgets, read with seeds paired (docs/metrics.md).

A board holds the runs of one budget, so a study that gives opd-multi more FLOPs than joint GRPO (to
see how far distillation goes) has the two methods on two boards. Claim 1 is then read seed by seed:
each method's counted FLOPs to joint GRPO's targets on its own board, and opd-multi's savings. And
where opd-multi's records report their experts' held-out accuracy, distillation's cost: the
distillation FLOPs at which the student takes each share of its experts' gain over the base. A study
whose two methods share one board reads claim 1 as the findings page does, with the same context
rows of each method's final accuracy beside it.

    claim = paired_savings(boards, records)     # a findings Claim, or None where no pair on math_code
    costs = distillation_costs(boards, records) # per opd-multi board: each seed's cost and the IQM
    rows = final_accuracy_rows(boards)          # context rows where one math_code board holds both
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reports import metrics
from reports.boards import Board
from reports.columns import tau_label
from reports.formatting import fmt
from reports.reproduce import budget_text
from reports.findings import CONTEXT, NOT_MEASURED, UNSURE, VERDICT_TARGET, Claim, Row, direction
from reports.stats import NONE, Estimate, estimate, rng_for

GAIN_SHARES = (0.5, 0.75, 0.9)  # the student's share of its experts' gain that distillation's cost is read at
EXPERT_METRIC = "expert_heldout_accuracy:"  # + domain: an opd-multi record's score of each expert


def curve_of(record: Mapping[str, Any]) -> tuple[list[float], list[float]]:
    """The record's held-out accuracy curve up to its budget (`metrics.cut_at_budget`): (counted FLOPs,
    accuracy), in FLOP order."""
    f, a = metrics.cut_at_budget([p["flops"] for p in record["curve"]], [p["accuracy"] for p in record["curve"]],
                                 record["budget_flops"])
    return f.tolist(), a.tolist()


def expert_flops(record: Mapping[str, Any]) -> float:
    """The counted FLOPs of the record's expert phases, as the distillation share counts them."""
    return metrics.expert_flops(metrics.phase_flops(record["ledger"]))


def experts_heldout(record: Mapping[str, Any]) -> dict[str, float] | None:
    """Each expert's accuracy on its own domain's held-out prompts, as the run reported it; None where
    the record does not report every domain's (a run made before runs did)."""
    reported = record.get("method_metrics") or {}
    domains = record.get("domains") or []
    if not domains or any(f"{EXPERT_METRIC}{d}" not in reported for d in domains):
        return None
    return {d: float(reported[f"{EXPERT_METRIC}{d}"]) for d in domains}


def distillation_cost(record: Mapping[str, Any], experts: Mapping[str, float]) -> dict[str, Any]:
    """The distillation FLOPs (counted FLOPs past the experts') at which the student's held-out accuracy
    first reaches base + p x (its experts' mean on their own domains - base), for p in GAIN_SHARES,
    each also as a share of the experts' FLOPs; and the share of that gain the student ends with.
    `curve`: each evaluation from distillation's start on as (distillation FLOPs / experts' FLOPs,
    share of the gain)."""
    flops, accuracy = curve_of(record)
    spent = expert_flops(record)
    base, mean = accuracy[0], sum(experts.values()) / len(experts)
    out: dict[str, Any] = {"expert_flops": spent, "base": base, "experts_mean": mean, "final_gain_share": None,
                           "at": {}, "curve": None}
    if mean <= base:  # no gain to take
        return out
    out["final_gain_share"] = (accuracy[-1] - base) / (mean - base)  # at the budget, or where the run stopped
    out["curve"] = [((f - spent) / spent, (a - base) / (mean - base)) for f, a in zip(flops, accuracy) if f >= spent]
    for p in GAIN_SHARES:
        reached = metrics.flops_to_target(flops, accuracy, base + p * (mean - base))
        out["at"][str(p)] = None if reached is None else {"distill_flops": reached - spent,
                                                          "share_of_expert_flops": (reached - spent) / spent}
    return out


def cost_estimates(costs: Sequence[Mapping[str, Any]]) -> dict[str, Estimate | None]:
    """Per share of the gain: the IQM over seeds of distillation's cost as a share of the experts' FLOPs,
    with its 95% bootstrap interval; None unless every seed takes that share."""
    out: dict[str, Estimate | None] = {}
    for p in map(str, GAIN_SHARES):
        shares = [c["at"].get(p) and c["at"][p]["share_of_expert_flops"] for c in costs]
        out[p] = (estimate(shares, rng_for("full_budget", "cost", p))
                  if shares and all(x is not None for x in shares) else None)
    return out


def matched_accuracy(targets: Mapping[float, float], joint: Mapping[int, Mapping[str, Any]],
                     opd: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per target, seeds paired: each method's counted FLOPs to it, the savings 1 - opd-multi's / joint
    GRPO's, and opd-multi's distillation FLOPs alone to it; the IQM of the savings (`savings`, an
    Estimate) with its 95% bootstrap interval where every seed has one (minus infinity where opd-multi
    never reaches the target: it would need unbounded FLOPs), else None; the verdict by the findings
    page's rule, read off that interval; and `why`, the seeds that shaped it ("" when none did). A seed
    with a run of one method only is named and left out, and the verdict is then inconclusive."""
    unpaired = sorted(set(joint) ^ set(opd))
    curves = {seed: (curve_of(opd[seed]), curve_of(joint[seed]), expert_flops(opd[seed]))
              for seed in sorted(set(joint) & set(opd))}
    rows = []
    for k, tau in sorted(targets.items()):
        seeds, saved = {}, {}
        for seed, (opd_curve, joint_curve, spent) in curves.items():
            fo = metrics.flops_to_target(*opd_curve, tau)
            fj = metrics.flops_to_target(*joint_curve, tau)
            saved[seed] = float(metrics.savings(np.nan if fo is None else fo, np.nan if fj is None else fj))
            seeds[seed] = {"opd-multi": fo, "grpo-joint": fj,
                           "savings": saved[seed] if np.isfinite(saved[seed]) else None,
                           "distill_only": None if fo is None else fo - spent}
        missed = [str(seed) for seed, v in seeds.items() if v["opd-multi"] is None and np.isinf(saved[seed])]
        undefined = [str(seed) for seed, x in saved.items() if np.isnan(x)]
        why = [f"opd-multi never reaches it on seed {', '.join(missed)}"] if missed else []
        est = None
        if undefined:  # joint GRPO never reaches it there (or its base already does)
            verdict = NOT_MEASURED
            why.append(f"no savings on seed {', '.join(undefined)}")
        elif saved:  # the findings page's rule: holds when the interval lies above 0, fails below it
            est = estimate(list(saved.values()), rng_for("full_budget", str(k)))
            if est.value is not None and not np.isfinite(est.value):  # the IQM is unbounded below
                est = Estimate(None, est.low, est.high, est.n_seeds, est.stat)
            verdict = direction(est, 0.0, want_above=True)
        else:
            verdict = NOT_MEASURED
        if unpaired:
            why.append(f"seed {', '.join(map(str, unpaired))} has a run of one method only, left out")
            verdict = UNSURE if verdict != NOT_MEASURED else verdict
        rows.append({"gain": k, "tau": tau, "seeds": seeds, "verdict": verdict, "why": "; ".join(why),
                     "savings": est})
    return rows


def world(b: Board) -> tuple:
    """What two boards of one suite, difficulty and world share, whatever their budgets."""
    return b.key.profile, b.key.suite, b.key.difficulty, b.key.suite_version


def _pairs(boards: Sequence[Board]) -> list[tuple[Board, Board]]:
    """(joint GRPO's board, opd-multi's board) of one suite, difficulty and world on different budgets,
    where no board holds both methods of that suite."""
    def has(b: Board, method: str) -> bool:
        return any(m.method == method for m in b.methods)

    together = {world(b) for b in boards if has(b, metrics.REFERENCE_METHOD) and has(b, "opd-multi")}
    return [(j, o) for j in boards for o in boards
            if world(j) == world(o) and world(j) not in together and j.key.budget_flops != o.key.budget_flops
            and has(j, metrics.REFERENCE_METHOD) and has(o, "opd-multi") and j.targets]


def _by_seed(board: Board, method: str, records: Sequence[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    ids = set(board.method(method).run_ids)
    return {int(r["seed"]): r for r in records if r["run_id"] in ids}


def _flops_text(x: float | None) -> str:
    return "never" if x is None else fmt(x, "flops")


def paired_savings(boards: Sequence[Board], records: Sequence[Mapping[str, Any]]) -> Claim | None:
    """Claim 1 where opd-multi and joint GRPO ran on different budgets: per target of joint GRPO's board,
    opd-multi's savings with seeds paired, the verdict reading the savings at tau_0.9 by the findings
    page's rule; beside them, each method's final accuracy. Like the findings page's claim 1, decided
    on math_code alone; the pairs of another suite follow it, every row context. None where no such
    pair of boards on math_code."""
    pairs = sorted(_pairs(boards), key=lambda pair: pair[0].key.suite != "math_code")  # math_code's first
    if not pairs or pairs[0][0].key.suite != "math_code":
        return None
    k = VERDICT_TARGET
    claim = Claim(1, "Multi-teacher OPD matches joint GRPO on math+code with fewer FLOPs",
                  "42% fewer total training FLOPs at matched held-out accuracy (math_code)",
                  "with the two methods on different budgets, seeds are paired: per seed, each method's counted "
                  "FLOPs to joint GRPO's targets (on its own board), and the savings 1 − opd-multi's / joint "
                  "GRPO's. "
                  f"The verdict reads the savings at {tau_label(k)} on math_code: holds when their interval lies "
                  "above 0; does not hold when it lies below 0 (a seed on which opd-multi never reaches it saves "
                  "minus infinity). "
                  "The other targets, both methods' final accuracy and any other suite's pair of boards are shown "
                  "for context",
                  f"savings at matched accuracy at {tau_label(k)}, seeds paired, with its 95% bootstrap interval "
                  "over seeds (docs/metrics.md, \"Runs on different budgets\")")
    for joint_board, opd_board in pairs:
        rows = matched_accuracy(joint_board.targets, _by_seed(joint_board, metrics.REFERENCE_METHOD, records),
                                _by_seed(opd_board, "opd-multi", records))
        where = (f"{opd_board.key.label} · opd-multi at {budget_text(opd_board.key.budget_flops)}, grpo-joint at "
                 f"{budget_text(joint_board.key.budget_flops)}")
        key = tuple(vars(opd_board.key).values())
        claimed = joint_board.key.suite == "math_code"  # the paper's claim: another suite's pair is context
        for row in rows:
            decides = claimed and row["gain"] == k
            per_seed = "; ".join(f"seed {seed}: opd-multi {_flops_text(v['opd-multi'])}, grpo-joint "
                                 f"{_flops_text(v['grpo-joint'])}" for seed, v in row["seeds"].items())
            note = "; ".join(filter(None, (row["why"], per_seed)))
            paper = "42%" if decides else "above 0 (42% at its matched accuracy)"
            paper = paper if claimed else "— (claimed on math_code)"
            claim.rows.append(Row(where, key, f"savings at matched accuracy, {tau_label(row['gain'])} = "
                                  f"{row['tau']:.3f}, seeds paired", paper, row["savings"] or NONE, "pct",
                                  row["verdict"] if decides else CONTEXT, note, decides))
        claim.rows += [_final_accuracy(where, key, board, method)
                       for board, method in ((opd_board, "opd-multi"), (joint_board, metrics.REFERENCE_METHOD))]
    return claim


def _final_accuracy(where: str, key: tuple, board: Board, method: str) -> Row:
    """A context row beside claim 1: `method`'s final accuracy on `board`."""
    return Row(where, key, f"{method}'s final accuracy at {budget_text(board.key.budget_flops)}", "—",
               board.method(method).final_accuracy, "pct", CONTEXT, "", False)


def final_accuracy_rows(boards: Sequence[Board]) -> list[Row]:
    """Where one math_code board holds both methods, each one's final accuracy there: the context rows
    `paired_savings` gives beside claim 1, for a study that reads claim 1 on one board."""
    rows = []
    for board in boards:
        names = {m.method for m in board.methods}
        if board.key.suite != "math_code" or not {"opd-multi", metrics.REFERENCE_METHOD} <= names:
            continue
        key = tuple(vars(board.key).values())
        rows += [_final_accuracy(board.label, key, board, method) for method in ("opd-multi", metrics.REFERENCE_METHOD)]
    return rows


def distillation_costs(boards: Sequence[Board], records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per board with opd-multi runs that report their experts' held-out accuracy: each seed's
    distillation cost (`distillation_cost`) and, per share of the gain, the IQM over seeds of its cost
    as a share of the experts' FLOPs (`cost_estimates`)."""
    out = []
    for b in boards:
        if not any(m.method == "opd-multi" for m in b.methods):
            continue
        by_seed = _by_seed(b, "opd-multi", records)
        experts = {seed: experts_heldout(r) for seed, r in by_seed.items()}
        if not by_seed or any(e is None for e in experts.values()):
            continue
        seeds = {seed: {"experts": experts[seed], **distillation_cost(r, experts[seed])}
                 for seed, r in sorted(by_seed.items())}
        out.append({"board": b, "seeds": seeds, "estimates": cost_estimates(list(seeds.values()))})
    return out
