"""What each page and figure shows: boards, methods and claims turned into plain dicts for templates.

Nothing here writes files or escapes HTML (Jinja autoescapes every value at render time); paths are
built from slugs only (`reports.formatting`), never from names in records.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from reports import figures, plots
from reports.boards import PHASE_GROUPS, Board, MethodResult
from reports.findings import Claim
from reports.formatting import fmt, fmt_estimate
from reports.metrics import interpolate_curve

# (MethodResult attribute, column title, unit, what the column means)
COLUMNS = (
    ("final_accuracy", "Final accuracy", "acc", "held-out accuracy at the budget"),
    ("flops_to_target", "FLOPs to target", "flops", "counted FLOPs to reach the reference's final accuracy"),
    ("savings", "Savings vs ref.", "pct", "1 - FLOPs to target / the reference's"),
    ("accuracy_per_pflop", "Accuracy per PFLOP", "num", "(final - base accuracy) per counted PFLOP"),
    ("mean_length", "Mean length", "len", "mean generated tokens on held-out prompts"),
    ("length_ratio", "Length ratio", "ratio", "mean length / the reference's"),
    ("distillation_share", "Distillation share", "pct", "distillation FLOPs / expert or stage FLOPs"),
)
FIGURE_POINTS = 16  # FLOP values per curve in the board figure: seaborn's cost is per (method, value)
GROUP_NAMES = tuple(name for _, name in PHASE_GROUPS) + ("other",)
BOARD_PLOTS = (
    ("curves", "Accuracy against counted FLOPs (log scale), 95% bootstrap bands"),
    ("pareto", "Final accuracy against counted FLOPs, with the Pareto frontier"),
    ("flops", "Counted FLOPs by phase and by kind"),
    ("length", "Mean response length against final accuracy"),
    ("domains", "Final accuracy per domain, 95% bootstrap intervals"),
)


def _shows_domains(board: Board) -> bool:
    """A board with one domain has no per-domain figure: its bars would repeat the table's final accuracy."""
    return len({d for m in board.methods for d in m.domain_accuracy}) >= 2


def method_href(board_slug: str, method_slug: str) -> str:
    return f"methods/{board_slug}/{method_slug}.html"


def _cell(m: MethodResult, attr: str, unit: str) -> dict[str, str]:
    est = getattr(m, attr)
    if attr == "savings" and m.is_reference:
        return {"text": "reference", "interval": "", "sort": "0.0", "tip": "the reference itself"}
    missing = "not reached" if attr in ("flops_to_target", "savings") and m.flops_to_target.n_seeds and \
        m.flops_to_target.value is None else "—"
    return fmt_estimate(est, unit, missing)


def board_view(board: Board, slug: str, method_slugs: dict[str, str]) -> dict[str, Any]:
    """The index page's tab for one board (row colours: CSS classes c0..c9, the plots' palette order)."""
    rows = []
    for i, m in enumerate(board.methods):
        rows.append({
            "method": m.method, "href": method_href(slug, method_slugs[m.method]), "colour_index": i % 10,
            "is_reference": m.is_reference, "n_seeds": m.n_seeds, "single": m.n_seeds == 1,
            "cells": [_cell(m, attr, unit) for attr, _, unit, _ in COLUMNS],
        })
    return {
        "slug": slug, "label": board.label, "suite": board.key.suite, "difficulty": board.key.difficulty,
        "profile": board.key.profile, "suite_version": board.key.suite_version,
        "budget": fmt(board.key.budget_flops, "flops"), "reference": board.reference,
        "target": fmt(board.target, "acc") if board.target is not None else None,
        "n_runs": sum(m.n_seeds for m in board.methods), "warnings": board.warnings, "rows": rows,
        "plots": [{"src": f"plots/{slug}/{name}.svg", "caption": caption} for name, caption in BOARD_PLOTS
                  if name != "domains" or _shows_domains(board)],
    }


def _series(m: MethodResult, colour: str) -> dict[str, Any]:
    return {"name": m.method, "colour": colour, "reference": m.is_reference, "grid": m.curves.grid.tolist(),
            "mid": m.curve_mid.tolist(), "band_grid": m.band_grid.tolist(),
            "low": None if m.curve_low is None else m.curve_low.tolist(),
            "high": None if m.curve_high is None else m.curve_high.tolist()}


def _point(m: MethodResult, colour: str) -> dict[str, Any]:
    acc, length = m.final_accuracy, m.mean_length
    return {"name": m.method, "colour": colour, "flops": m.counted_flops.value, "acc": acc.value,
            "acc_low": acc.low, "acc_high": acc.high, "length": length.value, "length_low": length.low,
            "length_high": length.high, "run_flops": m.per_run["counted_flops"],
            "run_acc": m.per_run["final_accuracy"], "run_length": m.per_run["final_mean_length"]}


def curve_frame(board: Board, n_points: int = FIGURE_POINTS) -> pd.DataFrame:
    """Every run's curve at `n_points` log-spaced FLOP values (method, run_id, flops, accuracy) for seaborn.

    The values span the board's first positive evaluation to its last FLOP value; runs are carried flat
    to the budget and interpolated as the metrics are (reports.metrics), so the aggregate of the runs
    at a FLOP value is the aggregate curve's value there.
    """
    positive = [g for m in board.methods for g in m.curves.grid if g > 0]
    if not positive:
        return pd.DataFrame({"method": [], "run_id": [], "flops": [], "accuracy": []})
    grid = np.unique(np.geomspace(min(positive), max(positive), n_points))
    methods, run_ids, accuracy = [], [], []
    for m in board.methods:
        for run_id, values in zip(m.run_ids, m.curves.values):
            methods.append(m.method)
            run_ids.append(run_id)
            accuracy.append(interpolate_curve(m.curves.grid, values, grid))
    # object arrays: numpy's fixed-width strings would drop a name's trailing NUL characters
    return pd.DataFrame({"method": np.repeat(np.array(methods, dtype=object), grid.size),
                         "run_id": np.repeat(np.array(run_ids, dtype=object), grid.size),
                         "flops": np.tile(grid, len(run_ids)), "accuracy": np.concatenate(accuracy)})


def domain_frame(board: Board, domains: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy per run and domain on this board (method, run_id, domain, accuracy) for seaborn."""
    method_of = {r: m.method for m in board.methods for r in m.run_ids}
    rows = domains[domains["run_id"].isin(method_of.keys())]
    return pd.DataFrame({"method": rows["run_id"].map(method_of), "run_id": rows["run_id"],
                         "domain": rows["domain"], "accuracy": rows["final_accuracy"].astype(float)})


def plot_jobs(board: Board, slug: str, method_slugs: dict[str, str], colours: dict[str, str],
              curves_by_run: dict[str, tuple], domains: pd.DataFrame) -> list[tuple[str, Callable, dict[str, Any]]]:
    """(path under the site, figure function, keyword arguments) for every figure of a board.

    domains: the records' per-run domain accuracies (reports.records.Frames.domains).
    """
    ms = board.methods
    by_group = []
    for m in ms:
        groups: dict[str, float] = defaultdict(float)
        kinds: dict[str, float] = defaultdict(float)
        for (group, kind), flops in m.flops_by_group.items():
            groups[group] += flops
            kinds[kind] += flops
        by_group.append({"name": m.method, "by_group": dict(groups), "by_kind": dict(kinds)})
    base = ms[0].base_accuracy.value if ms else None
    jobs = [
        (f"plots/{slug}/curves.svg", figures.accuracy_curves,
         {"curves": curve_frame(board), "colours": colours, "reference": board.reference, "base_accuracy": base,
          "title": board.label}),
        (f"plots/{slug}/pareto.svg", plots.pareto, {"points": [_point(m, colours[m.method]) for m in ms]}),
        (f"plots/{slug}/flops.svg", plots.flops_breakdown, {"bars": by_group, "groups": GROUP_NAMES}),
        (f"plots/{slug}/length.svg", plots.length_accuracy, {"points": [_point(m, colours[m.method]) for m in ms]}),
    ]
    if _shows_domains(board):
        jobs.append((f"plots/{slug}/domains.svg", figures.domain_accuracy,
                     {"domains": domain_frame(board, domains), "colours": colours}))
    for m in ms:
        runs = [{"seed": s, "flops": curves_by_run[r][0].tolist(), "acc": curves_by_run[r][1].tolist()}
                for s, r in zip(m.seeds, m.run_ids)]
        fit = None
        if m.fit is not None:
            xs = np.logspace(np.log10(max(m.curves.grid[1] if len(m.curves.grid) > 1 else 1.0, 1.0)),
                             np.log10(board.key.budget_flops), 60)
            fit = {"flops": xs.tolist(), "acc": m.fit.predict(xs).tolist()}
        jobs.append((f"plots/{slug}/m-{method_slugs[m.method]}.svg", plots.method_curves,
                     {"name": m.method, "colour": colours[m.method], "runs": runs,
                      "series": _series(m, colours[m.method]), "fit": fit}))
    return jobs


def _ledger_rows(records: list[dict]) -> tuple[list[dict], dict[str, float]]:
    """Mean FLOPs per (category, phase, kind, model) over a method's runs, with shares of counted."""
    totals: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        for row in r["ledger"]:
            t = totals[(row["category"], row["phase"], row["kind"], row["model"])]
            t[0] += row["flops"] / len(records)
            t[1] += row["tokens"] / len(records)
    counted = sum(v[0] for k, v in totals.items() if k[0] == "counted") or 1.0
    rows = [{"category": k[0], "phase": k[1], "kind": k[2], "model": k[3], "flops": fmt(v[0], "flops"),
             "tokens": f"{v[1]:,.0f}", "share": fmt(v[0] / counted, "pct") if k[0] == "counted" else "",
             "sort": v[0]} for k, v in sorted(totals.items())]
    categories: dict[str, float] = defaultdict(float)
    for r in records:
        for cat, flops in r["flops"].items():
            categories[cat] += float(flops) / len(records)
    return rows, {k: fmt(v, "flops") for k, v in sorted(categories.items())}


def _update_rate(throughput: dict) -> str:
    """`1.2e+10 FLOP/s` for the update steps, with `(41% MFU)` where the record knows the GPU's peak."""
    update = throughput.get("update")
    if not update:
        return "—"
    text = f"{update['flop_per_s']:.2e}"
    return text + (f" ({100 * update['mfu']:.0f}% MFU)" if "mfu" in update else "")


def _provenance(records: list[dict]) -> tuple[list[dict], list[dict]]:
    runs, packages = [], defaultdict(set)
    for r in records:
        p = r.get("provenance") or {}
        hw = p.get("hardware") if isinstance(p.get("hardware"), dict) else {}
        runs.append({"run_id": r["run_id"], "seed": r["seed"], "final": fmt(r["final_accuracy"], "acc"),
                     "counted": fmt(r["flops"]["counted"], "flops"), "wall_s": fmt(r.get("wall_s"), "len"),
                     "update_rate": _update_rate(r.get("throughput") or {}),
                     "code_hash": str(p.get("code_hash", "—")),
                     "suite_hash": str(p.get("suite_hash", r["suite_hash"])),
                     "created": str(p.get("created", "—")),
                     "hardware": ", ".join(f"{k}: {'—' if v is None else v}" for k, v in hw.items()) or "—"})
        for name, version in (p.get("packages") or {}).items():
            packages[str(name)].add(str(version))
    pk = [{"name": n, "versions": ", ".join(sorted(v)), "differ": len(v) > 1} for n, v in sorted(packages.items())]
    return runs, pk


def method_view(board: Board, m: MethodResult, records: list[dict], plot_src: str) -> dict[str, Any]:
    """A method page: metrics, curves, ledger breakdown, configs and provenance of its runs."""
    configs: dict[str, list[int]] = defaultdict(list)
    for r in records:
        configs[json.dumps(r["method_config"], indent=2, sort_keys=True, ensure_ascii=False)].append(r["seed"])
    ledger, categories = _ledger_rows(records)
    runs, packages = _provenance(records)
    metrics = [{"title": title, "help": help_, **_cell(m, attr, unit)} for attr, title, unit, help_ in COLUMNS]
    metrics += [{"title": t, "help": h, **fmt_estimate(getattr(m, a), u)} for a, t, u, h in (
        ("counted_flops", "Counted FLOPs", "flops", "FLOPs charged toward the budget"),
        ("base_accuracy", "Base accuracy", "acc", "accuracy of the starting model"),
        ("self_teacher_reduction", "Self-teacher reduction", "ratio", "recovery FLOPs, GRPO / self-OPD"))]
    fit = None
    if m.fit is not None:
        fit = {"A": fmt(m.fit.asymptote, "acc"), "B": fmt(m.fit.efficiency, "num"),
               "Cmid": fmt(m.fit.midpoint_flops, "flops"), "R0": fmt(m.fit.base_accuracy, "acc"),
               "rmse": fmt(m.fit.rmse, "num")}
    return {"method": m.method, "board": board.label, "is_reference": m.is_reference,
            "n_seeds": m.n_seeds, "seeds": m.seeds, "metrics": metrics, "fit": fit, "plot_src": plot_src,
            "configs": [{"text": k, "seeds": v} for k, v in configs.items()], "ledger": ledger,
            "categories": categories, "runs": runs, "packages": packages,
            "target": fmt(board.target, "acc") if board.target is not None else None,
            "budget": fmt(board.key.budget_flops, "flops")}


def claims_view(claims: list[Claim], board_slugs: dict[tuple, str]) -> list[dict[str, Any]]:
    out = []
    for c in claims:
        rows = [{"board": r.board, "href": f"index.html#{board_slugs[r.board_slug_key]}", "measure": r.measure,
                 "paper": r.paper, "verdict": r.verdict, "note": r.note, **fmt_estimate(r.estimate, r.unit)}
                for r in c.rows]
        out.append({"number": c.number, "title": c.title, "paper": c.paper, "rule": c.rule,
                    "verdict": c.verdict, "rows": rows})
    return out
