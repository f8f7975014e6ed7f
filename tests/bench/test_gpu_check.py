"""benchmarks/gpu_check.py --dry-run: every part of the prepared GPU check runs on the CPU (with a
2-layer model and a few steps), so that device minutes go to measuring, not debugging."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_check_runs_every_part_on_the_cpu(tmp_path):
    out = tmp_path / "dry.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    parts = ("rollout", "update", "fused", "audit", "gpu_small")
    assert {p: result[p].get("error") for p in parts} == dict.fromkeys(parts)
    engines = {"ours", "torch_eager", "hf_dynamic", "hf_static"}
    for row in result["rollout"]["shapes"]:
        assert engines <= set(row) and all(row[e]["tokens"] > 0 for e in engines)
        assert {"ours_vs_hf_static", "ours_vs_hf_dynamic"} <= set(row)
    assert {r["fused_and_compiled"] for r in result["update"]["shapes"]} == {False, True}
    assert result["fused"]["max_abs_logprob_diff"] < 1e-5 and result["fused"]["grad_rel_diff"] < 1e-5
    audit = result["audit"]
    assert audit["within_2pct"] and audit["graph_rollout"]["eager_rel_diff"] == 0
    assert audit["graph_rollout"]["same_charge"] and audit["graph_rollout"]["same_tokens"]
    small = result["gpu_small"]
    assert small["curve"] and small["run"]["counted_flops"] > 0 and set(small["goals"]) == {
        "prepare_3min", "run_3min", "gain_8_points"}
