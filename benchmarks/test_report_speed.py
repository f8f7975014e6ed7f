"""How long the leaderboard takes to build from 1,000 schema-valid result records (goal: under 10 s).

Each round is a cold build into a fresh folder: load and validate every record, aggregate with
bootstrap intervals, fit curves, draw 198 figures (18 by seaborn, in worker processes on a machine
with two cores or more; 180 by reports.svgplot), render every page, copy the records. The first
round also pays the one-time imports (scipy.optimize, seaborn). Records come from the tests' factory
(tests/reports/factory.py).

    .venv/bin/pytest benchmarks/test_report_speed.py --benchmark-enable -q
"""

import pytest

from reports.site import build_site
from tests.reports.factory import make_sweep, write_runs

N_RECORDS = 1000
LIMIT_S = 10.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    # 6 methods x 4 suites x 3 difficulties = 72 cells, 13-14 seeds each: 12 boards, 72 method pages
    return write_runs(make_sweep(N_RECORDS), tmp_path_factory.mktemp("report-speed") / "runs")


@pytest.mark.slow
def test_report_for_1000_records_builds_within_10_seconds(benchmark, runs, tmp_path):
    walls: list[float] = []

    def build():
        summary = build_site([runs], tmp_path / f"site{len(walls)}")
        walls.append(summary.wall_s)
        return summary

    summary = benchmark.pedantic(build, rounds=3, iterations=1)
    benchmark.extra_info["wall_s"] = [round(w, 2) for w in walls]
    assert summary.n_records == N_RECORDS and summary.n_skipped == 0
    assert len(summary.pages) == 2 + 72 and len(summary.record_files) == N_RECORDS
    assert sum(f.endswith(".svg") for f in summary.files) == 12 * 4 + 6 + 72 * 2
    assert max(walls) <= LIMIT_S, f"build took {max(walls):.1f} s (rounds: {walls})"
