"""A method page's content: its metrics, ledger, configurations, provenance, per-step traces, the command
that reproduces each run and each run's sample completions.

Plain dicts for the `method.html` template (Jinja autoescapes every value). The per-step traces come
from the records' optional `steps` (docs/records.md): every seed's steps, thinned to at most about
MAX_STEP_POINTS points per run, one panel per statistic the steps carry.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from reports.boards import Board, MethodResult
from reports.colours import method_colour
from reports.columns import METRICS, metric_cell, tau_label
from reports.formatting import fmt
from reports.records import final_accuracy_of
from reports.reproduce import git_commit, run_command
from reports.samples import samples_view

STEP_STATS = ("reward", "zero_adv_share", "reverse_kl", "loss", "grad_norm", "clip_frac", "clip_region",
              "mean_length")
MAX_STEP_PANELS = 9  # statistics beyond these (a plugin may log dozens) are left out of the figure
MAX_STEP_POINTS = 400  # per run; the figure is ~600 px wide, more points would only add bytes
MAX_SAMPLE_RUNS = 3  # runs whose sample completions a page shows (the first seeds); the rest are in their records
_NOT_STATS = {"step", "flops", "phase"}


def thin_indices(phases: Sequence[str], max_points: int = MAX_STEP_POINTS) -> np.ndarray:
    """Indices of the steps a figure keeps: evenly spaced, plus both sides of every phase change.

    Args:
        phases: [S] each step's ledger phase, in step order.
    Returns:
        [<= ~max_points] sorted indices; all of them when S <= max_points. Phase changes are kept (so
        a short phase still shows) unless there are more than max_points / 4 of them.
    """
    n = len(phases)
    if n <= max_points:
        return np.arange(n)
    p = np.asarray(phases, dtype=object)
    change = np.flatnonzero(p[1:] != p[:-1])
    extra = np.r_[change, change + 1] if change.size <= max_points // 4 else np.array([], dtype=int)
    even = np.linspace(0, n - 1, max_points - extra.size).round().astype(int)
    return np.unique(np.r_[even, extra])


def _stat_names(kept: list[list[dict]]) -> list[str]:
    """The statistics present in any kept step: the usual ones first, then the rest by name."""
    found = set().union(*(s.keys() for steps in kept for s in steps)) - _NOT_STATS
    return [s for s in STEP_STATS if s in found] + sorted(found - set(STEP_STATS))


def _column(steps: list[dict], key: str) -> np.ndarray:
    """[S] one statistic of every step, NaN where a step lacks it (or holds null or a non-finite number)."""
    values = np.array([s.get(key) for s in steps], dtype=float)  # None -> NaN; the schema allows numbers only
    return np.where(np.isfinite(values), values, np.nan)


def step_series(runs: Sequence[tuple[int, list[dict] | None]], max_points: int = MAX_STEP_POINTS) -> dict[str, Any]:
    """Per-step traces of a method's runs for `reports.plots.step_traces`.

    Args:
        runs: (seed, the record's `steps` or None) per run.
    Returns:
        {"stats": [names], "phases": [ledger phases in order of first use], "runs": [{"seed", "flops":
        [S'], "phase": [S'] indices into phases, "values": {stat: [S'] floats, NaN where missing}}]};
        S' <= ~max_points. "stats" holds at most MAX_STEP_PANELS statistics with a value somewhere,
        and is empty when there are none (then there is no figure).
    """
    kept = []
    for _, steps in runs:
        steps = steps or []
        idx = thin_indices([s.get("phase", "") for s in steps], max_points)
        kept.append([steps[i] for i in idx])
    phases: dict[str, int] = {}  # name -> index, in order of first use
    out, kept_of = [], []
    for (seed, _), steps in zip(runs, kept):
        if steps:
            codes = np.array([phases.setdefault(str(s.get("phase", "")), len(phases)) for s in steps])
            out.append({"seed": seed, "flops": _column(steps, "flops"), "phase": codes, "values": {}})
            kept_of.append(steps)
    stats = []
    for key in _stat_names(kept_of):
        columns = [_column(steps, key) for steps in kept_of]
        if any(np.isfinite(c).any() for c in columns):
            stats.append(key)
            for r, c in zip(out, columns):
                r["values"][key] = c
        if len(stats) == MAX_STEP_PANELS:
            break
    return {"stats": stats, "phases": list(phases), "runs": out}


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


def _provenance(records: list[dict], marks: dict[str, list[str]] | None = None) -> tuple[list[dict], list[dict]]:
    """Per run its provenance row (`odd`: why the board marks it, or ""), and the package versions."""
    marks = marks or {}
    runs, packages = [], defaultdict(set)
    for r in records:
        p = r.get("provenance") or {}
        hw = p.get("hardware") if isinstance(p.get("hardware"), dict) else {}
        hashes = p.get("model_hashes") if isinstance(p.get("model_hashes"), dict) else {}
        runs.append({"run_id": r["run_id"], "seed": r["seed"], "final": fmt(final_accuracy_of(r), "acc"),
                     "base_hash": str(hashes.get("base", "—")), "world": str(p.get("world_version") or "—"),
                     "odd": "; ".join(marks.get(r["run_id"], [])),
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


def _reproduce(records: list[dict], record_hrefs: dict[str, str]) -> list[dict]:
    """Per run: the command that reproduces it, its commit, its record file and its sample completions."""
    out = []
    for i, r in enumerate(records):
        command = run_command(r)
        out.append({"run_id": r["run_id"], "seed": r["seed"], "command": command["text"], "unset": command["unset"],
                    "needs": command["needs"],
                    "commit": git_commit(r), "record_href": record_hrefs.get(r["run_id"]),
                    "samples": samples_view(r) if i < MAX_SAMPLE_RUNS else None,
                    "has_samples": bool(r.get("samples"))})
    return out


def method_view(board: Board, m: MethodResult, records: list[dict], plot_src: str,
                steps_src: str | None = None, record_hrefs: dict[str, str] | None = None) -> dict[str, Any]:
    """A method page: metrics, curves, per-step traces, ledger breakdown, configs and provenance of its runs.

    record_hrefs: run id -> the link to its record file from the page (the site's records/ copy).
    """
    configs: dict[str, list[int]] = defaultdict(list)
    for r in records:
        configs[json.dumps(r["method_config"], indent=2, sort_keys=True, ensure_ascii=False)].append(r["seed"])
    ledger, categories = _ledger_rows(records)
    runs, packages = _provenance(records, board.run_marks)
    metrics = [{"title": title, "help": help_, **metric_cell(m, name)} for name, (title, _, help_) in METRICS.items()]
    fit = None
    if m.fit is not None:
        fit = {"A": fmt(m.fit.asymptote, "acc"), "B": fmt(m.fit.efficiency, "num"),
               "Cmid": fmt(m.fit.midpoint_flops, "flops"), "R0": fmt(m.fit.base_accuracy, "acc"),
               "rmse": fmt(m.fit.rmse, "num")}
    reproduce = _reproduce(records, record_hrefs or {})
    return {"method": m.method, "colour": method_colour(m.method), "board": board.label, "is_reference": m.is_reference,
            "is_protocol": m.is_protocol,
            "reproduce": reproduce, "has_samples": any(r["samples"] for r in reproduce),
            "samples_elsewhere": [r for r in reproduce if r["has_samples"] and not r["samples"]],
            "n_seeds": m.n_seeds, "seeds": m.seeds, "metrics": metrics, "fit": fit, "plot_src": plot_src,
            "steps_src": steps_src, "configs": [{"text": k, "seeds": v} for k, v in configs.items()],
            "ledger": ledger, "categories": categories, "runs": runs, "packages": packages,
            "targets": [{"name": tau_label(k), "value": fmt(v, "acc")} for k, v in board.targets.items()],
            "budget": fmt(board.key.budget_flops, "flops")}
