"""Aggregation over seeds: IQM as rliable computes it, bootstrap intervals, single-seed marking."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from rliable.metrics import aggregate_iqm

from reports.formatting import fmt_estimate
from reports.stats import (
    NONE, Estimate, aggregate, curve_set, estimate, estimate_pair, interval, point, resample_indices, rng_for,
)


@pytest.mark.parametrize("n", [3, 4, 5, 7, 8, 13, 20])
def test_point_estimate_is_rliables_iqm(n):
    x = np.random.default_rng(n).random(n) * 10
    assert point(x) == pytest.approx(float(aggregate_iqm(x)), rel=1e-12)


def test_aggregate_along_an_axis_matches_row_by_row():
    x = np.random.default_rng(0).random((50, 9))
    assert np.allclose(aggregate(x, axis=1), [aggregate_iqm(r) for r in x])
    assert aggregate(np.array([1.0, 3.0]), axis=0) == 2.0  # two runs: the mean


def test_iqm_resists_one_outlier_seed_where_the_mean_does_not():
    x = [0.50, 0.51, 0.52, 0.53, 0.0]
    assert point(x) == pytest.approx(np.mean([0.50, 0.51, 0.52]))


def test_single_seed_has_no_interval_and_says_so():
    est = estimate([0.42], rng_for("t"))
    assert est == Estimate(0.42, None, None, 1, "single") and est.single_seed


def test_undefined_runs_are_left_out_and_all_undefined_is_none():
    assert estimate([None, float("nan")], rng_for("t")) is NONE
    est = estimate([0.4, None, 0.6], rng_for("t"))
    assert est.n_seeds == 2 and est.stat == "mean" and est.value == pytest.approx(0.5)


def test_interval_brackets_the_estimate_and_is_reproducible():
    x = np.random.default_rng(1).normal(0.5, 0.05, 10)
    a, b = estimate(x, rng_for("m")), estimate(x, rng_for("m"))
    assert a == b and a.stat == "iqm" and a.n_seeds == 10
    assert a.low < a.value < a.high
    assert a.high - a.low < 0.1


def test_interval_width_shrinks_with_more_seeds():
    rng = np.random.default_rng(2)
    few = estimate(rng.normal(0.5, 0.05, 4), rng_for("a"))
    many = estimate(rng.normal(0.5, 0.05, 40), rng_for("a"))
    assert many.high - many.low < few.high - few.low


def test_interval_keeps_infinite_replicates_as_unbounded_ends():
    lo, hi = interval(np.r_[np.full(95, 1.0), np.full(5, np.inf)])
    assert lo == 1.0 and math.isinf(hi)
    assert interval(np.full(3, np.nan)) == (None, None)


def test_pairs_ratio_difference_and_same_runs():
    x, y = [2.0, 2.0, 2.0], [1.0, 1.0, 1.0]
    assert estimate_pair(x, y, rng_for("r")).value == pytest.approx(2.0)
    assert estimate_pair(x, y, rng_for("r"), op="difference").value == pytest.approx(1.0)
    z = [1.0, 2.0, 3.0, 4.0]
    same = estimate_pair(z, z, rng_for("r"), same_runs=True)
    assert (same.value, same.low, same.high) == (1.0, 1.0, 1.0)
    assert estimate_pair(x, [0.0, 0.0, 0.0], rng_for("r")) is NONE
    assert estimate_pair([1.0], [2.0], rng_for("r")).stat == "single"
    # one run on either side: no interval, which would carry only the other side's seed noise
    for one, many in (([0.30], [0.45, 0.46, 0.44]), ([0.45, 0.46, 0.44], [0.30])):
        est = estimate_pair(one, many, rng_for("r"), op="difference")
        assert (est.low, est.high, est.n_seeds, est.stat) == (None, None, 1, "single")
    with pytest.raises(ValueError):
        estimate_pair(x, y, rng_for("r"), op="sum")


def test_curve_set_puts_runs_on_the_union_grid_carried_flat():
    cs = curve_set([([0, 1e12, 1e13], [0.2, 0.4, 0.6]), ([0, 2e12], [0.2, 0.5])], budget_flops=1e13)
    assert cs.grid.tolist() == [0, 1e12, 2e12, 1e13]
    assert cs.values[1].tolist() == [0.2, pytest.approx(0.35), 0.5, 0.5]  # stopped at 2e12, flat after
    # run 0 at 2e12: 0.4 + 0.2 * log10(2) (log-linear); run 1 at 1e12: 0.2 + 0.3 / 2 (linear from 0 FLOPs)
    assert cs.aggregate().tolist() == pytest.approx([0.2, 0.375, (0.4 + 0.2 * math.log10(2) + 0.5) / 2, 0.55])
    reps = cs.replicates(resample_indices(2, rng_for("c"), reps=7))
    assert reps.shape == (7, 4)


def test_estimate_to_dict_writes_unbounded_ends_as_strings():
    d = Estimate(1.0, 0.5, math.inf, 3, "iqm").to_dict()
    assert d == {"value": 1.0, "low": 0.5, "high": "inf", "n_seeds": 3, "stat": "iqm"}


def test_thinned_curve_set_keeps_both_ends_and_at_most_max_points():
    curves = [(np.r_[0.0, np.logspace(10, 14, 30) * (1 + 0.01 * s)], np.linspace(0.2, 0.6, 31)) for s in range(5)]
    cs = curve_set(curves, budget_flops=2e14)
    thin = cs.thinned(max_points=20)
    assert len(thin.grid) <= 20 and thin.grid[0] == 0 and thin.grid[-1] == cs.grid[-1]
    assert np.allclose(thin.values[:, -1], cs.values[:, -1])
    assert cs.thinned(max_points=10_000) is cs


def test_three_runs_interval_is_their_range():
    # a replicate draws one run three times with probability 1/27, more than the 2.5% at each end
    for seed in range(20):
        x = np.random.default_rng(seed).integers(0, 1000, 3) / 8  # exact in binary: their mean is too
        est = estimate(x, rng_for("range", str(seed)))
        assert (est.low, est.high) == (x.min(), x.max())


def test_the_coverage_table_in_the_docs_is_the_scripts_output():
    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import interval_coverage
    finally:
        sys.path.remove(str(root / "benchmarks"))
    rows = interval_coverage.main([])
    text = (root / "docs" / "metrics.md").read_text()
    section = text[text.index("### How often the intervals hold the value"):]
    documented = re.findall(r"^\| (normal|lognormal \(sigma 1\)) \| (\d+) \| ([\d.]+)% \| ([\d.]+)% \| ([\d.]+)% "
                            r"\| ([\d.]+)% \|$", section, flags=re.M)
    measured = [(r["distribution"], str(r["seeds"]), *(f"{100 * r[key]:.1f}" for key in (
        "coverage", "coverage_difference", "coverage_at_spend", "interval_is_the_range"))) for r in rows]
    assert documented == measured
    # what the docs read off it: three seeds' intervals are their range and hold the value far less than 95%
    # of the time, ten seeds' about 95%
    by = {(r["distribution"], r["seeds"]): r for r in rows}
    assert all(by[d, 3]["interval_is_the_range"] > 0.99 and by[d, 3]["coverage"] < 0.8 for d, _ in by)
    assert all(by[d, 3][key] < 0.88 for d, _ in by for key in ("coverage_difference", "coverage_at_spend"))
    assert all(0.92 < by[d, 10][key] < 0.97 for d, _ in by for key in ("coverage", "coverage_difference",
                                                                       "coverage_at_spend"))


def test_a_few_seeds_interval_says_it_is_about_their_range():
    for n, few in ((2, True), (3, True), (4, False), (10, False)):
        est = estimate(np.arange(n) / 8, rng_for("tip", str(n)))
        assert ("about their range" in fmt_estimate(est, "pct")["tip"]) is few


def test_an_undefined_point_shows_the_interval_a_verdict_reads():
    """A target the aggregate curve never reaches though some replicates do: the cell shows no point but
    the interval; where no replicate reaches it either, no interval; FLOPs never reached read so."""
    cell = fmt_estimate(Estimate(None, -math.inf, 0.5, 3, "iqm"), "pct")
    assert (cell["text"], cell["interval"], cell["sort"]) == ("—", "[−∞, 50.0%]", "")
    assert fmt_estimate(Estimate(None, -math.inf, -math.inf, 3, "iqm"), "pct")["interval"] == ""
    assert fmt_estimate(Estimate(None, 1e13, math.inf, 3, "iqm"), "flops")["interval"] == "[1.00e13, not reached]"
    assert fmt_estimate(NONE, "pct") == {"text": "—", "interval": "", "sort": "", "tip": "not defined for these runs"}
