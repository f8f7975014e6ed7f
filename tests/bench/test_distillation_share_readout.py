"""benchmarks/distillation_share_readout.py on synthetic opd-multi records whose stopping-rule share is the
paper's by construction: the per-seed shares, the findings page's rows and verdict, the figure, and the
one-line error on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reports.metrics import plateau_distillation_share
from tests.bench.support import benchmark_module
from tests.reports.factory import make_record, write_runs

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "distillation_share_readout.py"


def test_each_seed_then_the_claims_rows_and_verdict(tmp_path):
    readout = benchmark_module("distillation_share_readout")
    # the factory's opd-multi spends the paper's share on distillation: 8.0% of its experts' FLOPs on four domains
    records = [make_record("opd-multi", suite="four_domain", seed=s) for s in range(3)]
    others = [make_record("grpo-joint", suite="four_domain", seed=0), make_record("opd-multi", suite="math", seed=0)]
    assert list(readout.boards_of(records + others)) == [("tiny", "four_domain", "easy")]
    stop, plateau = readout.shares(records[0])
    assert abs(stop - 0.08) < 1e-12
    assert plateau == plateau_distillation_share(records[0]["curve"], records[0]["eval_size"] * 4) and plateau < stop
    write_runs(records + others, tmp_path / "runs")
    figure = tmp_path / "shares.png"
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "runs"), "--figure", str(figure)],
                         capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "## tiny · four_domain · easy (the paper: 8.0%; the band: 4.0% to 16.0%)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert [line.split("|")[1].strip() for line in rows] == ["0", "1", "2"]
    assert all(line.split("|")[4].strip() == "8.0%" for line in rows)
    assert "- distillation share at the stopping rule (4 domains): 8.0% [8.0, 8.0] (iqm of 3): holds" in out
    assert "- claim 2 on this board:" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"wrote {figure}" in out


def test_bad_input_gets_one_line_and_exit_2(tmp_path):
    write_runs([make_record("grpo-joint", suite="four_domain")], tmp_path / "runs")
    for args in ([str(tmp_path / "missing")], [str(tmp_path / "runs")]):
        proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
        assert "error:" in proc.stderr.strip().splitlines()[-1]
