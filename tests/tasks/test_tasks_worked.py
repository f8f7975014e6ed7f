"""The worked format: answers worked over 22-60 tokens, rewarded on the final answer after `#` only."""

from __future__ import annotations

import random
import statistics
import subprocess
import sys

import pytest

from tasks import DIFFICULTIES, UnknownSuiteError, get_domain, get_suite
from tasks.base import extract_answer
from tasks.code import run_program

WORKED = ("math", "code", "graphs", "strings")


def _samples(domain: str, difficulty: str, n: int, seed: int = 0):
    rng = random.Random(seed)
    dom = get_domain(domain)
    return dom, [dom.sample(rng, difficulty, "worked") for _ in range(n)]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("domain", WORKED)
def test_solutions_are_worked_and_scored_on_the_final_answer_only(domain, difficulty):
    dom, problems = _samples(domain, difficulty, 200)
    for p in problems:
        assert p.meta["fmt"] == "worked" and p.solution.endswith("#" + p.answer)
        assert p.alt_solution.endswith("#" + p.answer) and p.alt_solution != p.solution
        assert all(32 <= ord(ch) <= 126 or ch == "\n" for ch in p.prompt + p.solution + p.alt_solution)
        assert dom.score(p.solution, p) == 1.0 and dom.score(p.alt_solution, p) == 1.0
        assert dom.score(p.answer, p) == 0.0  # no marker, no answer
        head, _, _ = p.solution.rpartition("#")
        assert dom.score(f"{head}#{p.answer}x", p) == 0.0
        assert dom.score(f"garbage steps#{p.answer}", p) == 1.0  # the final answer only is rewarded
        assert dom.score("#" * 3000, p) == 0.0 and dom.score("", p) == 0.0


def test_easy_lengths_are_30_to_60_tokens_on_average_and_differ_by_domain():
    means = {}
    for domain in WORKED:
        _, problems = _samples(domain, "easy", 500)
        means[domain] = statistics.mean(len(p.solution) for p in problems)
        assert 20 <= means[domain] <= 62, (domain, means[domain])
    for suite in (("math", "code"), WORKED):
        assert 30 <= statistics.mean(means[d] for d in suite) <= 60, (suite, means)
    assert max(means.values()) - min(means.values()) > 15  # domains differ in length


def test_math_columns_add_and_subtract_like_python():
    _, problems = _samples("math", "hard", 500)
    for p in problems:
        a, op, b = p.prompt[:-1].partition("+") if "+" in p.prompt else p.prompt[:-1].partition("-")
        assert len(a) == len(b) and int(p.answer) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert int(p.answer) >= 0
        # each column's result digit, right to left, spells the answer (a final carry leads it)
        digits = [step.rpartition("=")[2] for step in p.solution.split("#")[0].split(",")]
        spelled = digits[-1] + "".join(d[-1] for d in reversed(digits[:-1]))
        assert int(spelled) == int(p.answer)


def test_code_loops_print_what_a_real_python_prints():
    _, problems = _samples("code", "medium", 100)
    script = "\n".join(f"print('---')\nexec({p.prompt[:-1]!r})" for p in problems)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert [chunk.strip() for chunk in out.stdout.split("---\n")[1:]] == [p.answer for p in problems]
    for p in problems:
        assert run_program(p.prompt[:-1]) == p.answer
        assert p.solution.count("i=") == int(p.prompt.split("range(")[1].split(")")[0])  # one state per iteration


def test_graph_solutions_follow_the_edges_from_the_start():
    _, problems = _samples("graphs", "easy", 300)
    for p in problems:
        start, _, pairs = p.prompt[:-1].partition(":")
        edges = dict(pairs.split(","))
        assert start == (set(edges) - set(edges.values())).pop()  # the given start is the path's start
        walk = [start]
        while walk[-1] in edges:
            walk.append(edges[walk[-1]])
        assert "".join(walk) == p.answer and len(p.answer) == 6


def test_worked_extraction_needs_the_marker_and_logic_has_no_worked_format():
    assert extract_answer("1+2=3#3", "worked") == "3"
    assert extract_answer("3", "worked") is None
    assert extract_answer("3", "tiny") == "3"
    with pytest.raises(UnknownSuiteError, match="no worked format"):
        get_suite("logic", "easy", "worked")
    suite = get_suite("four_domain", "easy", "worked")
    validation = {p.prompt for p in suite.validation("math")}
    assert len(validation) == 500 and not validation & {p.prompt for p in suite.heldout("math")}
