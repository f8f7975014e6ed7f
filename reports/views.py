"""What each page and figure shows: boards, methods and claims turned into plain dicts for templates.

Nothing here writes files or escapes HTML (Jinja autoescapes every value at render time); paths are
built from slugs only (`reports.formatting`), never from names in records. The metrics' titles and
the headline columns are `reports.columns`'; method pages are `reports.method_page`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from reports import figures, plots
from reports.boards import PHASE_GROUPS, Board, MethodResult
from reports.colours import method_colour
from reports.columns import COLUMNS, METRICS, metric_cell, tau_label
from reports.findings import Claim
from reports.formatting import fmt, fmt_estimate
from reports.leaders import board_leads, fraction_text, lead_clause
from reports.method_page import step_series
from reports.metrics import interpolate_curve

FIGURE_POINTS = 16  # FLOP values per curve in the board figure: seaborn's cost is per (method, value)
GROUP_NAMES = tuple(name for _, name in PHASE_GROUPS) + ("other",)
BOARD_PLOTS = (
    ("curves", "Accuracy against counted FLOPs (log scale), 95% bootstrap bands"),
    ("frontier", "Pareto frontier of whole curves: the upper envelope of the methods' aggregate curves, "
                 "in the colour of the method on top"),
    ("flops", "Counted FLOPs by phase and by kind"),
    ("length", "Mean response length against final accuracy"),
    ("domains", "Final accuracy per domain, 95% bootstrap intervals"),
)


def _shows_domains(board: Board) -> bool:
    """A board with one domain has no per-domain figure: its bars would repeat the table's final accuracy."""
    return len({d for m in board.methods for d in m.domain_accuracy}) >= 2


def method_href(board_slug: str, method_slug: str) -> str:
    return f"methods/{board_slug}/{method_slug}.html"


def _leads_view(board: Board) -> dict[str, Any]:
    leads = board_leads(board)
    return {"clauses": [{"fraction": f"{lead.fraction:g}", "at": fraction_text(lead.fraction), "leader": lead.leader,
                         "state": lead.state, "text": lead_clause(lead)} for lead in leads]}


def board_view(board: Board, slug: str, method_slugs: dict[str, str]) -> dict[str, Any]:
    """The index page's tab for one board (row colours: each method's own, as in every figure)."""
    rows = []
    for m in board.methods:
        rows.append({
            "method": m.method, "href": method_href(slug, method_slugs[m.method]), "colour": method_colour(m.method),
            "is_reference": m.is_reference, "is_protocol": m.is_protocol, "n_seeds": m.n_seeds,
            "single": m.n_seeds == 1,
            "cells": [metric_cell(m, name) for name in COLUMNS],
        })
    return {
        "slug": slug, "label": board.label, "suite": board.key.suite, "difficulty": board.key.difficulty,
        "profile": board.key.profile, "suite_version": board.key.suite_version,
        "budget": fmt(board.key.budget_flops, "flops"), "reference": board.reference,
        "targets": [{"name": tau_label(k), "value": fmt(v, "acc")} for k, v in board.targets.items()],
        "leads": _leads_view(board),
        "n_runs": sum(m.n_seeds for m in board.methods), "warnings": board.warnings, "rows": rows,
        "columns": [{"name": n, "title": METRICS[n][0], "help": METRICS[n][2]} for n in COLUMNS],
        "plots": [{"src": f"plots/{slug}/{name}.svg", "caption": caption} for name, caption in BOARD_PLOTS
                  if name != "domains" or _shows_domains(board)],
    }


def worlds_view(worlds: list[dict[str, Any]], boards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every world the caller describes or a board runs in: its description and its boards' budgets.

    worlds: build_site's `worlds` ({"profile", "description", ...}); boards: `board_view`s. A board whose
    profile no world describes gets a world with no description; "shown" says a world has boards here.
    """
    described = {str(w.get("profile")): w for w in worlds}
    out = []
    for profile in dict.fromkeys([*described, *(b["profile"] for b in boards)]):
        mine = [{"label": b["label"], "slug": b["slug"], "budget": b["budget"], "reference": b["reference"],
                 "n_runs": b["n_runs"]} for b in boards if b["profile"] == profile]
        description = described.get(profile, {}).get("description")
        out.append({"profile": profile, "description": str(description) if description else None, "boards": mine,
                    "shown": bool(mine)})
    return out


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


def frontier_data(board: Board, colours: dict[str, str]) -> dict[str, Any]:
    """The frontier figure's input: every aggregate curve from the first milestone on, and the envelope.

    The curves are drawn at the frontier's FLOP values, so that where the interpolation is not a
    straight line on a log axis (before a run's first evaluation) they bend as the envelope does.
    """
    fr = board.frontier
    series = [] if fr is None else [{"name": name, "colour": colours[name], "flops": fr.grid.tolist(),
                                     "acc": curve.tolist()} for name, curve in zip(fr.methods, fr.curves)]
    segments = [] if fr is None else [{"name": n, "colour": colours[n], "start": a, "end": b}
                                      for n, a, b in fr.segments]
    envelope = None if fr is None else {"flops": fr.grid.tolist(), "acc": fr.top.tolist(), "leader": fr.leader}
    return {"series": series, "segments": segments, "envelope": envelope}


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


def _flop_bars(board: Board) -> list[dict]:
    out = []
    for m in board.methods:
        groups: dict[str, float] = defaultdict(float)
        kinds: dict[str, float] = defaultdict(float)
        for (group, kind), flops in m.flops_by_group.items():
            groups[group] += flops
            kinds[kind] += flops
        out.append({"name": m.method, "by_group": dict(groups), "by_kind": dict(kinds)})
    return out


def _method_jobs(board: Board, m: MethodResult, paths: tuple[str, str], colour: str, curves_by_run: dict,
                 steps_by_run: dict) -> list[tuple[str, Callable, dict[str, Any]]]:
    """A method page's figures (paths: `method_plot_paths`): its curves (every seed, the aggregate, the
    fit) and, where the records carry them, its per-step traces."""
    runs = [{"seed": s, "flops": curves_by_run[r][0].tolist(), "acc": curves_by_run[r][1].tolist()}
            for s, r in zip(m.seeds, m.run_ids)]
    fit = None
    if m.fit is not None:
        xs = np.logspace(np.log10(max(m.curves.grid[1] if len(m.curves.grid) > 1 else 1.0, 1.0)),
                         np.log10(board.key.budget_flops), 60)
        fit = {"flops": xs.tolist(), "acc": m.fit.predict(xs).tolist()}
    jobs = [(paths[0], plots.method_curves, {"name": m.method, "colour": colour, "runs": runs,
                                                     "series": _series(m, colour), "fit": fit})]
    traces = step_series([(s, steps_by_run.get(r)) for s, r in zip(m.seeds, m.run_ids)])
    if traces["stats"]:
        jobs.append((paths[1], plots.step_traces, {"name": m.method, "traces": traces}))
    return jobs


def method_plot_paths(slug: str, method_slug: str) -> tuple[str, str]:
    """(curves, step traces) figure paths under the site for one method page."""
    return f"plots/{slug}/m-{method_slug}.svg", f"plots/{slug}/s-{method_slug}.svg"


def plot_jobs(board: Board, slug: str, method_slugs: dict[str, str], colours: dict[str, str],
              curves_by_run: dict[str, tuple], domains: pd.DataFrame,
              steps_by_run: dict[str, list | None] | None = None) -> list[tuple[str, Callable, dict[str, Any]]]:
    """(path under the site, figure function, keyword arguments) for every figure of a board.

    colours: method -> colour (`reports.plots.palette`: each method's own, on every board); domains:
    the records' per-run domain accuracies (reports.records.Frames.domains); steps_by_run: run_id ->
    the record's `steps` (None or missing: no trace figure).
    """
    ms = board.methods
    base = ms[0].base_accuracy.value if ms else None
    jobs = [
        (f"plots/{slug}/curves.svg", figures.accuracy_curves,
         {"curves": curve_frame(board), "colours": colours, "reference": board.reference, "base_accuracy": base,
          "title": board.label}),
        (f"plots/{slug}/frontier.svg", plots.frontier, frontier_data(board, colours)),
        (f"plots/{slug}/flops.svg", plots.flops_breakdown, {"bars": _flop_bars(board), "groups": GROUP_NAMES}),
        (f"plots/{slug}/length.svg", plots.length_accuracy, {"points": [_point(m, colours[m.method]) for m in ms]}),
    ]
    if _shows_domains(board):
        jobs.append((f"plots/{slug}/domains.svg", figures.domain_accuracy,
                     {"domains": domain_frame(board, domains), "colours": colours}))
    for m in ms:
        jobs += _method_jobs(board, m, method_plot_paths(slug, method_slugs[m.method]), colours[m.method],
                             curves_by_run, steps_by_run or {})
    return jobs


def claims_view(claims: list[Claim], board_slugs: dict[tuple, str], page: str = "index.html") -> list[dict[str, Any]]:
    """The claims for a template; each row's board links to `page#<board slug>`."""
    out = []
    for c in claims:
        rows = [{"board": r.board, "href": f"{page}#{board_slugs[r.board_slug_key]}", "measure": r.measure,
                 "paper": r.paper, "verdict": r.verdict, "decides": r.decides, "note": r.note,
                 **fmt_estimate(r.estimate, r.unit)} for r in c.rows]
        out.append({"number": c.number, "title": c.title, "paper": c.paper, "rule": c.rule, "basis": c.basis,
                    "verdict": c.verdict, "rows": rows,
                    "worlds": [{"profile": w, "verdict": v} for w, v in c.world_verdicts.items()]})
    return out
