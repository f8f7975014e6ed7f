"""The leaderboard in a real browser (Debian's chromium via playwright), opened over file://.

Screenshots go to test-artifacts/reports/ (gitignored) for a person to look at.
"""

import json
import shutil
import time
from pathlib import Path

import pytest

from reports.site import build_site
from reports.studies import load_study
from tests.reports.browser import BROWSER_MARKS
from tests.reports.factory import make_record, make_recover_record, make_sweep, write_runs, write_study

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "reports"

pytestmark = BROWSER_MARKS


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    records.append(make_record("<script>alert(1)</script>", seed=0))
    build_site([write_runs(records, root / "runs")], root / "out")
    return root / "out"


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    problems = []
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    yield page
    page.close()
    assert problems == []


def _wait_until(page, expression: str, timeout_s: float = 30.0) -> None:
    """Poll `expression` until it is true, as `page.wait_for_function` would (same 30 s default).

    Not `wait_for_function` itself: when its first check fails it polls through `eval` inside the
    page, which the site's Content-Security-Policy (script-src 'self') rightly refuses, so the test
    failed whenever the images were still loading. `page.evaluate` runs outside the page's CSP.
    """
    deadline = time.monotonic() + timeout_s
    while not page.evaluate(expression):
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout_s} s: {expression}")
        page.wait_for_timeout(50)


def _images_load(page, scope: str) -> bool:
    """Every figure under `scope` loads and decodes (lazy ones are switched to eager first)."""
    page.eval_on_selector_all(f"{scope} img", "imgs => imgs.forEach(i => { i.loading = 'eager'; })")
    _wait_until(page, f"Array.from(document.querySelectorAll('{scope} img')).every(i => i.complete)")
    return page.evaluate(f"Array.from(document.querySelectorAll('{scope} img')).every(i => i.naturalWidth > 0)")


def _column(page, panel: str, index: int) -> list[str]:
    return page.eval_on_selector_all(f"#panel-{panel} table.board tbody tr",
                                     f"rows => rows.map(r => r.cells[{index}].getAttribute('data-sort'))")


def test_sort_switch_tabs_follow_a_link(site, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto((site / "index.html").as_uri())
    assert page.is_visible("#panel-math_code-easy-tiny") and not page.is_visible("#panel-four_domain-easy-tiny")
    # CSS and JS both load under the page's Content-Security-Policy from file://
    assert "system-ui" in page.evaluate("getComputedStyle(document.body).fontFamily")
    assert _images_load(page, "main")

    # sort by final accuracy (column 2): ascending, then descending
    header = "#panel-math_code-easy-tiny th:nth-child(3) button"
    before = _column(page, "math_code-easy-tiny", 2)
    page.click(header)
    asc = [float(x) for x in _column(page, "math_code-easy-tiny", 2)]
    assert asc == sorted(asc) and asc != [float(x) for x in before]
    page.click(header)
    desc = [float(x) for x in _column(page, "math_code-easy-tiny", 2)]
    assert desc == sorted(desc, reverse=True)
    assert page.get_attribute("#panel-math_code-easy-tiny th:nth-child(3)", "aria-sort") == "descending"
    # FLOPs to the main target (column 6): methods that never reach it sort last in both directions
    assert page.get_attribute("#panel-math_code-easy-tiny th:nth-child(7)", "data-metric") == "flops_to_target_k75"
    page.click("#panel-math_code-easy-tiny th:nth-child(7) button")
    ftt = _column(page, "math_code-easy-tiny", 6)
    assert "" in ftt and ftt.index("") > max(i for i, x in enumerate(ftt) if x)
    page.screenshot(path=str(ARTIFACTS / "index-sorted.png"), full_page=True)

    # switch tab: the other board shows, the first hides, the URL names the tab
    page.click("#tab-four_domain-easy-tiny")
    assert page.is_visible("#panel-four_domain-easy-tiny") and not page.is_visible("#panel-math_code-easy-tiny")
    assert page.url.endswith("#four_domain-easy-tiny")
    assert page.get_attribute("#tab-four_domain-easy-tiny", "aria-selected") == "true"

    # the hostile method name is text in the table, and its page opens
    page.click("#tab-math_code-easy-tiny")
    link = page.locator("#panel-math_code-easy-tiny a", has_text="<script>alert(1)</script>")
    assert link.count() == 1
    page.click("#panel-math_code-easy-tiny a >> text=opd-multi")
    page.wait_for_load_state("load")
    assert page.url.endswith("methods/math_code-easy-tiny/opd-multi.html")
    assert page.inner_text("h1").startswith("opd-multi")
    assert _images_load(page, "main")
    page.screenshot(path=str(ARTIFACTS / "method.png"), full_page=True)

    # its back link returns to the board's tab
    page.click(".crumbs a")
    page.wait_for_load_state("load")
    assert page.is_visible("#panel-math_code-easy-tiny")

    # a link to another board opens its tab scrolled into view, not the top of the page
    page.goto((site / "index.html").as_uri() + "#four_domain-easy-tiny")
    assert page.is_visible("#panel-four_domain-easy-tiny")
    top = page.evaluate("document.getElementById('tab-four_domain-easy-tiny').getBoundingClientRect().top")
    assert page.evaluate("window.scrollY") > 0 and 0 <= top < 100


def _leaders_agree_with_the_table(site: Path, page, panels: list[str]) -> None:
    """The sentence above each table names a leader at 10%, 25%, 50% and 100% of the budget; the
    table's matching column (accuracy there, interpolated on the curves) must agree with it, and so
    must results.json's final accuracy for the leader at 100%."""
    page.goto((site / "index.html").as_uri())
    column_of = {"0.1": "accuracy_at_10pct", "0.25": "accuracy_at_25pct", "0.5": "accuracy_at_50pct",
                 "1": "final_accuracy"}
    results = json.loads((site / "results.json").read_text(encoding="utf-8"))
    for panel in panels:
        board = next(b for b in results["boards"] if b["slug"] == panel)
        page.click(f"#tab-{panel}")
        clauses = page.eval_on_selector_all(
            f"#panel-{panel} p.ahead .ahead-at",
            "spans => spans.map(s => [s.dataset.fraction, s.dataset.leader, s.textContent])")
        assert [c[0] for c in clauses] == list(column_of), clauses
        assert page.inner_text(f"#panel-{panel} p.ahead").startswith("At 10% of the budget ")
        metrics = page.eval_on_selector_all(f"#panel-{panel} table.board thead th",
                                            "ths => ths.map(th => th.dataset.metric || '')")
        names = _column(page, panel, 0)
        # rows tagged as a protocol (claim 4's recovery) are shown but never ranked
        ranked = page.eval_on_selector_all(f"#panel-{panel} table.board tbody tr",
                                           "rows => rows.map(r => !r.classList.contains('protocol'))")
        protocols = {n for n, r in zip(names, ranked) if not r}
        assert protocols == {m["method"] for m in board["methods"] if m["is_protocol"]}
        for fraction, leader, text in clauses:
            values = [float(v) for v in _column(page, panel, metrics.index(column_of[fraction]))]
            pairs = [(v, n) for v, n, r in zip(values, names, ranked) if r]
            highest = max(v for v, _ in pairs)
            top = next(n for v, n in pairs if v == highest)  # the first, as the board orders
            assert top == leader and leader not in protocols, (panel, fraction, leader, values)
            assert f"{leader} leads" in text or f"{leader} is the only method" in text
            assert not any(p in text for p in protocols), text
        leader = page.get_attribute(f'#panel-{panel} .ahead-at[data-fraction="1"]', "data-leader")
        best = max((m for m in board["methods"] if not m["is_protocol"]),
                   key=lambda m: m["metrics"]["final_accuracy"]["value"])
        assert best["method"] == leader


def test_the_method_named_ahead_has_the_highest_accuracy_in_the_table(site, page):
    _leaders_agree_with_the_table(site, page, ["math_code-easy-tiny", "four_domain-easy-tiny"])


def test_the_reference_leaderboard_names_the_leader_its_curves_show(page):
    # the committed site, as built by `bench reproduce`: its words and its table agree on every board
    site = Path(__file__).resolve().parents[2] / "leaderboard"
    results = json.loads((site / "results.json").read_text(encoding="utf-8"))
    panels = [b["slug"] for b in results["boards"]]
    assert panels
    _leaders_agree_with_the_table(site, page, panels)


def test_findings_page(site, page):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.goto((site / "findings.html").as_uri())
    assert page.locator("section.claim").count() == 4
    assert page.locator("section.claim h2 .verdict").all_inner_texts() == ["holds"] * 4
    bases = page.locator("section.claim p.basis").all_inner_texts()
    assert len(bases) == 4 and all(b.startswith("Verdict rests on:") and "interval" in b for b in bases)
    assert "τ₀.₉" in bases[0] and "accuracy at 100% of the budget" in bases[2]
    page.screenshot(path=str(ARTIFACTS / "findings.png"), full_page=True)


def test_a_copied_site_works_anywhere(site, page, tmp_path):
    # every link is relative: a copy of the folder elsewhere is the same site
    copy = tmp_path / "copy"
    shutil.copytree(site, copy)
    page.goto((copy / "index.html").as_uri() + "#four_domain-easy-tiny")
    assert page.is_visible("#panel-four_domain-easy-tiny")
    page.click("text=results.json")
    assert "opd-bench-results/2" in page.content()


def test_a_study_opens_from_the_findings_page_and_links_its_records(page, tmp_path):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    study = write_study(tmp_path / "claim4-study", [make_recover_record(s, 0.2, 3.0) for s in range(4)])
    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    build_site([write_runs(records, tmp_path / "runs")], tmp_path / "out", studies=[load_study(study)])
    page.goto((tmp_path / "out" / "index.html").as_uri())
    page.click(".site-header >> text=Studies")
    assert page.url.endswith("findings.html#studies")
    page.click("#studies >> text=Claim 4 on eight seeds")
    assert page.url.endswith("studies/claim4-study.html")
    assert page.locator("section.claim h2 .verdict").all_inner_texts() == ["holds"]
    assert page.locator("table.study-runs tbody tr").count() == 4
    page.screenshot(path=str(ARTIFACTS / "study.png"), full_page=True)
    page.click("table.study-runs tbody tr >> nth=0 >> text=JSON")
    assert '"run_id": "recover__math_code-easy__tiny__s0"' in page.content()
