"""A prepared base is the same bytes in any process and at any thread count, and its recipe is pinned.

The smoke base (the tiny world's tasks and student, a 30-step warm-up) is built in two fresh
processes, one with torch at one thread and one at two, and must have the same weights hash. The
hash is also held against the one recorded for this project's CI machine (bench/reference/
smoke-digest.json): a change to the code that builds a base that changes its bytes fails here until
the world version is bumped and the digest recorded again (docs/world.md, Reproducibility). On
another CPU the recorded digest does not apply (kernels differ by processor), and that check skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.world.profiles import PROFILES
from bench.world.reference import ROOT, cpu_signature

BUILD = """
import json, sys, torch
torch.set_num_threads(int(sys.argv[1]))
from bench.world.prepare import prepare
from bench.world.profiles import PROFILES
prepared = prepare(PROFILES["smoke"], progress=False, teacher=False)
print(json.dumps({"base": prepared.model_hashes()["base"]}))
"""


def _build(cache: Path, threads: int) -> str:
    env = {**os.environ, "OPD_BENCH_CACHE": str(cache), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", BUILD, str(threads)], capture_output=True, text=True, env=env,
                         timeout=900, check=True, cwd=Path(__file__).resolve().parents[2])
    return json.loads(out.stdout.strip().splitlines()[-1])["base"]


@pytest.mark.slow
def test_the_smoke_base_is_identical_across_processes_and_thread_counts(tmp_path):
    one, two = _build(tmp_path / "a", 1), _build(tmp_path / "b", 2)
    assert one == two
    recorded = json.loads((ROOT / "smoke-digest.json").read_text())
    assert recorded["world_version"] == PROFILES["smoke"].world_version, \
        "the world version changed: record the smoke base's digest again (python -m bench.world.prepare --smoke-digest)"
    if recorded["cpu"] != cpu_signature():
        pytest.skip(f"the recorded digest is for {recorded['cpu']}; this is {cpu_signature()}")
    assert one == recorded["base"], "the smoke base's bytes changed: bump the world version and record the digest"
