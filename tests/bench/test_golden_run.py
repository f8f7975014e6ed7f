"""Fixed small runs whose ledger, curve and step trace are held against golden files.

The golden files hold the numbers of a fixed configuration; a change that only moves code must
leave every number identical. Timings (`seconds`, `wall_s`) are left out. Floats depend on the
processor's kernels, so each CPU signature this project's CI has run on has a folder of its own
(`golden/<cpu>/`), and on a CPU without one the check skips.

    OPD_BENCH_WRITE_GOLDEN=1 pytest tests/bench/test_golden_run.py     # record them for this CPU
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from bench.world.reference import cpu_signature

GOLDEN = Path(__file__).resolve().parent / "golden"
SMALL_GRPO = {"prompts_per_step": "8", "group_size": "4"}
SMALL_DISTILL = {"distill.prompts_per_step": "8", "distill.samples": "4"}

CASES = {
    # experts that stop on their reward plateau, then distillation until it converges or the budget ends
    "opd-multi": ("opd-multi", 8e10, {"expert_fraction": "0.6", **{f"expert.{k}": v for k, v in SMALL_GRPO.items()},
                                      **SMALL_DISTILL}),
    # supervised steps on the external teacher's samples
    "sft": ("sft", 2e10, {"keep": "all", "prompts_per_step": "8"}),
    # token-weighted buckets and two epochs (clipped ratios)
    "grpo-dapo": ("grpo-joint", 4e10, {"loss_type": "dapo", "epochs": "2", **SMALL_GRPO}),
}


def _folder() -> Path:
    """This CPU's golden folder, e.g. golden/amd-epyc-avx2-torch-2-13-0-cpu."""
    return GOLDEN / re.sub(r"[^a-z0-9]+", "-", cpu_signature().lower()).strip("-")


def _record(summary: dict) -> dict:
    return {
        "ledger": [{k: v for k, v in row.items() if k != "seconds"} for row in summary["ledger"]],
        "curve": [{k: v for k, v in point.items() if k != "wall_s"} for point in summary["curve"]],
        "steps": summary["steps"],
        "method_metrics": summary["method_metrics"],
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_matches_its_golden_record(case, fast_profile, tmp_path):
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    method, budget, overrides = CASES[case]
    config = RunConfig(method=method, profile=fast_profile.name, budget_flops=budget, runs_dir=tmp_path,
                       eval_size=16, eval_every=0.25, overrides=tuple(overrides.items()))
    got = json.loads(json.dumps(_record(Runner(config, progress=False).run())))
    path = _folder() / f"{case}.json"
    if os.environ.get("OPD_BENCH_WRITE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"cpu": cpu_signature(), **got}, indent=1, sort_keys=True) + "\n")
    if not path.exists():
        known = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
        pytest.skip(f"no golden records for this CPU ({cpu_signature()}; recorded: {', '.join(known)})")
    golden = json.loads(path.read_text())
    assert golden.pop("cpu") == cpu_signature()
    for part in ("ledger", "curve", "steps", "method_metrics"):
        assert got[part] == golden[part], part


def test_an_unchanged_student_is_evaluated_once(fast_profile, tmp_path, monkeypatch):
    """While opd-multi trains its experts the student's weights do not move: its milestones reuse the
    last evaluation (the golden curve above holds the values), and evaluation runs again once
    distillation changes the weights."""
    from bench.evaluation import Evaluator
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    calls = []
    evaluate = Evaluator.evaluate
    monkeypatch.setattr(Evaluator, "evaluate", lambda self, *a, **k: calls.append(1) or evaluate(self, *a, **k))
    method, budget, overrides = CASES["opd-multi"]
    config = RunConfig(method=method, profile=fast_profile.name, budget_flops=budget, runs_dir=tmp_path,
                       eval_size=16, eval_every=0.25, overrides=tuple(overrides.items()))
    curve = Runner(config, progress=False).run()["curve"]
    experts = [p for p in curve if p["ledger_phase"].startswith("expert:")]
    distilled = [p for p in curve if p["ledger_phase"] == "distill"]
    assert experts and distilled
    assert len(calls) == len(curve) - len(experts)
