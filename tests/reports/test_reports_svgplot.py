"""The figures' axes on degenerate data (a smoke run at accuracy 0) and their dark variant."""

import re
from xml.etree import ElementTree

import pytest

from reports import figures, plots
from reports.boards import build_boards
from reports.records import to_frames
from reports.site import build_site
from reports.svgplot import ACC_MIN_SPAN, LinearScale
from reports.views import curve_frame
from tests.reports.factory import make_record, write_runs

SVG = "{http://www.w3.org/2000/svg}"


def _numbers(svg: str) -> list[float]:
    """Every text of the figure that is a plain number (the linear axes' tick labels)."""
    root = ElementTree.fromstring(svg.encode("utf-8"))
    texts = ["".join(t.itertext()).strip() for t in root.iter(f"{SVG}text")]
    return [float(t.replace("−", "-")) for t in texts if re.fullmatch(r"[−-]?\d+(\.\d+)?(e[−-]?\d+)?", t)]


def _zero_record(method: str, seed: int) -> dict:
    """A newcomer's smoke run: accuracy 0 at every evaluation, every domain."""
    record = make_record(method, seed=seed)
    for p in record["curve"]:
        p["accuracy"] = 0.0
        p.pop("domain_accuracy", None)
    record.update(base_accuracy=0.0, final_accuracy=0.0, final_domain_accuracy={d: 0.0 for d in record["domains"]},
                  base_domain_accuracy={d: 0.0 for d in record["domains"]})
    for s in record["samples"]:
        s["reward"] = 0.0
    return record


@pytest.mark.parametrize("values, lo, hi", [
    ([0.0, 0.0, 0.0], 0.0, ACC_MIN_SPAN),  # all at 0: [0, 0.1], not ±5e-11
    ([1.0, 1.0], 1.0 - ACC_MIN_SPAN, 1.0),
    ([0.5], 0.445, 0.555),
    ([], 0.0, 1.0),
])
def test_an_accuracy_axis_spans_at_least_a_tenth_inside_0_1(values, lo, hi):
    scale = LinearScale.accuracy(values)
    assert scale.lo == pytest.approx(lo, abs=1e-9) and scale.hi == pytest.approx(hi, abs=1e-9)
    ticks = scale.ticks()
    assert len(ticks) >= 3 and all(0.0 <= t <= 1.0 for t in ticks)


def test_equal_values_on_any_axis_get_a_readable_span():
    for v in (0.0, 5.0, -2.0, 1e13):
        scale = LinearScale.nice([v, v, v])
        assert scale.hi - scale.lo >= 0.1 * max(abs(v), 1.0), v
        assert scale.lo < v < scale.hi
    wide = LinearScale.nice([0.2, 0.8])  # data with a span keeps it (plus the padding)
    assert wide.lo == pytest.approx(0.17) and wide.hi == pytest.approx(0.83)


def test_a_span_near_the_float_limit_gives_finite_ticks():
    """A diverged loss of 1.6e308 beside a negative one: the span would overflow to inf."""
    scale = LinearScale.nice([-8.2e306, 1.63e308])
    ticks = scale.ticks()
    assert ticks and all(abs(t) < float("inf") for t in ticks) and scale.hi > scale.lo


def test_a_site_of_zero_accuracy_runs_has_sensible_axes(tmp_path):
    records = [_zero_record(m, s) for m in ("grpo-joint", "sft") for s in range(2)]
    build_site([write_runs(records, tmp_path / "runs")], tmp_path / "out")
    plots_dir = tmp_path / "out" / "plots" / "math_code-easy-tiny"
    for name in ("frontier", "length", "m-grpo-joint", "m-sft", "curves"):
        svg = (plots_dir / f"{name}.svg").read_text(encoding="utf-8")
        ticks = _numbers(svg)
        accuracy_ticks = [t for t in ticks if t <= 1.0]
        assert accuracy_ticks, name
        assert min(accuracy_ticks) >= 0.0 and max(accuracy_ticks) >= 0.09, (name, accuracy_ticks)
        assert all(abs(t) >= 1e-6 or t == 0 for t in ticks), (name, ticks)  # no 5e-11 labels


def test_seaborn_curves_at_zero_accuracy_span_a_tenth():
    board = build_boards(to_frames([_zero_record("grpo-joint", s) for s in range(3)]))[0]
    svg = figures.accuracy_curves(curve_frame(board), plots.palette(["grpo-joint"]), "grpo-joint", 0.0, board.label)
    ticks = [t for t in _numbers(svg) if t <= 1.0]
    assert min(ticks) == 0.0 and max(ticks) >= 0.09


def test_figures_have_a_dark_variant():
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    board = build_boards(to_frames(records))[0]
    colours = plots.palette([m.method for m in board.methods])
    seaborn_svg = figures.accuracy_curves(curve_frame(board), colours, board.reference, 0.31, board.label)
    hand_svg = plots.length_accuracy([])
    for svg in (seaborn_svg, hand_svg):
        ElementTree.fromstring(svg.encode("utf-8"))  # still well-formed
        assert "@media (prefers-color-scheme:dark)" in svg
    # matplotlib writes its colours into style attributes: the dark rules override exactly those
    assert figures.DARK_STYLE in seaborn_svg
    for light in ("fill: #ffffff", "fill: #333333", "stroke: #e3e6ec"):
        assert light in seaborn_svg and f'[style*="{light}"]' in figures.DARK_STYLE
    assert 'class="bg"' in hand_svg and ".bg{fill:#1b1f27}" in hand_svg
