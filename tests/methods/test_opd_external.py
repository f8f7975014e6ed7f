"""opd-external: OPD from the prepared external teacher, whose use is counted and whose training is not."""

from __future__ import annotations

import pytest

from methods.opd_external import OPDExternalConfig
from methods.distill import DistillConfig
from tests.methods.support import (
    SMALL_DISTILL, check_curve, grouped, ledger_keys, phase_flops, run_method, spent_budget,
)


def test_distils_from_the_external_teacher_until_the_budget(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "opd-external", 3e10, **grouped("distill", kl_threshold=0.0),
                         **SMALL_DISTILL)
    assert ledger_keys(summary) == {("distill", "rollout", "student"), ("distill", "score", "external"),
                                    ("distill", "update", "student")}
    # The teacher's own post-training is recorded as `external`, not counted.
    assert summary["flops"]["external"] > 0
    assert not any(r["category"] == "counted" and r["phase"] == "external" for r in summary["ledger"])
    assert phase_flops(summary, "distill", "score", "external") > 0
    assert spent_budget(summary)
    check_curve(summary)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError):
        OPDExternalConfig(teacher="")
    with pytest.raises(ValueError):
        OPDExternalConfig(distill=DistillConfig(samples=0))
