"""How often do the report's 95% intervals hold the value they estimate? A simulation of
`reports.stats` itself (its point estimate, resampling and percentile interval, 2,000 replicates),
on seeds drawn from known distributions.

    python benchmarks/interval_coverage.py [--trials 2000] [--seeds 3,5,10] [--json OUT]

For each distribution and number of seeds it draws `trials` sets of per-seed values and counts the
sets whose interval holds the distribution's own interquartile mean (the IQM of the whole population:
for a symmetric distribution, its mean), for one method (`estimate`) and for the difference of two
methods drawn independently (`estimate_pair`, as the board reads a method against the reference). It
also counts the sets whose interval is exactly the range of their values. A 95% interval would hold
the value in 95% of the sets; the percentile bootstrap of a handful of runs holds it less often,
since its replicates can only move within the values the runs took.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reports.stats import aggregate, estimate, estimate_pair, rng_for  # noqa: E402

# per-seed values: symmetric, and skewed to the right (a few seeds far above the rest)
DISTRIBUTIONS = {
    "normal": lambda rng, size: rng.normal(0.0, 1.0, size),
    "lognormal (sigma 1)": lambda rng, size: rng.lognormal(0.0, 1.0, size),
}


def population_iqm(draw, rng: np.random.Generator, size: int = 2_000_000) -> float:
    """The distribution's interquartile mean, from one large sample (within ~1e-3 of its spread)."""
    return float(aggregate(draw(rng, size)))


def coverage(draw, truth: float, seeds: int, trials: int, rng: np.random.Generator) -> dict:
    """Over `trials` sets of `seeds` values: the share whose interval holds `truth` (one method) or
    0 (the difference of two methods of the same distribution), and the share of one method's
    intervals that are exactly the range of its values."""
    held = held_pair = is_range = 0
    for _ in range(trials):
        x, y = draw(rng, seeds), draw(rng, seeds)
        one = estimate(x, rng)
        held += one.low <= truth <= one.high
        # the mean of three equal values can differ from the value in its last bit
        is_range += bool(np.allclose([one.low, one.high], [x.min(), x.max()], rtol=1e-12, atol=0))
        pair = estimate_pair(x, y, rng, op="difference")
        held_pair += pair.low <= 0.0 <= pair.high
    return {"seeds": seeds, "trials": trials, "coverage": held / trials, "coverage_difference": held_pair / trials,
            "interval_is_the_range": is_range / trials}


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seeds", default="3,5,10", help="numbers of seeds, comma-separated")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    print("| distribution | seeds | one method | difference of two | interval = the values' range |")
    print("| --- | --- | --- | --- | --- |")
    for name, draw in DISTRIBUTIONS.items():
        rng = rng_for("interval-coverage", name)
        truth = population_iqm(draw, rng)
        for seeds in (int(s) for s in args.seeds.split(",")):
            row = {"distribution": name, **coverage(draw, truth, seeds, args.trials, rng)}
            rows.append(row)
            print(f"| {name} | {seeds} | {row['coverage']:.1%} | {row['coverage_difference']:.1%} | "
                  f"{row['interval_is_the_range']:.1%} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
