"""Find, validate and tabulate result records (docs/records.md); nothing else is read by the report.

    records, skipped = load_records(Path("runs"))     # runs/*/summary.json, or a folder of *.json
    frames = to_frames(records)                        # pandas: runs, curves, ledger, domains

A record that cannot be parsed, fails reports.schema (which also requires a complete run), repeats
a run id already loaded, repeats a seed already loaded (same method, suite, difficulty, profile,
suite version, budget and seed: one seed counts once), or belongs to a run directory that a process
is still writing (its lock is held) is skipped, and every skip comes back with its path and reason:
nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports import locks
from reports.metrics import (
    BUDGET_FRACTIONS, accuracy_at_fractions, area_under_curve, distillation_share, expert_tail_share, final_accuracy,
    evaluation_prompts, gain_per_pflop_spent, plateau_distillation_share, recovery_forgetting, self_teacher_reduction,
)
from reports.schema import RecordParseError, parse_record_text, validate_record

MAX_RECORD_BYTES = 64 * 1024 * 1024  # a result record is kilobytes; anything this big is not one
SOURCE_KEY = "_source"  # where a loaded record came from; added by load_records, not part of the schema
RUN_LOCK = ".lock"  # held by the process writing a run directory (bench.store.locked)
SEED_KEY = ("method", "suite", "difficulty", "profile", "suite_version", "budget_flops", "seed")


def record_paths(runs_dir: Path) -> list[Path]:
    """Candidate record files: `<dir>/*/summary.json`, `<dir>/*.json`, `<dir>/records/*.json`."""
    runs_dir = Path(runs_dir)
    found = [*runs_dir.glob("*/summary.json"), *runs_dir.glob("*.json"), *runs_dir.glob("records/*.json")]
    # site.json / results.json of a site built into the same folder are not records
    return sorted({p for p in found if p.is_file() and p.name not in ("site.json", "results.json")})


def _read(path: Path) -> dict[str, Any]:
    size = path.stat().st_size
    if size > MAX_RECORD_BYTES:
        raise RecordParseError(f"file is {size} bytes; a record is at most {MAX_RECORD_BYTES}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RecordParseError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return parse_record_text(text)


def load_records(runs_dir: Path | str) -> tuple[list[dict[str, Any]], list[tuple[Path, str]]]:
    """Load every valid result record under `runs_dir`.

    Args:
        runs_dir: a runs folder (`<run_id>/summary.json` inside) or a folder of record JSON files.
    Returns:
        (records, skipped): valid records in path order, each with `_source` set to its path; and
        (path, reason) for every candidate file that was not used.
    """
    return load_many([Path(runs_dir)])


def _candidates(where: Path) -> list[Path]:
    """A record file itself, a run directory's summary.json, or record_paths of a folder."""
    if where.is_file():
        return [where]
    return [where / "summary.json"] if (where / "summary.json").is_file() else record_paths(where)


def load_many(runs_dirs: Iterable[Path | str]) -> tuple[list[dict[str, Any]], list[tuple[Path, str]]]:
    """load_records over several folders (or record files, or run directories); a run id seen in an
    earlier file is skipped as a duplicate."""
    records: list[dict[str, Any]] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    seeds: dict[tuple, Path] = {}
    for runs_dir in runs_dirs:
        runs_dir = Path(runs_dir)
        if not runs_dir.exists():
            skipped.append((runs_dir, "no such file or directory"))
            continue
        for path in _candidates(runs_dir):
            try:
                record = _read(path)
            except (OSError, RecordParseError) as exc:
                skipped.append((path, str(exc)))
                continue
            reasons = validate_record(record)
            if not reasons and record["run_id"] in seen:
                reasons = [f"duplicate run_id; already loaded from {seen[record['run_id']]}"]
            seed = tuple(record.get(k) for k in SEED_KEY) if not reasons else None
            if seed in seeds:
                reasons = [f"the same method, suite, profile, budget and seed as {seeds[seed]}; one seed counts once"]
            holder = locks.holder(path.parent / RUN_LOCK)
            if not reasons and holder:
                reasons = [f"the run is being written (its directory is locked by PID {holder})"]
            if reasons:
                skipped.append((path, "; ".join(reasons)))
                continue
            seen[record["run_id"]], seeds[seed] = path, path
            records.append({**record, SOURCE_KEY: str(path)})
    return records, skipped


BOARD_COLUMNS = ["profile", "suite", "difficulty", "suite_version", "budget_flops"]


def fraction_column(fraction: float) -> str:
    """The runs frame's column of accuracy at a fraction of the budget: 0.1 -> "accuracy_at_10pct"."""
    return f"accuracy_at_{round(100 * fraction):d}pct"


ACCURACY_AT = [fraction_column(f) for f in BUDGET_FRACTIONS]
RUN_COLUMNS = [
    "run_id", "method", "suite", "difficulty", "profile", "suite_version", "suite_hash", "budget_flops", "seed",
    "status", "n_domains", "eval_size", "base_accuracy", "final_accuracy", *ACCURACY_AT, "auc", "final_mean_length",
    "counted_flops", "shared_flops", "external_flops", "eval_flops", "gain_per_pflop_spent", "distillation_share",
    "distillation_share_plateau", "expert_tail_share", "self_teacher_reduction", "check_size",
    "recovery_forgetting", "recovery_noise", "base_hash",
    "world_version", "rollout", "settings", "phase_streams", "heldout_reads", "cpu", "wall_s", "source",
]


@dataclass(frozen=True)
class Frames:
    """The records as tables.

    runs: one row per run (identity, board key, final numbers, per-run metrics: accuracy at each
        fraction of the budget, area under the curve, distillation shares, ...). Its final accuracy,
        like each domain's in `domains`, is at the budget (`final_accuracy_of`).
    curves: one row per evaluation (run_id, point, flops, accuracy, mean_length, wall_s, phase).
    ledger: one row per ledger row (run_id, category, phase, kind, model, flops, tokens, calls).
    domains: one row per run and domain (run_id, domain, base_accuracy, final_accuracy).
    """

    runs: pd.DataFrame
    curves: pd.DataFrame
    ledger: pd.DataFrame
    domains: pd.DataFrame


def final_accuracy_of(r: dict[str, Any]) -> float:
    """The run's final accuracy as every page reads it: at the budget (`metrics.final_accuracy`), not the
    record's `final_accuracy`, which is its last evaluation's, past the budget where the last step crossed it."""
    return final_accuracy([p["flops"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]], r["budget_flops"])


def final_domain_accuracy_of(r: dict[str, Any]) -> dict[str, float]:
    """Each domain's accuracy at the budget, read on its curve as the suite's is (so that their mean is
    the suite's final accuracy); the record's last evaluation's for a domain some curve point lacks."""
    flops, out = [p["flops"] for p in r["curve"]], {}
    for domain, last in (r.get("final_domain_accuracy") or {}).items():
        points = [(p.get("domain_accuracy") or {}).get(domain) for p in r["curve"]]
        out[domain] = last if None in points else final_accuracy(flops, points, r["budget_flops"])
    return out


def _curve_metrics(r: dict[str, Any]) -> dict[str, float]:
    """Accuracy at each fraction of the budget (the first is 10%) and the area under the curve, one run."""
    f = np.fromiter((p["flops"] for p in r["curve"]), float, len(r["curve"]))
    a = np.fromiter((p["accuracy"] for p in r["curve"]), float, len(r["curve"]))
    at = accuracy_at_fractions(f, a, r["budget_flops"]).tolist()
    return {**dict(zip(ACCURACY_AT, at)), "auc": area_under_curve(f, a, r["budget_flops"])}


def _provenance_str(r: dict[str, Any], *path: str) -> str | None:
    """A string inside the record's provenance (e.g. the base model's weights hash), None if absent."""
    value: Any = r.get("provenance") or {}
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value else None


def settings_text(settings: Any) -> str | None:
    """A record's `settings` (token caps, evaluation schedule, device) as one comparable line, "key=value"
    in key order; None where the record has none (made before they were recorded)."""
    if not isinstance(settings, dict) or not settings:
        return None
    return " ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}" for k, v in sorted(settings.items()))


def _run_row(r: dict[str, Any]) -> dict[str, Any]:
    flops = r["flops"]
    recovery = r.get("recovery") or {}
    forgetting, noise = recovery_forgetting(recovery)
    curve = _curve_metrics(r)
    final = curve[ACCURACY_AT[-1]]  # at 100% of the budget: final_accuracy_of(r)
    return {
        "run_id": r["run_id"], "method": r["method"], "suite": r["suite"], "difficulty": r["difficulty"],
        "profile": r["profile"], "suite_version": r["suite_version"], "suite_hash": r["suite_hash"],
        "budget_flops": float(r["budget_flops"]), "seed": r["seed"], "status": r["status"],
        "n_domains": len(r["domains"]), "eval_size": r.get("eval_size"),
        "base_accuracy": r["base_accuracy"], "final_accuracy": final,
        "final_mean_length": r["final_mean_length"],
        "counted_flops": float(flops["counted"]), "shared_flops": float(flops.get("shared", 0.0)),
        "external_flops": float(flops.get("external", 0.0)), "eval_flops": float(flops.get("eval", 0.0)),
        **curve,
        "gain_per_pflop_spent": gain_per_pflop_spent(final, r["base_accuracy"], flops["counted"]),
        "distillation_share": distillation_share(r["ledger"]),
        "distillation_share_plateau": plateau_distillation_share(
            r["curve"], evaluation_prompts(r.get("eval_size"), len(r["domains"]), r.get("domain_eval_size"))),
        "expert_tail_share": expert_tail_share(r.get("method_metrics"), r["ledger"]),
        "self_teacher_reduction": self_teacher_reduction(r.get("recovery")),
        "check_size": recovery.get("check_size"),
        "recovery_forgetting": forgetting, "recovery_noise": noise,
        "base_hash": _provenance_str(r, "model_hashes", "base"),
        "world_version": _provenance_str(r, "world_version"),
        "rollout": _provenance_str(r, "rollout"),
        "settings": settings_text(r.get("settings")),
        "phase_streams": r.get("phase_streams"),
        "heldout_reads": r.get("heldout_reads"),  # None: a record made before reads were counted
        "cpu": _provenance_str(r, "hardware", "cpu"),
        "wall_s": r.get("wall_s"), "source": r.get(SOURCE_KEY),
    }


def to_frames(records: list[dict[str, Any]]) -> Frames:
    """Tabulate validated records (load_records' first return value)."""
    runs, curves, ledger, domains = [], [], [], []
    for r in records:
        runs.append(_run_row(r))
        rid = r["run_id"]
        for i, p in enumerate(r["curve"]):
            curves.append((rid, i, float(p["flops"]), p["accuracy"], p["mean_length"], p.get("wall_s"), p.get("phase")))
        for row in r["ledger"]:
            ledger.append((rid, row["category"], row["phase"], row["kind"], row["model"], float(row["flops"]),
                           row["tokens"], row["calls"]))
        base = r.get("base_domain_accuracy") or {}
        for domain, acc in final_domain_accuracy_of(r).items():
            domains.append((rid, domain, base.get(domain), acc))
    return Frames(
        runs=pd.DataFrame(runs, columns=RUN_COLUMNS),
        curves=pd.DataFrame(curves, columns=["run_id", "point", "flops", "accuracy", "mean_length", "wall_s", "phase"]),
        ledger=pd.DataFrame(
            ledger, columns=["run_id", "category", "phase", "kind", "model", "flops", "tokens", "calls"]),
        domains=pd.DataFrame(domains, columns=["run_id", "domain", "base_accuracy", "final_accuracy"]),
    )
