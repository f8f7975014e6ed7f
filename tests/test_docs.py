"""The documentation's references hold: every test it names exists, every link inside the repository
reaches a file, and a heading where it names one, and every `bench` command it shows parses."""

import functools
import re
import shlex
from pathlib import Path

import pytest
import typer.main

from bench.cli import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# a command's placeholders (`--seed S`, `--teacher NAME=PATH`, `runs/<run_id>`), given a value any option takes
PLACEHOLDER = re.compile(r"^([A-Z][A-Z0-9_]*(=[A-Z][A-Z0-9_]*)?|.*<[^>]*>.*|\.\.\.)$")


@functools.cache  # the same files for every page
def _defined_tests() -> set[str]:
    names = set()
    for folder in ("tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            names.update(re.findall(r"^\s*def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
    return names


@functools.cache  # a page is linked to many times
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


def _commands(page: Path) -> list[str]:
    """The `bench ...` commands a page shows: lines of its code blocks, and its inline code spans."""
    text = page.read_text(encoding="utf-8")
    blocks = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]  # `\` continues
    lines += re.findall(r"`(bench [^`]+)`", text.replace("\n", " "))
    commands = [re.sub(r"\s#.*$", "", line.strip()) for line in lines]
    return [re.sub(r"\[[^\]]*\]", "", c) for c in commands if c.startswith("bench ")]  # [optional parts] out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_bench_command_a_page_shows_parses(page):
    """Each command's words parse as its subcommand's options and arguments (placeholders given a
    value, `a|b` its first choice); a fragment that leaves out a required one (`bench run --resume`
    in prose) is not an error."""
    group = typer.main.get_command(app)
    wrong = []
    for command in _commands(page):
        args = ["0" if PLACEHOLDER.match(a) else a.split("|")[0] for a in shlex.split(command)[1:]]
        try:
            context = group.make_context("bench", list(args))
            name, sub, rest = group.resolve_command(context, list(args))
            sub.make_context(name, rest, parent=context)
        except Exception as exc:  # click's usage errors (typer vendors click, so matched by name)
            if type(exc).__name__ != "MissingParameter":
                wrong.append(f"{command}: {exc}")
    assert not wrong, "\n".join(wrong)
