"""How often do the report's 95% intervals hold the value they estimate? A simulation of
`reports.stats` itself (its point estimate, resampling and percentile interval, 2,000 replicates),
on seeds drawn from known distributions.

    python benchmarks/interval_coverage.py [--trials 2000] [--seeds 3,5,10] [--json OUT]

For each distribution and number of seeds it draws `trials` sets of per-seed values and counts the
sets whose interval holds the true value: for one method (`estimate`), the distribution's own
interquartile mean (the IQM of the whole population; for a symmetric distribution, its mean); for
the difference of two methods drawn independently (`estimate_pair`, as the board reads a method
against the reference), 0; and for a curve metric, a method's final accuracy minus the reference's
curve at the method's spend (`reports.relative.at_spend`, claim 1's), 0: each reference seed's curve
is moved up or down by a draw, and each of the method's final accuracies is that curve's value at
its spend moved by a draw of its own. It also counts the sets whose one-method interval is exactly
the range of their values. A 95% interval would hold the value in 95% of the sets; the percentile
bootstrap of a handful of runs holds it less often, since its replicates can only move among the
values the runs took.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reports.metrics import interpolate_rows  # noqa: E402
from reports.relative import at_spend, reference_bootstrap  # noqa: E402
from reports.stats import (  # noqa: E402
    CURVE_REPS, CurveSet, aggregate, estimate, estimate_pair, resample_indices, rng_for,
)

# per-seed values: symmetric, and skewed to the right (a few seeds far above the rest)
DISTRIBUTIONS = {
    "normal": lambda rng, size: rng.normal(0.0, 1.0, size),
    "lognormal (sigma 1)": lambda rng, size: rng.lognormal(0.0, 1.0, size),
}


# the curve metric's world: a budget of 1, evaluations where the runs make them, a reference curve
# rising from 30% to 44%, seeds that move it by a point per unit of a draw, a method that spends half
# the budget, give or take 10% a seed
GRID = np.array([0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
REFERENCE = 0.30 + 0.15 * (1 - np.exp(-GRID / 0.3))
POINT, SPEND = 0.01, 0.5
# the reference's accuracy at the spend without seed noise: the method's true final accuracy
AT_SPEND = float(interpolate_rows(GRID, REFERENCE[None, :], np.array([SPEND]))[0, 0])


def population_iqm(draw, rng: np.random.Generator, size: int = 2_000_000) -> float:
    """The distribution's interquartile mean, from one large sample (within ~1e-3 of its spread)."""
    return float(aggregate(draw(rng, size)))


def coverage(draw, truth: float, seeds: int, trials: int, rng: np.random.Generator) -> dict:
    """Over `trials` sets of `seeds` values: the share whose interval holds its true value (`truth` for
    one method; 0 for the difference of two methods of the same distribution, and for the curve
    metric), and the share of one method's intervals that are exactly the range of its values."""
    held = held_pair = held_curve = is_range = 0
    for _ in range(trials):
        x, y = draw(rng, seeds), draw(rng, seeds)
        one = estimate(x, rng)
        held += one.low <= truth <= one.high
        # the mean of three equal values can differ from the value in its last bit
        is_range += bool(np.allclose([one.low, one.high], [x.min(), x.max()], rtol=1e-12, atol=0))
        pair = estimate_pair(x, y, rng, op="difference")
        held_pair += pair.low <= 0.0 <= pair.high
        held_curve += _at_spend_holds(draw, truth, seeds, rng)
    return {"seeds": seeds, "trials": trials, "coverage": held / trials, "coverage_difference": held_pair / trials,
            "coverage_at_spend": held_curve / trials, "interval_is_the_range": is_range / trials}


def _at_spend_holds(draw, truth: float, seeds: int, rng: np.random.Generator) -> bool:
    """One set of the curve metric: does the interval of (final accuracy - the reference at the spend)
    hold 0, its true value?"""
    reference = CurveSet(GRID, REFERENCE[None, :] + POINT * (draw(rng, seeds) - truth)[:, None])
    ref = reference_bootstrap(reference, 1.0, np.ones(seeds), rng)
    counted = SPEND * (1 + 0.1 * rng.standard_normal(seeds))
    final = AT_SPEND + POINT * (draw(rng, seeds) - truth)
    _, minus = at_spend(counted, final, resample_indices(seeds, rng, CURVE_REPS), ref)
    return minus.low <= 0.0 <= minus.high


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seeds", default="3,5,10", help="numbers of seeds, comma-separated")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    print("| per-seed values | seeds | one method | difference of two | accuracy at a spend, minus the reference's "
          "| interval = the runs' range |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, draw in DISTRIBUTIONS.items():
        rng = rng_for("interval-coverage", name)
        truth = population_iqm(draw, rng)
        for seeds in (int(s) for s in args.seeds.split(",")):
            row = {"distribution": name, **coverage(draw, truth, seeds, args.trials, rng)}
            rows.append(row)
            print(f"| {name} | {seeds} | {row['coverage']:.1%} | {row['coverage_difference']:.1%} | "
                  f"{row['coverage_at_spend']:.1%} | {row['interval_is_the_range']:.1%} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
