"""The documentation's references hold: every test it names exists, and every link inside the
repository reaches a file, and a heading where it names one."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _defined_tests() -> set[str]:
    names = set()
    for folder in ("tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            names.update(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    return names


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    out = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        out.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_test_a_page_names_exists(page):
    named = set(re.findall(r"`(test_\w+)`", page.read_text(encoding="utf-8")))
    assert not named - _defined_tests(), f"{page.name} names tests that do not exist"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_inside_the_repository_reaches_its_file_and_heading(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: outside the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"
