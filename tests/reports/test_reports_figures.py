"""seaborn's board figures: the statistics they draw, hostile names, determinism, and drawing in worker processes."""

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pandas as pd
import pytest

from reports import figures, plots
from reports.boards import build_boards
from reports.records import to_frames
from reports.site import build_site
from reports.stats import point
from reports.views import curve_frame, domain_frame
from tests.reports.factory import make_record, make_sweep, write_runs

HOSTILE = ("<script>alert(1)</script>", "$\\frac{1}{0}$", "_hidden", "nul\x00byte", "x" * 200)


def _board(records):
    boards = build_boards(to_frames(records))
    assert len(boards) == 1
    return boards[0]


def _texts(svg: str) -> list[str]:
    root = ElementTree.fromstring(svg.encode("utf-8"))  # expat reads the DOCTYPE, fetches nothing
    return ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_curve_frame_holds_every_run_and_its_aggregate_is_the_boards():
    board = _board([make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(4)])
    frame = curve_frame(board)
    assert set(frame["method"]) == {"grpo-joint", "opd-multi"} and frame["run_id"].nunique() == 8
    assert (frame["flops"] > 0).all() and frame.groupby("run_id").size().nunique() == 1
    for m in board.methods:
        # at the last FLOP value seaborn's estimator sees each run's final accuracy: the table's number
        last = frame[(frame["method"] == m.method) & (frame["flops"] == frame["flops"].max())]
        assert point(last["accuracy"]) == pytest.approx(m.final_accuracy.value)
        assert point(last["accuracy"]) == pytest.approx(m.curve_mid[-1])


def test_seed_interval_brackets_the_estimate_and_is_reproducible():
    x = [0.41, 0.45, 0.52, 0.48, 0.39]
    lo, hi = figures.seed_interval(500)(x)
    assert min(x) <= lo < point(x) < hi <= max(x)
    assert figures.seed_interval(500)(x) == (lo, hi)  # a fresh figure draws the same replicates
    assert all(math.isnan(v) for v in figures.seed_interval(500)([0.5]))  # one seed: no interval


def test_figures_are_valid_svg_in_the_palette_and_reproducible():
    records = [make_record(m, suite="four_domain", seed=s) for m in ("grpo-joint", "opd-multi", "sft")
               for s in range(3)]
    board = _board(records)
    colours = plots.palette([m.method for m in board.methods])
    curves = figures.accuracy_curves(curve_frame(board), colours, board.reference, 0.31, board.label)
    domains = figures.domain_accuracy(domain_frame(board, to_frames(records).domains), colours)
    for svg in (curves, domains):
        assert 'font-family' in svg and "<metadata" not in svg and "http://purl.org" not in svg
        for colour in colours.values():
            assert colour in svg
    assert curves == figures.accuracy_curves(curve_frame(board), colours, board.reference, 0.31, board.label)
    texts = _texts(curves)
    assert "grpo-joint (ref.)" in texts and "base model" in texts and "10¹⁴" in texts
    assert {"code", "graphs", "math", "strings", "final held-out accuracy"} <= set(_texts(domains))
    # a band per method: seaborn fills the 95% interval between the seeds' curves
    assert len(re.findall(r'<g id="FillBetweenPolyCollection_\d+">', curves)) == 3


def test_hostile_names_are_plain_text_in_figures():
    records = [make_record(name, seed=s, run_id=f"r{i}-{s}", final_domain_accuracy={name: 0.5})
               for i, name in enumerate(HOSTILE) for s in range(2)]
    board = _board(records)
    colours = plots.palette([m.method for m in board.methods])
    for svg in (figures.accuracy_curves(curve_frame(board), colours, None, None, "<b>" + HOSTILE[0]),
                figures.domain_accuracy(domain_frame(board, to_frames(records).domains), colours)):
        texts = _texts(svg)  # parses: no XML-invalid character got through
        assert "<script" not in svg and "\x00" not in svg
        assert "<script>alert(1)</scrip…" in texts and "$\\frac{1}{0}$" in texts  # text, not mathtext
        assert "\u200b_hidden" in texts  # matplotlib would have left "_hidden" out of the legend
        assert "x" * 23 + "…" in texts and "nul\ufffdbyte" in texts


def test_palette_is_seaborns_colour_blind_palette():
    sns = pytest.importorskip("seaborn")
    assert list(plots.COLOURBLIND) == sns.color_palette("colorblind").as_hex()


def test_figures_drawn_by_workers_are_the_same_as_drawn_here(tmp_path, monkeypatch):
    runs = write_runs(make_sweep(4 * 2 * 3, methods=("grpo-joint", "opd-multi"), suites=("math_code", "four_domain"),
                                 difficulties=("easy", "hard")), tmp_path / "runs")
    monkeypatch.setattr(figures, "POOL_FROM_FIGURES", 10**6)
    build_site([runs], tmp_path / "here")
    if sys.platform != "linux" or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("no worker processes on this machine (not Linux, or one core)")
    # In a fresh interpreter: the pool refuses to fork beside another thread, and a test runner's
    # process (pytest-xdist's worker) has one.
    code = ("import sys; from pathlib import Path; from reports import figures; from reports.site import build_site\n"
            "figures.POOL_FROM_FIGURES = 1\n"
            "with figures.drawing_pool(8) as pool: assert pool is not None, 'no pool'\n"
            "build_site([Path(sys.argv[1])], Path(sys.argv[2]))\n")
    subprocess.run([sys.executable, "-c", code, str(runs), str(tmp_path / "workers")], check=True,
                   cwd=Path(__file__).resolve().parents[2], timeout=300)
    svgs = sorted(p.relative_to(tmp_path / "here") for p in (tmp_path / "here" / "plots").rglob("*.svg"))
    assert len(svgs) == 4 * 5 + 4 * 2 * 2  # 4 boards: 5 board figures, and 2 methods with curves and step traces
    for rel in svgs:
        assert (tmp_path / "here" / rel).read_bytes() == (tmp_path / "workers" / rel).read_bytes(), rel


def test_a_one_domain_board_has_no_domain_figure(tmp_path):
    summary = build_site([write_runs([make_record(suite="math", seed=s) for s in range(2)], tmp_path / "runs")],
                         tmp_path / "out")
    plots_dir = tmp_path / "out" / "plots" / "math-easy-tiny"
    assert summary.n_records == 2 and (plots_dir / "curves.svg").is_file() and not (plots_dir / "domains.svg").exists()
    assert "domains.svg" not in (tmp_path / "out" / "index.html").read_text()


def test_reports_imports_no_plotting_library_until_it_draws():
    code = ("import sys, reports.site, reports.figures, reports.views; "
            "bad = [m for m in ('matplotlib', 'seaborn') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2], timeout=120)


def test_empty_frames_draw_empty_figures():
    empty = pd.DataFrame({"method": [], "run_id": [], "flops": [], "accuracy": [], "domain": []})
    assert "<svg" in figures.accuracy_curves(empty, {}, None, 0.3, "empty")
    assert "<svg" in figures.domain_accuracy(empty, {"a": "#000000"})
    assert np.isfinite(figures.seed_interval(10)([0.1, 0.2])).all()


def test_the_flops_figure_gives_no_kind_the_colour_of_a_phase():
    bars = [{"name": "opd-multi", "by_group": {"expert training": 6e12, "distillation": 1e12},
             "by_kind": {"rollout": 4e12, "score": 1e12, "update": 2e12}}]
    svg = plots.flops_breakdown(bars, ["expert training", "distillation"])
    fills = re.findall(r'<rect[^>]*fill="(#[0-9a-f]{6})"', svg)
    phases, kinds = set(plots.PARTS[:2]), set(plots.KIND_COLOURS)
    assert phases <= set(fills) and kinds <= set(fills)
    assert not phases & kinds and len(set(plots.PARTS) | kinds) == len(plots.PARTS) + len(kinds)
