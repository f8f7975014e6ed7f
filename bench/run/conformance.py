"""`bench check-adapter PLUGIN`: run a method for a few steps and prove every FLOP it spent was metered.

The method runs through the real runner on the `smoke` profile (the tiny models with a 30-step
warm-up and a small budget) under `torch.utils.flop_counter.FlopCounterMode` (with the audit's
causal SDPA formulas). Whatever the counter sees during the run must be on the ledger: counted work
plus evaluation. A plugin that builds its own model, or reaches a submodule past the meter hooks,
shows up as instrumented FLOPs the ledger lacks, and the check fails.

The ledger charges padding keys as compute while the counter counts only the keys a mask lets
through, so the two differ slightly on mixed-length batches; agreement within 2% is required.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.world import prepare as prep
from bench.accounting.audit import TOLERANCE
from bench.accounting.counting import count_flops
from bench.world.profiles import PROFILES, Profile
from bench.registry import get_method
from bench.run.config import RunConfig
from bench.run.runner import Runner


def smoke_profile() -> Profile:
    """The `smoke` profile (`bench/world/profiles.py`): tiny models, a short warm-up, small budget and evaluation."""
    return PROFILES["smoke"]


@dataclass
class ConformanceResult:
    method: str
    metered_flops: float  # counted + eval charges of the run
    instrumented_flops: float  # what FlopCounterMode saw during the run
    budget_flops: float
    steps_flops: float  # counted FLOPs (the method's own work)

    @property
    def rel_diff(self) -> float:
        return (self.instrumented_flops - self.metered_flops) / max(self.metered_flops, 1.0)

    @property
    def ok(self) -> bool:
        return self.steps_flops > 0 and abs(self.rel_diff) <= TOLERANCE


def check_adapter(plugin: str, suite: str = "math_code", budget_flops: float | None = None) -> ConformanceResult:
    """Run `plugin` briefly under the instrumented counter and compare with its ledger."""
    cls = get_method(plugin)
    profile = smoke_profile()
    prep.prepare(profile, progress=False)  # outside the counter: its cost is booked shared/external
    with tempfile.TemporaryDirectory(prefix="opd-check-") as tmp:
        config = RunConfig(
            method=plugin, suite=suite, profile=profile.name, budget_flops=budget_flops or profile.budget_flops,
            runs_dir=Path(tmp), eval_every=0.5,
        )
        runner = Runner(config, progress=False)
        summary: dict = {}

        def run() -> None:
            summary.update(runner.run())

        split = count_flops(run)
    flops = summary["flops"]
    return ConformanceResult(
        method=cls.name,
        metered_flops=flops["counted"] + flops["eval"],
        instrumented_flops=float(split.total),
        budget_flops=config.budget,
        steps_flops=flops["counted"],
    )
