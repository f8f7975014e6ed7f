"""Shared fixtures: one thread, passive OpenMP, a private model cache, and a fast test profile."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault(
    "OPD_BENCH_CACHE", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache", "test")
)

import dataclasses  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def fast_profile():
    """The direct-answer profile with a short warm-up and a small budget: real models, seconds not minutes."""
    from bench.profiles import PROFILES, WarmupConfig

    profile = dataclasses.replace(
        PROFILES["direct"],
        name="tiny-test",
        budget_flops=4e11,
        eval_size=64,
        warmup=WarmupConfig(student_steps=30, teacher_steps=30, batch_size=32),
    )
    PROFILES[profile.name] = profile
    yield profile
    PROFILES.pop(profile.name, None)
