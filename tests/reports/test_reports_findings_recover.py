"""Finding 4 reads the recovery protocol's own runs (`recover`), not only self-grpo records."""

import pytest

from reports.boards import build_boards
from reports.findings import claim_self_teachers
from reports.records import to_frames
from tests.reports.factory import make_record


def _recover_record(seed: int) -> dict:
    record = make_record("grpo-joint", seed=seed)
    record["method"] = "recover"
    record["run_id"] = f"recover__math_code-easy__tiny__s{seed}"
    record["recovery"] = {"domain": "math", "target": 0.4, "grpo_flops": 2e12, "opd_flops": 1e11}
    return record


def test_recover_runs_feed_the_self_teacher_claim():
    records = [make_record("grpo-joint", seed=s) for s in range(2)] + [_recover_record(s) for s in range(2)]
    claim = claim_self_teachers(build_boards(to_frames(records)))
    assert claim.rows, "a recover run's recovery block must be measured"
    row = claim.rows[0]
    assert row.measure == "recovery FLOPs, GRPO / self-OPD" and row.estimate.n_seeds == 2
    assert row.estimate.value == pytest.approx(20.0)  # grpo_flops / opd_flops = 2e12 / 1e11 in both seeds
