"""The static site: files, downloads, escaping of hostile names, safe paths, clean rebuilds, no torch."""

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from reports import locks
from reports.formatting import Slugs, csv_safe, is_safe_slug, slugify
from reports.output import SiteBusyError
from reports.records import load_records
from reports.site import SiteOverwriteError, build_site
from tests.reports.factory import make_record, make_sweep, write_runs

REPORTS = Path(__file__).resolve().parents[2] / "reports"
XSS = "<script>alert(1)</script>"
ATTR = '"><img src=x onerror=alert(2)>'


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    records += [make_record(XSS, seed=s, method_config={"note": "</pre>" + XSS, ATTR: ATTR}) for s in range(2)]
    records.append(make_record("=HYPERLINK(\"http://x\")", seed=0, run_id="formula"))
    runs = write_runs(records, root / "runs")
    (runs / "broken").mkdir()
    (runs / "broken" / "summary.json").write_text('{"schema_version": 1, "method": "' + XSS + '"}')
    summary = build_site([runs], root / "out", generated="2026-01-01T00:00:00Z")
    return summary, root / "out"


def test_site_files_and_index(site):
    summary, out = site
    assert summary.n_records == 39 and summary.n_skipped == 1
    for rel in ("index.html", "findings.html", "results.csv", "results.json", "site.json", "static/site.css",
                "static/site.js"):
        assert (out / rel).is_file(), rel
    index = json.loads((out / "site.json").read_text())
    assert index["records"] == 39 and index["skipped"] == 1
    for page in index["pages"]:
        assert (out / page["path"]).is_file()
    assert sorted(index["files"]) == sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    methods = [p for p in index["pages"] if p["kind"] == "method"]
    assert len(methods) == 2 * 6 + 2  # every method on both boards, and the hostile one on math_code
    html = (out / "index.html").read_text()
    assert html.count('role="tabpanel"') == 2 and "math_code · easy · tiny" in html
    for plot in re.findall(r'<img src="([^"]+)"', html):
        assert (out / plot).is_file(), plot


def test_downloads(site):
    _, out = site
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 14
    ref = table[(table["method"] == "grpo-joint") & (table["suite"] == "math_code")].iloc[0]
    assert (ref["savings_k50"], ref["savings_k75"], ref["savings_k90"]) == (0.0, 0.0, 0.0)
    assert ref["n_seeds"] == 3 and ref["final_accuracy_stat"] == "iqm"
    for column in ("accuracy_at_10pct", "accuracy_at_25pct", "accuracy_at_50pct", "auc", "flops_to_target_k75",
                   "distillation_share_plateau", "reference_accuracy_at_spend", "gain_per_pflop_spent"):
        assert column in table.columns and f"{column}_low" in table.columns, column
    assert "accuracy_per_pflop" not in table.columns
    assert "'=HYPERLINK(\"http://x\")" in set(table["method"])  # a formula is not run by a spreadsheet
    assert (out / "results.csv").read_text(encoding="utf-8").startswith("profile,suite,difficulty,")  # read as it is
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "opd-bench-results/2" and len(results["findings"]) == 4
    assert "rewards stopping early" in results["notes"]["gain_per_pflop_spent"]
    board = results["boards"][0]
    assert set(board["targets"]) == {"k50", "k75", "k90"} and board["frontier"]
    assert results["skipped"][0]["reason"].startswith("record must contain")


def test_gain_per_pflop_is_in_the_downloads_only(site):
    _, out = site
    for page in out.rglob("*.html"):
        text = page.read_text(encoding="utf-8").lower()
        assert "per pflop" not in text and "gain_per_pflop" not in text, page
    index = (out / "index.html").read_text(encoding="utf-8")
    for title in ("Final accuracy", "Acc. at 10%", "Acc. at 25%", "Acc. at 50%", "FLOPs to τ₀.₇₅", "Savings at τ₀.₉",
                  "AUC", "Length ratio", "Distillation share"):
        assert f">{title}</button>" in index, title


def test_hostile_names_render_as_text_everywhere(site):
    _, out = site
    for page in out.rglob("*.html"):
        text = page.read_text()
        assert "<script>alert" not in text and "<img src=x" not in text, page
        assert len(re.findall(r"<script\b", text)) == 1, page  # only the site's own script tag
    index = (out / "index.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in index
    for svg in out.rglob("*.svg"):
        text = svg.read_text()
        assert "<script" not in text and "<img" not in text


def test_every_path_is_a_safe_slug(site):
    _, out = site
    for p in out.rglob("*"):
        rel = p.relative_to(out)
        for part in rel.parts:
            assert is_safe_slug(part.rsplit(".", 1)[0]), rel


def test_site_is_static_and_offline(site):
    _, out = site
    for page in list(out.rglob("*.html")) + [out / "static" / "site.css", out / "static" / "site.js"]:
        text = page.read_text()
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), page
        assert "@import" not in text and "url(http" not in text


def test_rebuild_removes_stale_pages_and_nothing_else(tmp_path):
    runs1 = write_runs([make_record("grpo-joint"), make_record("old-method")], tmp_path / "r1")
    runs2 = write_runs([make_record("grpo-joint")], tmp_path / "r2")
    out = tmp_path / "out"
    out.mkdir()
    (out / "README.md").write_text("mine")
    build_site([runs1], out)
    old = make_record("old-method")["run_id"]
    assert (out / "methods" / "math_code-easy-tiny" / "old-method.html").is_file()
    assert (out / "records" / f"{slugify(old)}.json").is_file()
    summary = build_site([runs2], out, force=True)  # dropping a record is asked for
    assert not (out / "methods" / "math_code-easy-tiny" / "old-method.html").exists()
    assert not (out / "records" / f"{slugify(old)}.json").exists()  # the site holds only the records it shows
    assert (out / "README.md").read_text() == "mine" and summary.n_records == 1


def test_a_build_that_fails_half_way_leaves_the_previous_site_whole(tmp_path, monkeypatch):
    import reports.site

    out = tmp_path / "out"
    build_site([write_runs([make_record("grpo-joint"), make_record("opd-multi")], tmp_path / "r1")], out)
    before = _snapshot(out)

    def broken(*args, **kwargs):
        raise RuntimeError("a page failed to render")

    monkeypatch.setattr(reports.site, "_write_studies", broken)  # after the boards' pages, before the index
    with pytest.raises(RuntimeError, match="failed to render"):
        build_site([write_runs([make_record("grpo-joint", seed=1)], tmp_path / "r2")], out, force=True)
    # every file of the previous site as it was, byte for byte, and nothing of the failed build's left
    assert _snapshot(out) == before and sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == []


def _snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_build_into_the_same_folder_is_refused_while_the_first_runs(tmp_path):
    runs = write_runs([make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(2)], tmp_path / "a")
    out = tmp_path / "site"
    build_site([runs], out)
    before = _snapshot(out)
    with locks.exclusive_folder(out, RuntimeError):  # what a build in another process holds
        with pytest.raises(SiteBusyError, match="being built by another process"):
            build_site([runs], out)
        with pytest.raises(SiteBusyError):
            build_site([runs], out, force=True)  # force replaces a site, never one being built
    assert _snapshot(out) == before  # not a file touched, none added (no staging folder, no lock file)
    build_site([runs], out)  # once the first is done
    assert _snapshot(out).keys() == before.keys()


def test_a_build_that_would_lose_records_refuses_and_touches_nothing(tmp_path):
    full = write_runs([make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(2)], tmp_path / "a")
    part = write_runs([make_record("grpo-joint", seed=0)], tmp_path / "b")
    out = tmp_path / "site"
    build_site([full], out)
    before = _snapshot(out)
    with pytest.raises(SiteOverwriteError) as caught:
        build_site([part], out)
    message = str(caught.value)
    assert "3 of its record files" in message and "force=True" in message and "another output folder" in message
    assert _snapshot(out) == before  # nothing deleted, nothing written again
    # the same runs again, more runs, or the site's own records: nothing is lost, no error
    build_site([full], out)
    build_site([out / "records"], out)
    build_site([full, part], out)
    # a folder with no built site is written to as before; force replaces the site
    (tmp_path / "plain").mkdir()
    build_site([part], tmp_path / "plain")
    summary = build_site([part], out, force=True)
    assert summary.n_records == 1 and len(list((out / "records").glob("*.json"))) == 1


def test_site_keeps_its_records_and_rebuilds_from_them(site, tmp_path):
    summary, out = site
    index = json.loads((out / "site.json").read_text())
    assert index["record_files"] == summary.record_files and len(summary.record_files) == 39
    copies = [json.loads((out / rel).read_text(encoding="utf-8")) for rel in summary.record_files]
    originals = {r["run_id"]: r for r in load_records(out.parent / "runs")[0]}
    assert {c["run_id"] for c in copies} == set(originals)
    for c in copies:
        assert c == {k: v for k, v in originals[c["run_id"]].items() if k != "_source"}
    # bench report --runs leaderboard/records --out leaderboard/, into a copy and then into itself
    site_copy = tmp_path / "leaderboard"
    shutil.copytree(out, site_copy)
    first = json.loads((site_copy / "results.json").read_text())
    for _ in range(2):
        again = build_site([site_copy / "records"], site_copy, generated="2026-01-01T00:00:00Z")
        assert again.n_records == 39 and again.n_skipped == 0
        assert sorted(again.record_files) == sorted(summary.record_files)
        rebuilt = json.loads((site_copy / "results.json").read_text())
        assert rebuilt["boards"] == first["boards"] and rebuilt["findings"] == first["findings"]
        assert pd.read_csv(site_copy / "results.csv").equals(pd.read_csv(out / "results.csv"))
    # a record that no longer passes is reported, and stays where it is: a build never deletes its input
    spoiled = site_copy / summary.record_files[0]
    spoiled.write_text(spoiled.read_text(encoding="utf-8").replace('"complete"', '"failed"'), encoding="utf-8")
    again = build_site([site_copy / "records"], site_copy)
    assert again.n_records == 38 and spoiled.is_file() and "status is 'failed'" in again.skipped[0][1]


def test_empty_runs_folder_builds_an_empty_site(tmp_path):
    (tmp_path / "runs").mkdir()
    summary = build_site([tmp_path / "runs"], tmp_path / "out")
    assert summary.n_records == 0 and summary.boards == []
    assert "No valid result records" in (tmp_path / "out" / "index.html").read_text()


def test_slugs():
    assert slugify("opd-multi") == "opd-multi" and slugify("math_code") == "math_code"
    for name in (XSS, "../../etc/passwd", "CON", "con", "a b", "", "é", "x" * 300, "opd-multi."):
        s = slugify(name)
        assert is_safe_slug(s) and s != name, name
    # an unsafe name: its cleaned prefix plus the first 8 hex digits of its sha256, the same in every process
    assert slugify("A b") == "a-b-a760b0e1" != slugify("a-b")
    slugs = Slugs()
    assert len({slugs(n) for n in ("a-b", "A b", "a b", "A-B")}) == 4
    assert slugs("a-b") == "a-b"


def test_csv_safe():
    assert csv_safe("=1+1") == "'=1+1" and csv_safe("-x") == "'-x" and csv_safe("opd") == "opd"
    assert csv_safe(-1.5) == -1.5


def test_reports_does_not_import_torch_or_the_engine():
    # reports reads records only: no torch, and no edge into bench/, methods/ or tasks/
    for path in REPORTS.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in {"torch", "bench", "methods", "tasks", "transformers"}, (path, name)
    code = ("import sys, reports.site, reports.records, reports.metrics, reports.plots; "
            "bad = [m for m in ('torch', 'transformers', 'bench') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPORTS.parent, timeout=120)


def test_findings_page_shows_each_worlds_regime_table(tmp_path):
    runs = write_runs([make_record(method="grpo-joint", seed=s) for s in range(2)], tmp_path / "runs")
    worlds = [{"profile": "tiny", "description": "worked answers", "rows": [
        {"criterion": "completion length", "needs": ">= 30", "measured": "math 37.0", "met": True},
        {"criterion": "rollout share", "needs": ">= 20%", "measured": "12% <b>", "met": False},
        {"criterion": "joint minus expert", "needs": "reported", "measured": "math -1.0", "met": None}]}]
    build_site([runs], tmp_path / "site", worlds=worlds)
    page = (tmp_path / "site" / "findings.html").read_text()
    assert 'id="world-tiny"' in page and "completion length" in page and "12% &lt;b&gt;" in page
    assert page.count("verdict-holds\">met") == 1 and page.count("not met") == 1 and ">reported<" in page
    assert json.loads((tmp_path / "site" / "results.json").read_text())["worlds"] == worlds
    build_site([runs], tmp_path / "bare")
    assert 'id="worlds"' not in (tmp_path / "bare" / "findings.html").read_text()


def test_findings_page_gives_each_claim_a_verdict_on_each_world(tmp_path):
    records = [make_record(method=m, profile=p, seed=s) for p in ("tiny", "direct") for m in ("grpo-joint", "opd-multi")
               for s in range(3 if p == "tiny" else 1)]
    build_site([write_runs(records, tmp_path / "runs")], tmp_path / "site")
    page = (tmp_path / "site" / "findings.html").read_text()
    claim = page[page.index('id="claim-1"'):page.index('id="claim-2"')]
    verdicts = claim[claim.index('class="world-verdicts"'):claim.index("</p>", claim.index('class="world-verdicts"'))]
    assert '<a href="#world-tiny">tiny</a>' in verdicts and '<a href="#world-direct">direct</a>' in verdicts
    assert verdicts.count('class="verdict ') == 2 and "inconclusive" in verdicts  # direct: a single seed


def test_a_board_of_a_large_budget_draws_its_figures(tmp_path):
    """Budgets past 1e19 FLOPs (a real model's post-training): the log axis's ticks are floats, where
    integer powers of ten past int64 made an array of Python objects that no figure could take a log of."""
    records = [make_record(m, seed=s, budget_flops=1e21) for m in ("grpo-joint", "opd-multi") for s in range(2)]
    build_site([write_runs(records, tmp_path / "runs")], tmp_path / "site")
    assert "10²¹" in (tmp_path / "site" / "plots" / "math_code-easy-tiny" / "curves.svg").read_text()


def test_a_file_written_twice_in_one_build_keeps_its_last_bytes(tmp_path):
    from reports.output import Writer

    (tmp_path / "site" / ".building-killed").mkdir(parents=True)  # what a build killed mid-way left
    with Writer(tmp_path / "site") as writer:
        writer.write("plots/a.svg", "first")
        writer.write("plots/a.svg", "second")
        writer.commit()
    assert (tmp_path / "site" / "plots" / "a.svg").read_text() == "second"
    assert [p.name for p in (tmp_path / "site").iterdir()] == ["plots"]  # no staging folder left


def test_a_study_with_both_methods_on_two_budgets_draws_each_budgets_curves(tmp_path):
    """Joint GRPO and opd-multi each at two budgets of one suite: two joint GRPO boards, so two claim 1
    figures, under two names (one name once made the second overwrite the first)."""
    from reports.studies import load_study
    from tests.reports.factory import write_study

    records = [make_record(m, seed=s, budget_flops=b) for m in ("grpo-joint", "opd-multi") for s in range(3)
               for b in (1e15, 4e15)]
    for r in records:
        r["run_id"] += f"-b{int(r['budget_flops'] / 1e15)}"
    study = load_study(write_study(tmp_path / "two", records, claims=[1], recovery_over=None))
    board = write_runs([make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)],
                       tmp_path / "board")
    build_site([board], tmp_path / "site", studies=[study])
    figures = sorted(p.name for p in (tmp_path / "site" / "studies" / "two").glob("curves-*.svg"))
    assert figures == ["curves-math_code-easy-tiny-4e15.svg", "curves-math_code-easy-tiny.svg"]
