"""Studies: one question read on more runs than the board keeps, shown on the site beside it.

A study is a folder: `study.json`, its manifest, and `records/`, its result records.

    study = load_study(Path("leaderboard/studies/claim4-ten-seeds"))
    folders = site_studies(Path("leaderboard"))   # the studies a built site holds

The manifest (schema `opd-bench-study/1`) says what the study asks, the rule it was read by (written
down before its runs), where its design is written, the `bench sweep` command that makes its runs (or a
list of them, where its runs differ in what one sweep sets for all, such as the budget) and the
command that reads them out, which of the paper's claims it reads (1-4), and, for claim 4, whether
the seeds that measurably forgot decide (`"recovery_over": "forgot"`) or every seed does (`"every"`,
as on a board). Its slug is the folder's name. Whether the sweep commands, run at today's code, would
plan exactly the study's records is checked by the caller (`bench report` does), since only the engine
can resolve a command; the site shows the answer. A manifest that cannot be read, has a field it does
not know, or lacks one it needs, is a StudyError with one line that says which.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from reports import plots
from reports.boards import Board, build_boards
from reports.columns import tau_label
from reports.findings import EVERY, FORGOT, PAPER_SHARE, Claim, findings
from reports.formatting import Slugs, fmt, fmt_estimate, is_safe_slug
from reports.metrics import REFERENCE_METHOD, run_forgot
from reports.paired import (GAIN_SHARES, curve_of, distillation_costs, final_accuracy_rows,
                            paired_savings, world)
from reports.records import load_records, to_frames
from reports.reproduce import budget_text
from reports.views import claims_view

STUDY_FILE = "study.json"
STUDY_SCHEMA = "opd-bench-study/1"
STUDIES_DIR = "studies"  # a site's studies: <site>/studies/<slug>/{study.json, records/}
_TEXT = ("title", "question", "rule", "docs", "readout")


class StudyError(ValueError):
    """A study folder that cannot be shown: the message names the folder and what is wrong."""


@dataclass
class Study:
    slug: str
    folder: Path
    title: str
    question: str
    rule: str  # how its verdict is read, written down before its runs
    docs: str  # where its design and result are written, in words ("docs/world.md, ...")
    sweep: tuple[str, ...]  # the `bench sweep` commands that make its runs, together
    readout: str  # the command that reads them out
    claims: tuple[int, ...]
    recovery_over: str = EVERY
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    # the caller's check that `sweep`, resolved by today's code, plans exactly these records together:
    # {"commit": str or None, "uncommitted": code changed since it, "runs": n planned, "differences": [one line
    # each]}; None: not checked
    plan: dict[str, Any] | None = None

    @property
    def manifest(self) -> Path:
        return self.folder / STUDY_FILE

    @property
    def records_dir(self) -> Path:
        return self.folder / "records"


def load_study(folder: Path) -> Study:
    """Read a study folder: its manifest, checked, and its records (invalid ones in `skipped`).

    Raises:
        StudyError: no manifest, one that is not JSON or not this schema, a field missing, empty or
            unknown, a slug that is not safe, or no valid record.
    """
    folder = Path(folder)
    where = f"study {folder}"
    if not is_safe_slug(folder.name):
        raise StudyError(f"{where}: its folder name is its slug and must be lower-case letters, digits and "
                         "hyphens")
    try:
        data = json.loads((folder / STUDY_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyError(f"{where}: no {STUDY_FILE} (a study is a folder with {STUDY_FILE} and records/)") from None
    except (OSError, ValueError) as exc:
        raise StudyError(f"{where}: {STUDY_FILE} cannot be read: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != STUDY_SCHEMA:
        raise StudyError(f"{where}: {STUDY_FILE} must be an object with \"schema\": \"{STUDY_SCHEMA}\"")
    known = {"schema", *_TEXT, "sweep", "claims", "recovery_over"}
    if unknown := sorted(set(data) - known):
        raise StudyError(f"{where}: unknown field(s) {', '.join(unknown)} in {STUDY_FILE}; known: "
                         f"{', '.join(sorted(known))}")
    for name in _TEXT:
        if not isinstance(data.get(name), str) or not data[name].strip():
            raise StudyError(f"{where}: {STUDY_FILE} needs \"{name}\", a non-empty string")
    sweep = [data.get("sweep")] if isinstance(data.get("sweep"), str) else data.get("sweep")
    if (not isinstance(sweep, list) or not sweep
            or not all(isinstance(c, str) and c.strip().startswith("bench sweep ") for c in sweep)):
        raise StudyError(f"{where}: \"sweep\" must be a `bench sweep ...` command or a list of them, got "
                         f"{data.get('sweep')!r}")
    claims = data.get("claims")
    if (not isinstance(claims, list) or not claims
            or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 4 for c in claims)):
        raise StudyError(f"{where}: \"claims\" must be a non-empty list of the claims it reads (1-4)")
    over = data.get("recovery_over", EVERY)
    if over not in (EVERY, FORGOT):
        raise StudyError(f"{where}: \"recovery_over\" must be \"{EVERY}\" or \"{FORGOT}\", got {over!r}")
    records, skipped = load_records(folder / "records")
    if not records:
        raise StudyError(f"{where}: no valid record in {folder / 'records'}"
                         + (f" ({len(skipped)} skipped: {skipped[0][1]})" if skipped else ""))
    return Study(slug=folder.name, folder=folder, sweep=tuple(c.strip() for c in sweep),
                 claims=tuple(sorted(set(claims))), recovery_over=over,
                 records=records, skipped=skipped, **{name: data[name].strip() for name in _TEXT})


def site_studies(site: Path) -> list[Path]:
    """The study folders a built site holds (`<site>/studies/<slug>/study.json`), by slug."""
    return sorted(p.parent for p in (Path(site) / STUDIES_DIR).glob(f"*/{STUDY_FILE}") if p.is_file())


# -- the site's pages -------------------------------------------------------------------------------------
_RECOVERY, _OPD = ("recover", "self-grpo"), ("opd-multi",)
_RUN_COLUMNS = (  # (frames.runs column, heading, unit, methods it is read for or None: every method, the
    # claim it is a quantity of or None); a column is shown where a run of those methods has a value and the
    # study reads its claim (a claim-1 study's opd-multi may run with distillation's rules off, so that its
    # share "at the stopping rule" would be where the budget ended it)
    ("final_accuracy", "final accuracy", "pct", None, None), ("counted_flops", "counted FLOPs", "flops", None, None),
    ("distillation_share", "distillation share (stopping rule)", "pct", _OPD, 2),
    ("distillation_share_plateau", "distillation share (plateau)", "pct", _OPD, 2),
    ("recovery_forgetting", "points of the domain lost", "pts_lost", _RECOVERY, 4),
    ("self_teacher_reduction", "GRPO / self-OPD", "ratio", _RECOVERY, 4),
)


def _value(x: Any, unit: str) -> str:
    if not pd.notna(x):
        return fmt(None, unit)
    return fmt(100 * float(x), "len") if unit == "pts_lost" else fmt(float(x), unit)


def _runs_table(board: Board, runs: pd.DataFrame, record_hrefs: dict[str, str],
               claims: tuple[int, ...]) -> dict[str, Any]:
    ids = [rid for m in board.methods for rid in m.run_ids]
    rows = runs.set_index("run_id").loc[ids]
    columns = [(name, heading, unit, methods) for name, heading, unit, methods, claim in _RUN_COLUMNS
               if (claim is None or claim in claims)
               and rows[name][rows["method"].isin(methods) if methods else slice(None)].notna().any()]
    out = []
    for rid, r in rows.iterrows():
        cells = [_value(r[name] if not methods or r["method"] in methods else None, unit)
                 for name, _, unit, methods in columns]
        out.append({"method": r["method"], "seed": int(r["seed"]), "cells": cells,
                    "forgot": run_forgot(r["recovery_forgetting"], r["recovery_noise"]),
                    "record": record_hrefs[rid]})
    return {"headings": [c[1] for c in columns], "rows": out,
            "forgetting": any(r["forgot"] is not None for r in out)}


def _cost_table(cost: dict[str, Any], slug_of: dict[tuple, str]) -> dict[str, Any]:
    """Distillation's cost on one board, as the study page shows it: per seed and over seeds."""
    b = cost["board"]
    rows = []
    for seed, c in cost["seeds"].items():
        at = []
        for p in GAIN_SHARES:
            x = c["at"].get(str(p))
            at.append(fmt(None, "pct") if x is None else
                      f"{fmt(x['distill_flops'], 'flops')} ({fmt(x['share_of_expert_flops'], 'pct')})")
        rows.append({"seed": seed, "experts": ", ".join(f"{d} {fmt(a, 'pct')}" for d, a in c["experts"].items()),
                     "mean": fmt(c["experts_mean"], "pct"), "base": fmt(c["base"], "pct"),
                     "expert_flops": fmt(c["expert_flops"], "flops"), "at": at,
                     "ends": fmt(c["final_gain_share"], "pct")})
    over = []
    for e in cost["estimates"].values():
        cell = fmt_estimate(e, "pct") if e is not None else {"text": fmt(None, "pct"), "interval": ""}
        over.append(f"{cell['text']} {cell['interval']}".strip())
    return {"slug": slug_of[tuple(vars(b.key).values())], "label": b.label,
            "shares": [f"{p:.0%}" for p in GAIN_SHARES], "rows": rows, "over_seeds": over,
            "paper": PAPER_SHARE.get(b.n_domains), "domains": b.n_domains}


def _cost_json(cost: dict[str, Any]) -> dict[str, Any]:
    """Distillation's cost on one board, for results.json: per share of the gain, the estimate over
    seeds (None unless every seed takes it), and each seed's read-out without its curve."""
    return {"board": cost["board"].label, "budget_flops": cost["board"].key.budget_flops,
            "over_seeds": {p: None if e is None else e.to_dict() for p, e in cost["estimates"].items()},
            "seeds": {str(seed): {k: v for k, v in c.items() if k != "curve"} for seed, c in cost["seeds"].items()}}


def _number(x: Any) -> float | None:
    return float(x) if pd.notna(x) else None


def _figures(study: Study, boards: list[Board], runs: pd.DataFrame) -> list[tuple[str, Any, dict, str]]:
    """(path under the site, figure function, its arguments, caption) of the study's per-seed figures of
    the quantities its claims are decided by: each run's accuracy against FLOPs with joint GRPO's targets
    (claim 1), distillation's share at the plateau and the stop (claim 2), and the recoveries against
    what each student lost (claim 4)."""
    recovery, shares = [], []
    rows = runs.set_index("run_id")
    for colour, b in zip(itertools.cycle(plots.COLOURBLIND), boards):
        for m in b.methods:
            r = rows.loc[m.run_ids]
            if 4 in study.claims and m.method in _RECOVERY and r["self_teacher_reduction"].notna().any():
                lost, noise = r["recovery_forgetting"], r["recovery_noise"]
                recovery.append({"name": b.key.suite, "colour": colour,
                                 "lost": [100 * float(v) if pd.notna(v) else None for v in lost],
                                 "ratio": [_number(v) for v in r["self_teacher_reduction"]],
                                 "forgot": [bool(run_forgot(a, n)) for a, n in zip(lost, noise)]})
            if (2 in study.claims and m.method in _OPD and b.n_domains in PAPER_SHARE
                    and r["distillation_share"].notna().any()):
                shares.append({"name": b.key.suite, "colour": colour, "seeds": [int(v) for v in r["seed"]],
                               "plateau": [_number(v) for v in r["distillation_share_plateau"]],
                               "stop": [_number(v) for v in r["distillation_share"]],
                               "paper": PAPER_SHARE[b.n_domains]})
    folder = f"{STUDIES_DIR}/{study.slug}"
    out = []
    if 1 in study.claims:
        names: set[str] = set()
        for b, groups in _claim1_curves(study, boards):
            targets = [(tau_label(k), tau) for k, tau in sorted(b.targets.items())]
            reads = ("claim 1 reads where each curve first reaches τ₀.₉" if b.key.suite == "math_code"
                     else "context beside claim 1, which is read on math_code")
            name = f"curves-{b.key.suite}-{b.key.difficulty}-{b.key.profile}"
            # joint GRPO on two budgets
            name = name if name not in names else f"{name}-{budget_text(b.key.budget_flops)}"
            names.add(name)
            out.append((f"{folder}/{name}.svg", plots.study_curves,
                        {"groups": groups, "targets": targets},
                        f"{b.key.suite}: each seed's held-out accuracy against counted FLOPs, joint GRPO and opd-multi, "
                        f"with joint GRPO's targets; {reads}."))
    if recovery:
        out.append((f"{folder}/recovery.svg", plots.study_recovery, {"groups": recovery},
                    "Each seed's GRPO / self-OPD recovery FLOPs against the points of the domain its student lost; "
                    "full dots: the student measurably forgot."))
    if shares:
        out.append((f"{folder}/shares.svg", plots.study_shares, {"groups": shares},
                    "Each seed's distillation share of its experts' FLOPs, at the held-out plateau (full) and at the "
                    "stopping rule (faint), with the band within a factor of two of the paper's share."))
    return out


def _claim1_curves(study: Study, boards: list[Board]) -> list[tuple[Board, list[dict]]]:
    """Per board of joint GRPO with targets, math_code's first: (that board, each method's runs' curves),
    joint GRPO's from it and opd-multi's from every board of the same world (its own budget or another)."""
    by_id = {r["run_id"]: r for r in study.records}
    colours = plots.palette([REFERENCE_METHOD, "opd-multi"])
    out = []
    for joint in sorted(boards, key=lambda b: b.key.suite != "math_code"):
        names = {m.method for m in joint.methods}
        if REFERENCE_METHOD not in names or not joint.targets:
            continue
        groups = []
        for b, method in [(joint, REFERENCE_METHOD)] + [(o, "opd-multi") for o in boards if world(o) == world(joint)
                                                        and any(m.method == "opd-multi" for m in o.methods)]:
            curves = [curve_of(by_id[rid]) for rid in b.method(method).run_ids]
            groups.append({"name": f"{method} at {budget_text(b.key.budget_flops)}", "colour": colours[method],
                           "runs": [{"flops": flops, "acc": acc} for flops, acc in curves]})
        if len(groups) > 1:
            out.append((joint, groups))
    return out


def study_view(study: Study, record_files: list[str],
               env_root: str = "../") -> tuple[dict[str, Any], list[Claim], list[tuple[str, Any, dict, str]]]:
    """What a study's page shows: its manifest, its plan check, the claims it reads on its boards (claim 4
    decided over `recovery_over` seeds), its per-seed figures and a table of its runs; and those claims,
    for results.json, and the figures to draw (path under the site, function, arguments, caption).

    record_files: each record's copy in the site, relative to the site's root, in `study.records` order.
    """
    frames = to_frames(study.records)
    boards = build_boards(frames)
    figures = _figures(study, boards, frames.runs)
    claims = [c for c in findings(boards, study.recovery_over) if c.number in study.claims]
    costs = distillation_costs(boards, study.records)
    paired = paired_savings(boards, study.records)  # the methods on two budgets: claim 1 with seeds paired
    claims = [paired if c.number == 1 and not c.rows and paired is not None else c for c in claims]
    for claim in claims:  # claim 1 read on one board: each method's final accuracy beside, as the paired reading has
        if claim.number == 1 and claim is not paired:
            claim.rows.extend(final_accuracy_rows(boards))
    slugs = Slugs()
    slug_of = {tuple(vars(b.key).values()): slugs(f"board-{b.key.suite}-{b.key.difficulty}-{b.key.profile}")
               for b in boards}
    hrefs = {r["run_id"]: env_root + rel for r, rel in zip(study.records, record_files)}
    view = {
        "slug": study.slug, "title": study.title, "question": study.question, "rule": study.rule,
        "docs": study.docs, "sweep": study.sweep, "readout": study.readout,
        "records_dir": f"{STUDIES_DIR}/{study.slug}/records", "n_records": len(study.records),
        "skipped": [(str(p), why) for p, why in study.skipped], "plan": study.plan,
        "claims": claims_view(claims, slug_of, page=""),
        "boards": [{"slug": slug_of[tuple(vars(b.key).values())], "label": b.label,
                    "runs": _runs_table(b, frames.runs, hrefs, study.claims)} for b in boards],
        "figures": [{"src": env_root + rel, "caption": caption} for rel, _, _, caption in figures],
        "costs": [_cost_table(c, slug_of) for c in costs],
        # what results.json adds for the study, beside its claims
        "results": {"distillation_cost": [_cost_json(c) for c in costs]},
    }
    return view, claims, figures
