"""Task-side speed, run on demand (not part of `tests/`):

    .venv/bin/pytest benchmarks/test_task_speed.py -q -s [--benchmark-enable]

Each figure is a ratio against a baseline measured in the same process; this machine is shared and
its absolute times vary 2x.

- Scoring hostile output: every verifier reads a bounded window of a completion, so scoring 10 MB
  of junk should cost about what 1 MB costs (a linear scan: 10x; a quadratic one: 100x). The
  guard, 40x, fails a quadratic scan and leaves a linear one twice the machine's noise.
- Drawing the held-out splits: every domain's hard split drawn from scratch, against reading the
  same split back from its cache (what every run after the first pays). Reported, not guarded.
"""

from __future__ import annotations

import random
import timeit

from tasks import DIFFICULTIES, get_domain
from tasks.suites import HELDOUT_PER_DOMAIN, generate_heldout, load_heldout

DOMAINS = ("math", "code", "logic", "strings", "graphs")
# the hostile shapes of tests/tasks/test_tasks_verifiers.py, as a unit repeated to a length
JUNK = ("7", "#", "a ", "[1,")


def _problems() -> list:
    """Two problems of every domain, difficulty and format."""
    out = []
    for name in DOMAINS:
        dom, rng = get_domain(name), random.Random(7)
        out += [(dom, dom.sample(rng, d, fmt)) for d in DIFFICULTIES for fmt in ("tiny", "hf") for _ in range(2)]
    return out


def _best_of(fn, repeats: int = 3) -> float:
    """The fastest of `repeats` calls of `fn`, in seconds."""
    return min(timeit.repeat(fn, number=1, repeat=repeats))


def test_scoring_cost_does_not_grow_past_linear_with_output_length():
    problems = _problems()

    def score_all(text: str) -> None:
        for dom, problem in problems:
            assert dom.score(text, problem) == 0.0

    ratios = {}
    for unit in JUNK:
        small, large = unit * (1_000_000 // len(unit)), unit * (10_000_000 // len(unit))
        ratios[unit] = _best_of(lambda: score_all(large)) / _best_of(lambda: score_all(small))
    print("\nscoring 10 MB / 1 MB of junk, per shape:", {k: round(v, 2) for k, v in ratios.items()})
    assert max(ratios.values()) < 40, ratios


def test_heldout_draw_against_cached_read(benchmark, tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path))
    domains = [get_domain(name) for name in DOMAINS]

    def draw() -> None:
        for dom in domains:
            assert len(generate_heldout(dom, "hard", "tiny")) == HELDOUT_PER_DOMAIN

    for dom in domains:
        load_heldout(dom, "hard", "tiny")  # fills the cache
    cached = _best_of(lambda: [load_heldout(dom, "hard", "tiny") for dom in domains])
    fresh = benchmark.pedantic(_best_of, args=(draw, 1), rounds=1)  # disabled: runs it once all the same
    print(f"\nheld-out splits, 5 domains x {HELDOUT_PER_DOMAIN} hard prompts: drawn {fresh:.2f} s, "
          f"read from the cache {cached:.3f} s ({fresh / cached:.0f}x)")
