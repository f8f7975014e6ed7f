"""Build the static leaderboard site from result records: `bench report --runs DIR --out leaderboard/`.

    summary = build_site([Path("runs")], Path("leaderboard"))

Writes, under out_dir: index.html (what the site measures and at what scale, a tab per board with
sortable tables and figures, and an About section on the method), methods/<board>/<method>.html (one
page per method and board, with the command that reproduces each run and its sample completions),
findings.html (the paper's claims beside ours, and the studies), studies/<slug>.html with
studies/<slug>/{study.json, records/} (each study given: its question, rule, commands and verdicts;
reports.studies), plots/**.svg, static/ (CSS and JS), results.csv, results.json, records/<run>.json
(a copy of every record used, so `bench report --runs leaderboard/records --out leaderboard/`
rebuilds the site from itself) and site.json (every page and file written). Fully static: no
network, no CDN, works from file://. Every string from a record or a study's manifest is autoescaped
by Jinja and every path is made of slugs. Once every file is written, the files a previous build's
site.json lists and this build did not write or read are removed, so pages of methods that left the
leaderboard do not linger and a build that fails half-way leaves the previous site whole; nothing
else in out_dir is touched. A build that would delete the record files of runs it
does not read, or a study it is not given, refuses first (SiteOverwriteError) unless forced.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd

from reports import figures, plots
from reports.boards import Board, build_boards, curves_by_run, gain_name
from reports.findings import PAPER, PAPER_ID, PAPER_TITLE, findings
from reports.formatting import Slugs, csv_safe
from reports.leaders import board_leads, lead_sentence
from reports.method_page import method_view
from reports.metrics import REFERENCE_METHOD
from reports.output import SiteOverwriteError, Writer, building, check_overwrite, remove_previous
from reports.records import SOURCE_KEY, Frames, load_many, to_frames
from reports.reproduce import commits, seeds_text, site_command, site_seeds
from reports.stats import CURVE_REPS, DEFAULT_REPS
from reports.studies import STUDIES_DIR, STUDY_FILE, Study, StudyError, study_view
from reports.views import board_view, claims_view, method_href, method_plot_paths, plot_jobs, worlds_view

__all__ = ["SiteOverwriteError", "SiteSummary", "StudyError", "build_site"]  # the errors build_site raises

_HERE = Path(__file__).parent
SITE_SCHEMA = "opd-bench-site/1"
# 2: matched-FLOP and matched-accuracy metrics at several targets; accuracy_per_pflop is gain_per_pflop_spent
RESULTS_SCHEMA = "opd-bench-results/2"
NOTES = {
    "metrics": "Definitions: docs/metrics.md. Each value is an aggregate over seeds (interquartile mean from 3 "
               "seeds, else the mean) with a 95% percentile-bootstrap interval (_low, _high) that resamples "
               "whole runs.",
    "targets": "tau_k = base + k x (reference final - base) for k in 0.5, 0.75, 0.9 (k50, k75, k90); "
               "reference = grpo-joint on the same board.",
    "gain_per_pflop_spent": "gain_per_pflop_spent = (final - base accuracy) / counted PFLOPs. It rewards stopping "
                            "early: a run that stops after a small gain beats one that goes on to a larger gain. "
                            "Do not rank methods by it; compare at matched FLOPs or matched accuracy instead.",
}


@dataclass
class SiteSummary:
    """What build_site wrote: paths are relative to out_dir, skipped records come with reasons."""

    out_dir: Path
    n_records: int
    skipped: list[tuple[Path, str]]
    boards: list[str]
    pages: list[str]
    record_files: list[str] = field(default_factory=list)  # records/<slug>.json: the records it was built from
    files: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,  # every template, whatever its extension: record strings are untrusted
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
    )


def _place(writer: Writer, rel: str, source: Path) -> None:
    """A file the site keeps as read: kept where it already is (a rebuild from itself), else copied."""
    if (writer.root / rel).resolve() == source.resolve():
        writer.keep(rel)
    else:
        # the file as read: records carry their per-step traces, and encoding a thousand of them
        # again took ~0.5 s of a build
        writer.copy(rel, source)


def _write_records(records: list[dict[str, Any]], writer: Writer, folder: str = "records") -> list[str]:
    """Copy each record used into <folder>/<slug of its run id>.json, so the site can be rebuilt from itself."""
    slugs, out = Slugs(), []
    for r in records:
        rel = f"{folder}/{slugs(r['run_id'])}.json"
        _place(writer, rel, Path(r[SOURCE_KEY]))
        out.append(rel)
    return out


def _write_studies(studies: list[Study], writer: Writer, env: jinja2.Environment,
                   common: dict[str, Any]) -> tuple[list[dict], list[dict], list[dict]]:
    """Each study's page (studies/<slug>.html), manifest and records (studies/<slug>/); returns (pages,
    the findings page's list of studies, results.json's studies)."""
    pages, listed, results = [], [], []
    for study in studies:
        folder = f"{STUDIES_DIR}/{study.slug}"
        _place(writer, f"{folder}/{STUDY_FILE}", study.manifest)
        record_files = _write_records(study.records, writer, f"{folder}/records")
        view, claims, figures = study_view(study, record_files)
        for path, func, kwargs, _ in figures:
            writer.draw(path, func, kwargs)
        rel = f"{folder}.html"
        writer.write(rel, env.get_template("study.html").render(root="../", s=view, **common))
        pages.append({"path": rel, "kind": "study", "title": study.title, "study": study.slug})
        listed.append({"href": rel, "title": study.title, "question": study.question, "plan": study.plan,
                       "verdicts": {c.number: c.verdict for c in claims}})
        results.append({"slug": study.slug, "title": study.title, "question": study.question, "rule": study.rule,
                        "docs": study.docs, "sweep": list(study.sweep), "readout": study.readout,
                        "recovery_over": study.recovery_over, "plan_check": study.plan,
                        "run_ids": [r["run_id"] for r in study.records], "record_files": record_files,
                        "findings": _claims_json(claims), **view["results"]})
    return pages, listed, results


def _results_json(boards: list[Board], slugs: dict, claims, skipped, generated: str) -> dict[str, Any]:
    out = []
    for b in boards:
        methods = [{
            "method": m.method, "is_reference": m.is_reference, "is_protocol": m.is_protocol, "n_seeds": m.n_seeds,
            "seeds": m.seeds,
            "run_ids": m.run_ids,
            "metrics": {name: est.to_dict() for name, est in m.metrics().items()},
            "fit": None if m.fit is None else {"asymptote": m.fit.asymptote, "efficiency": m.fit.efficiency,
                                               "midpoint_flops": m.fit.midpoint_flops, "rmse": m.fit.rmse},
            "domain_accuracy": m.domain_accuracy,
        } for m in b.methods]
        out.append({**{k: v for k, v in vars(b.key).items()}, "slug": slugs[tuple(vars(b.key).values())],
                    "n_domains": b.n_domains, "reference": b.reference,
                    "targets": {gain_name(k): tau for k, tau in b.targets.items()},
                    "frontier": [{"method": n, "from_flops": lo, "to_flops": hi} for n, lo, hi in
                                 (b.frontier.segments if b.frontier else [])],
                    "leads": lead_sentence(board_leads(b)),
                    "warnings": b.warnings, "methods": methods})
    return {"schema": RESULTS_SCHEMA, "generated": generated, "notes": NOTES, "boards": out,
            "findings": _claims_json(claims), "skipped": [{"path": str(p), "reason": r} for p, r in skipped]}


def _claims_json(claims: list) -> list[dict[str, Any]]:
    return [{"number": c.number, "title": c.title, "paper": c.paper, "verdict": c.verdict, "basis": c.basis,
             "rows": [{"board": r.board, "measure": r.measure, "paper": r.paper, "estimate": r.estimate.to_dict(),
                       "verdict": r.verdict, "decides": r.decides, "note": r.note} for r in c.rows]}
            for c in claims]


def _number(value: float | str | None) -> float:
    """A metric as a CSV number: infinity ("inf" in results.json) is written inf, an undefined one empty (NaN)."""
    return math.nan if value is None else float(value)


def _results_csv(results: dict[str, Any]) -> str:
    """One row per method and board, a plain CSV that `pandas.read_csv(path)` and spreadsheets read as
    it is: the header is its first line. What the columns mean is in results.json's `notes` and
    docs/metrics.md. Metric cells are numbers (pandas reads float columns; an unbounded interval end
    is inf or -inf, an undefined value empty); only text cells get the spreadsheet-formula guard
    (`csv_safe`).
    """
    rows = []
    for b in results["boards"]:
        for m in b["methods"]:
            row = {k: b[k] for k in ("profile", "suite", "difficulty", "suite_version", "budget_flops")}
            row.update(method=m["method"], is_reference=m["is_reference"], is_protocol=m["is_protocol"],
                       n_seeds=m["n_seeds"])
            row = {k: csv_safe(v) for k, v in row.items()}  # the text cells (names come from records)
            for name, est in m["metrics"].items():
                row.update({name: _number(est["value"]), f"{name}_low": _number(est["low"]),
                            f"{name}_high": _number(est["high"])})
                row[f"{name}_stat"] = csv_safe(est["stat"])
            rows.append(row)
    return pd.DataFrame(rows).to_csv(index=False)


def _write_boards(boards: list[Board], frames: Frames, records: list[dict[str, Any]], record_files: list[str],
                  writer: Writer, env: jinja2.Environment,
                  common: dict[str, Any]) -> tuple[list[dict], list[dict], dict]:
    """Every board's figures and method pages; returns (pages, board views, board key -> slug).

    record_files: each record's copy in the site (records/<slug>.json), in the order of `records`.
    """
    by_id = {r["run_id"]: r for r in records}
    record_hrefs = {r["run_id"]: f"../../{rel}" for r, rel in zip(records, record_files)}
    steps = {r["run_id"]: r.get("steps") for r in records}
    curves = curves_by_run(frames.curves)
    board_slugs, method_slugs = Slugs(), Slugs()
    slug_of = {tuple(vars(b.key).values()): board_slugs(f"{b.key.suite}-{b.key.difficulty}-{b.key.profile}")
               for b in boards}
    pages: list[dict[str, Any]] = []
    views = []
    for b in boards:
        slug = slug_of[tuple(vars(b.key).values())]
        ms = {m.method: method_slugs(m.method) for m in b.methods}
        views.append(board_view(b, slug, ms))
        drawn = set()
        for rel, func, kwargs in plot_jobs(b, slug, ms, plots.palette(list(ms)), curves, frames.domains, steps):
            writer.draw(rel, func, kwargs)
            drawn.add(rel)
        for m in b.methods:
            rel = method_href(slug, ms[m.method])
            curves_svg, steps_svg = method_plot_paths(slug, ms[m.method])
            view = method_view(b, m, [by_id[r] for r in m.run_ids], f"../../{curves_svg}",
                               f"../../{steps_svg}" if steps_svg in drawn else None, record_hrefs)
            writer.write(rel, env.get_template("method.html").render(
                root="../../", m=view, board_href=f"../../index.html#{slug}", **common))
            pages.append({"path": rel, "kind": "method", "title": f"{m.method} on {b.label}",
                          "board": slug, "method": m.method})
    return pages, views, slug_of


def build_site(runs_dirs: list[Path], out_dir: Path, generated: str | None = None,
               worlds: list[dict[str, Any]] | None = None, force: bool = False,
               studies: list[Study] | None = None,
               board_check: Callable[[list[dict[str, Any]], str], dict[str, Any] | None] | None = None) -> SiteSummary:
    """Build the leaderboard from every valid record under `runs_dirs` into `out_dir`.

    Args:
        runs_dirs: runs folders (`<run>/summary.json`) or folders of record JSON files, such as a
            built site's records/ (a rebuild into the same site keeps the records it reads).
        out_dir: the site folder; created if missing.
        generated: the build time shown on pages (default: now, UTC, ISO 8601).
        worlds: each world's description and regime table, plain data:
            [{"profile", "description", "rows": [{"criterion", "needs", "measured", "met"}]}]
            (`met` True, False or None for reported only); the caller measures, the site shows. The
            index says what scale the results come from with the descriptions, the findings page
            shows the regime tables.
        force: build even when `out_dir` holds a built site whose records/ has runs this build does
            not read, or studies it is not given (they are deleted); without it that raises
            SiteOverwriteError and nothing is touched.
        studies: studies to show beside the board (reports.studies.load_study), each on its own page
            with its manifest and records copied to studies/<slug>/; a study already in `out_dir` is
            kept in place.
        board_check: called with the records and the site's command (`bench reproduce ...`) before
            anything is written; it says whether that command, at today's code, plans exactly these
            records ({"commit", "uncommitted", "runs", "differences", "added"}, as a study's `plan`), or None. The
            engine gives one (`bench report`); the pages show its answer, or that none was given.
    Returns:
        a SiteSummary; invalid records are listed there, in site.json and on the index page.
    Raises:
        SiteOverwriteError: see `force`.
    """
    t0 = time.perf_counter()
    generated = generated or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    records, skipped = load_many(runs_dirs)
    out_dir, studies = Path(out_dir), list(studies or [])
    if len({s.slug for s in studies}) < len(studies):
        raise StudyError(f"two studies share a slug (a study's folder name): {sorted(s.slug for s in studies)}")
    inputs = {Path(r[SOURCE_KEY]).resolve() for r in records} | {Path(p).resolve() for p, _ in skipped}
    for study in studies:
        inputs |= {study.manifest.resolve(), *(Path(r[SOURCE_KEY]).resolve() for r in study.records),
                   *(Path(p).resolve() for p, _ in study.skipped)}
    with building(out_dir):  # one build into out_dir at a time: it checks, then writes, alone
        if not force:
            check_overwrite(out_dir, {r["run_id"] for r in records}, inputs)
        command = site_command(records)
        check = board_check(records, command) if board_check is not None else None
        frames = to_frames(records)
        boards = build_boards(frames)
        claims = findings(boards)
        with (figures.drawing_pool(n_figures=len(figures.SEABORN_FIGURES) * len(boards)) as pool,
              Writer(out_dir, pool) as writer):
            env = _environment()
            record_files = _write_records(records, writer)
            common = {"generated": generated, "n_records": len(records), "n_skipped": len(skipped), "paper": PAPER,
                      "paper_title": PAPER_TITLE, "paper_id": PAPER_ID, "site_command": command, "board_check": check,
                      "site_seeds": seeds_text(site_seeds(records)),
                      "commits": commits(records), "reference": REFERENCE_METHOD,
                      "reps": {"per_run": DEFAULT_REPS, "curve": CURVE_REPS}, "has_studies": bool(studies)}
            pages, views, slug_of = _write_boards(boards, frames, records, record_files, writer, env, common)
            common["worlds"] = worlds_view(worlds or [], views)
            study_pages, study_list, study_results = _write_studies(studies, writer, env, common)
            pages += study_pages
            writer.write("index.html", env.get_template("index.html").render(
                root="", boards=views, skipped=[(str(p), r) for p, r in skipped], **common))
            writer.write("findings.html", env.get_template("findings.html").render(
                root="", claims=claims_view(claims, slug_of), regimes=worlds or [], studies=study_list,
                studies_of={n: [s for s in study_list if n in s["verdicts"]] for n in range(1, 5)}, **common))
            results = _results_json(boards, slug_of, claims, skipped, generated)
            results["worlds"] = worlds or []
            results["studies"] = study_results
            results["board_check"] = {"command": command, **check} if check is not None else None
            writer.write("results.json", json.dumps(results, indent=1, ensure_ascii=False))
            writer.write("results.csv", _results_csv(results))
            for name in ("site.css", "site.js"):
                writer.write(f"static/{name}", (_HERE / "static" / name).read_text(encoding="utf-8"))
            # every file made, in its staging folder: only now does the previous site change, file by file
            writer.commit()
            made = {(out_dir / rel).resolve() for rel in [*writer.written, "site.json"]}
            remove_previous(out_dir, keep=inputs | made)
            pages[:0] = [{"path": "index.html", "kind": "index", "title": "Leaderboard"},
                         {"path": "findings.html", "kind": "findings", "title": "Findings"}]
            files = writer.written + ["site.json"]
            site = {"schema": SITE_SCHEMA, "generated": generated, "records": len(records), "skipped": len(skipped),
                    "boards": [v["slug"] for v in views], "studies": [s.slug for s in studies], "pages": pages,
                    "downloads": ["results.csv", "results.json"],
                    "record_files": record_files, "files": files}
            writer.write("site.json", json.dumps(site, indent=1, ensure_ascii=False))
            writer.commit()
    return SiteSummary(out_dir=out_dir, n_records=len(records), skipped=skipped, boards=[b.label for b in boards],
                       pages=[p["path"] for p in pages], record_files=record_files, files=files,
                       wall_s=time.perf_counter() - t0)
