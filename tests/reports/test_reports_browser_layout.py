"""The site at desktop and phone widths, in the light and the dark colour scheme (Debian's chromium via playwright).

Every page is screenshot at 1280 and 390 px wide in both schemes, into a pytest temporary folder (the
path is printed; `pytest -s` shows it) for a person to look at.
"""

import time

import pytest

from reports.colours import FIXED
from reports.site import build_site
from reports.studies import load_study
from tests.reports.factory import (
    make_record, make_recover_record, make_sweep, make_two_budget_records, write_runs, write_study)
from tests.reports.browser import BROWSER_MARKS

pytestmark = BROWSER_MARKS

PAGES = {"index": "index.html", "findings": "findings.html", "method": "methods/math_code-easy-tiny/opd-multi.html",
         "study": "studies/long-study.html", "two-budget study": "studies/two-budgets.html"}
WIDTHS = {"desktop": 1280, "phone": 390}
SCHEMES = ("light", "dark")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("layout")
    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    records.append(make_record("x" * 150, seed=0))  # a long name must not widen a phone's page
    worlds = [{"profile": "tiny", "description": "worked answers of 30-60 tokens: a small student and teacher",
               "rows": [{"criterion": "completion length", "needs": ">= 30", "measured": "math 37.0", "met": True}]}]
    # a study: its page, and the header's link to the studies, must fit a phone too
    study = write_study(root / "long-study", [make_recover_record(s, 0.1 * (s % 2), 2.0) for s in range(6)],
                        title="A study whose title is long enough to wrap on a phone " * 2)
    # and one on two budgets, with its paired claim 1 and its table of distillation's cost
    joint, opd = make_two_budget_records()
    paired = write_study(root / "two-budgets", joint + opd, claims=[1], recovery_over=None,
                         sweep=["bench sweep --methods grpo-joint --seeds 3 --out runs-two/runs",
                                "bench sweep --methods opd-multi --seeds 3 --budget 4e13 --out runs-two/runs-long"])
    build_site([write_runs(records, root / "runs")], root / "out", worlds=worlds,
               studies=[load_study(study), load_study(paired)])
    return root / "out"


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots: {folder}")
    return folder


def _open(browser, width: int, scheme: str):
    context = browser.new_context(viewport={"width": width, "height": 900}, color_scheme=scheme)
    page = context.new_page()
    problems = []
    page.on("console", lambda m: m.type in ("error", "warning") and problems.append(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    return context, page, problems


def _settle(page) -> None:
    """Load every figure (lazy ones too) before measuring or taking a screenshot."""
    page.eval_on_selector_all("img", "imgs => imgs.forEach(i => { i.loading = 'eager'; })")
    deadline = time.monotonic() + 30
    while not page.evaluate("Array.from(document.images).every(i => i.complete)"):
        assert time.monotonic() < deadline, "figures still loading after 30 s"
        page.wait_for_timeout(50)
    assert page.evaluate("Array.from(document.images).every(i => i.naturalWidth > 0)")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("width", list(WIDTHS))
def test_every_page_fits_the_width_in_both_schemes(site, browser, shots, width, scheme):
    context, page, problems = _open(browser, WIDTHS[width], scheme)
    backgrounds = {}
    for name, rel in PAGES.items():
        page.goto((site / rel).as_uri())
        _settle(page)
        page.screenshot(path=str(shots / f"{name}-{width}-{scheme}.png"), full_page=True)
        # the page itself never scrolls sideways: wide tables scroll inside their wrapper
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert scroll <= inner + 1, (name, width, scheme, scroll, inner)
        backgrounds[name] = page.evaluate("getComputedStyle(document.body).backgroundColor")
        if width == "phone":
            # every figure takes the content's full width, and the header's links all fit on the screen
            widths = page.eval_on_selector_all(  # those on screen: the hidden tabs' are 0 wide
                "main figure",
                "fs => fs.filter(f => f.offsetParent !== null).map(f => f.getBoundingClientRect().width)")
            main = page.evaluate("document.querySelector('main').clientWidth")
            assert all(w >= main - 30 - 1 for w in widths) and (widths or name == "findings"), (name, widths, main)
            right = page.eval_on_selector_all(".site-header a", "as => as.map(a => a.getBoundingClientRect().right)")
            assert max(right) <= WIDTHS[width], right
    dark = scheme == "dark"
    assert set(backgrounds.values()) == {"rgb(17, 20, 24)" if dark else "rgb(255, 255, 255)"}, backgrounds
    context.close()
    assert problems == []


def test_a_wide_table_scrolls_inside_its_wrapper_on_a_phone(site, browser):
    context, page, problems = _open(browser, WIDTHS["phone"], "light")
    page.goto((site / "index.html").as_uri())
    wrap = page.locator("#panel-math_code-easy-tiny .table-wrap").first
    scroll, client = wrap.evaluate("w => [w.scrollWidth, w.clientWidth]")
    assert scroll > client  # the table is wider than the phone, and the wrapper scrolls
    context.close()
    assert problems == []


def _swatches(page, panel: str) -> dict[str, str]:
    return dict(page.eval_on_selector_all(
        f"#panel-{panel} table.board tbody td.text",
        "cells => cells.map(c => [c.querySelector('a').textContent, "
        "c.querySelector('svg.swatch rect').getAttribute('fill')])"))


def test_a_method_has_the_same_colour_on_every_tab_and_in_the_figures(site, browser):
    context, page, problems = _open(browser, WIDTHS["desktop"], "light")
    page.goto((site / "index.html").as_uri())
    first = _swatches(page, "math_code-easy-tiny")
    page.click("#tab-four_domain-easy-tiny")
    assert page.is_visible("#panel-four_domain-easy-tiny")
    second = _swatches(page, "four_domain-easy-tiny")
    assert len(set(first) & set(second)) == 6 and len(set(first.values())) == len(first)  # one colour per method
    for method in set(first) & set(second):
        assert first[method] == second[method], method
    assert first["opd-multi"] == FIXED["opd-multi"]
    # the swatch's colour is the figures': the frontier's line for opd-multi on both boards
    for slug in ("math_code-easy-tiny", "four_domain-easy-tiny"):
        assert FIXED["opd-multi"] in (site / "plots" / slug / "frontier.svg").read_text(encoding="utf-8")
    context.close()
    assert problems == []


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_figure_opens_full_size_and_reads_in_both_schemes(site, browser, scheme):
    context, page, problems = _open(browser, WIDTHS["desktop"], scheme)
    page.goto((site / "index.html").as_uri())
    link = page.locator("#panel-math_code-easy-tiny figure a.enlarge").nth(1)  # the frontier, drawn by svgplot
    href = link.get_attribute("href")
    assert href.endswith(".svg")
    link.click()
    page.wait_for_load_state("load")
    assert page.url.endswith(href) and page.evaluate("document.documentElement.localName") == "svg"
    svg_colours = page.evaluate("""[getComputedStyle(document.querySelector('rect.bg')).fill,
                                    getComputedStyle(document.querySelector('text')).fill]""")
    # the seaborn figure opened directly: matplotlib's own colours, overridden in the dark scheme
    page.goto((site / "plots" / "math_code-easy-tiny" / "curves.svg").as_uri())
    seaborn_colours = page.evaluate("""[getComputedStyle(document.querySelector('#patch_1 path')).fill,
                                        getComputedStyle(document.querySelector('text')).fill]""")
    for background, text in (svg_colours, seaborn_colours):
        assert background == ("rgb(27, 31, 39)" if scheme == "dark" else "rgb(255, 255, 255)"), background
        assert abs(_luminance(text) - _luminance(background)) > 0.5, (background, text)  # text reads on it
    context.close()
    assert problems == []


def _luminance(rgb: str) -> float:
    r, g, b = (int(v) for v in rgb[rgb.index("(") + 1:rgb.index(")")].split(",")[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def test_the_method_page_shows_its_samples(site, browser):
    context, page, problems = _open(browser, WIDTHS["phone"], "light")
    page.goto((site / PAGES["method"]).as_uri())
    _settle(page)  # leaving the page while a figure loads would cancel its request
    shown = page.locator("details.run-samples[open] details.evaluation[open] li.sample")
    assert shown.count() == 4 and shown.first.is_visible()  # math and code, two prompts each
    assert "reward" in shown.first.inner_text() and shown.first.locator("pre.completion").is_visible()
    closed = page.locator("details.run-samples[open] details.evaluation").first  # the base model's
    assert closed.get_attribute("open") is None and not closed.locator("li.sample").first.is_visible()
    closed.locator("summary").click()  # pick another evaluation: no script, the browser's own <details>
    assert closed.locator("li.sample").first.is_visible()
    # the command that reproduces each run, and its record file, open from the page
    assert page.locator("pre.cmd").first.inner_text().startswith("bench run --method opd-multi")
    page.click("a.record-link >> nth=0")
    page.wait_for_load_state("load")
    assert page.url.endswith(".json") and '"run_id"' in page.content()
    context.close()
    assert problems == []
