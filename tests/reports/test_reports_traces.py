"""Per-step traces on method pages, the frontier figure, and records with and without the optional fields."""

import json
from xml.etree import ElementTree

import numpy as np

from reports import plots
from reports.boards import build_boards
from reports.method_page import MAX_STEP_PANELS, step_series, thin_indices
from reports.records import to_frames
from reports.site import build_site
from reports.views import frontier_data
from tests.reports.factory import make_record, write_runs

OPTIONAL = ("eval_size", "steps", "method_metrics", "max_step_flops")


def _texts(svg: str) -> list[str]:
    root = ElementTree.fromstring(svg.encode("utf-8"))
    return ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_thinning_keeps_about_400_points_and_both_sides_of_every_phase_change():
    phases = ["expert:math"] * 1500 + ["expert:code"] * 3 + ["distill"] * 497
    idx = thin_indices(phases)
    assert idx.size <= 404 and idx[0] == 0 and idx[-1] == 1999 and np.all(np.diff(idx) > 0)
    assert {1499, 1500, 1502, 1503} <= set(idx.tolist())  # the three-step phase is still there
    assert thin_indices(["train"] * 50).tolist() == list(range(50))
    # a hostile record that changes phase every step is thinned evenly, still to about 400
    assert thin_indices(["a", "b"] * 5000).size <= 400


def test_step_series_takes_the_statistics_present_and_marks_missing_values():
    steps0 = [{"step": 1, "flops": 1.0, "phase": "expert:math", "reward": 0.1, "loss": 1.0},
              {"step": 2, "flops": 2.0, "phase": "distill", "reward": None, "reverse_kl": 0.5, "custom": 3.0}]
    steps1 = [{"step": 1, "flops": 1.5, "phase": "distill", "reverse_kl": 0.4, "empty": None}]
    out = step_series([(0, steps0), (1, steps1), (2, None)])
    assert out["stats"] == ["reward", "reverse_kl", "loss", "custom"]  # usual order first; "empty" has no value
    assert out["phases"] == ["expert:math", "distill"] and [r["seed"] for r in out["runs"]] == [0, 1]
    first = out["runs"][0]
    assert first["phase"].tolist() == [0, 1] and first["flops"].tolist() == [1.0, 2.0]
    assert first["values"]["reward"][0] == 0.1 and np.isnan(first["values"]["reward"][1])
    assert np.isnan(out["runs"][1]["values"]["loss"]).all()
    assert step_series([(0, None), (1, [])])["stats"] == []
    many = [{"step": 1, "flops": 1.0, **{f"s{i:02d}": 1.0 for i in range(30)}}]
    assert len(step_series([(0, many)])["stats"]) == MAX_STEP_PANELS


def test_step_traces_figure_is_svg_with_a_panel_per_statistic_and_escaped_names():
    hostile = "<script>alert(1)</script>"
    steps = [{"step": i + 1, "flops": 1e12 * (i + 1), "phase": hostile if i > 5 else "expert:math",
              "reward": 0.1 * i, hostile: float(i)} for i in range(10)]
    svg = plots.step_traces("m", step_series([(0, steps), (1, steps)]))
    texts = _texts(svg)
    assert "reward" in texts and "<script" not in svg
    assert any(t.startswith("<script>alert(1)") for t in texts)  # a phase and a statistic name, as text
    assert plots.PARTS[0] in svg and plots.PARTS[1] in svg  # coloured by phase


def _two_method_board():
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    return build_boards(to_frames(records))[0]


def test_frontier_figure_draws_every_curve_and_labels_the_envelope():
    board = _two_method_board()
    colours = plots.palette([m.method for m in board.methods])
    data = frontier_data(board, colours)
    assert [s["name"] for s in data["series"]] == ["grpo-joint", "opd-multi"]
    # opd-multi's student is the base model until distillation: grpo-joint is on top before it, opd-multi after
    names = [s["name"] for s in data["segments"]]
    assert "grpo-joint" in names and names[-1] == "opd-multi"
    env = data["envelope"]
    assert {n for f, n in zip(env["flops"], env["leader"]) if 3e13 <= f <= 1e14} == {"grpo-joint"}
    assert data["envelope"]["leader"][-1] == "opd-multi"
    svg = plots.frontier(**data)
    texts = _texts(svg)
    assert "frontier (thick)" in texts and "opd-multi" in texts
    assert svg.count('stroke-width="3.4"') == len(data["segments"])


def test_old_records_without_the_optional_fields_still_build(tmp_path):
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(2)]
    for r in records:
        for key in OPTIONAL:
            r.pop(key)
        r["recovery"] = None
        for p in r["curve"]:
            p.pop("phase_flops")
            p.pop("ledger_phase")
    summary = build_site([write_runs(records, tmp_path / "runs")], tmp_path / "out")
    assert summary.n_records == 4 and summary.n_skipped == 0
    assert not any("/s-" in f for f in summary.files)  # no steps: no trace figure
    page = (tmp_path / "out" / "methods" / "math_code-easy-tiny" / "opd-multi.html").read_text(encoding="utf-8")
    assert "Training traces" not in page and "Distillation share at plateau" in page
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    opd = next(m for m in results["boards"][0]["methods"] if m["method"] == "opd-multi")
    assert opd["metrics"]["distillation_share_plateau"]["value"] is None
    assert opd["metrics"]["distillation_share"]["value"] is not None


def test_records_with_steps_get_a_trace_figure_on_their_method_page(tmp_path):
    records = [make_record("opd-multi", seed=s) for s in range(2)]
    records[0]["steps"] = records[0]["steps"] * 1  # as written by the factory: every phase has steps
    summary = build_site([write_runs(records, tmp_path / "runs")], tmp_path / "out")
    page = (tmp_path / "out" / "methods" / "math_code-easy-tiny" / "opd-multi.html").read_text(encoding="utf-8")
    assert "Training traces" in page and "plots/math_code-easy-tiny/s-opd-multi.svg" in page
    svg = (tmp_path / "out" / "plots" / "math_code-easy-tiny" / "s-opd-multi.svg").read_text(encoding="utf-8")
    assert {"reward", "reverse_kl", "loss"} <= set(_texts(svg)) and "plots/math_code-easy-tiny/s-opd-multi.svg" in \
        summary.files
