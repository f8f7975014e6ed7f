"""Shared fixtures: one thread, passive OpenMP, a private model cache, and the fast test profile."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault(
    "OPD_BENCH_CACHE", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "test")
)

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def fast_profile():
    """`direct-smoke` (bench/world/profiles.py): real tiny models after a short warm-up, seconds per run."""
    from bench.world.profiles import PROFILES

    return PROFILES["direct-smoke"]
