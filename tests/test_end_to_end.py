"""End to end on real (smoke-profile) runs: two methods x two seeds -> bench report -> Chromium.

The runs are real training on the tiny models; the site is built by the CLI from their records and
opened over file:// in Debian's chromium.
"""

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import app
from bench.run.conformance import smoke_profile
from tests.reports.browser import ARGS, CHROMIUM

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
METHODS = ("grpo-joint", "opd-multi")
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    profile = smoke_profile()
    root = tmp_path_factory.mktemp("e2e") / "runs"
    cli = CliRunner()
    for method in METHODS:
        for seed in SEEDS:
            out = cli.invoke(app, ["run", "--method", method, "--profile", profile.name, "--seed", str(seed),
                                   "--runs", str(root), "--no-progress"])
            assert out.exit_code == 0, out.output
    return root


def test_runs_write_complete_records(runs):
    records = [json.loads(p.read_text()) for p in sorted(runs.glob("*/summary.json"))]
    assert sorted((r["method"], r["seed"]) for r in records) == sorted((m, s) for m in METHODS for s in SEEDS)
    for r in records:
        curve = r["curve"]
        assert curve[0]["flops"] == 0 and curve[0]["accuracy"] == r["base_accuracy"]
        assert all(a["flops"] <= b["flops"] for a, b in zip(curve, curve[1:]))
        assert r["flops"]["counted"] >= r["budget_flops"] or r["method"] == "opd-multi"
        assert r["flops"]["shared"] > 0 and r["flops"]["eval"] > 0
        assert (runs / r["run_id"] / "ledger.jsonl").exists()
    opd = [r for r in records if r["method"] == "opd-multi"]
    phases = {row["phase"] for r in opd for row in r["ledger"] if row["category"] == "counted"}
    assert {"expert:math", "expert:code"} <= phases


@pytest.mark.browser
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium")
def test_site_from_real_runs_opens_in_chromium(runs, tmp_path):
    out = tmp_path / "site"
    result = CliRunner().invoke(app, ["report", "--runs", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "4 records, 0 skipped" in result.output
    sync_api = pytest.importorskip("playwright.sync_api")
    problems: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.goto((out / "index.html").as_uri())
        text = page.inner_text("body")
        for method in METHODS:
            assert method in text
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "e2e-index.png"), full_page=True)
        page.click("text=opd-multi")
        page.wait_for_load_state()
        assert "opd-multi" in page.title() or "opd-multi" in page.inner_text("body")
        browser.close()
    assert problems == []
    shutil.rmtree(out)
