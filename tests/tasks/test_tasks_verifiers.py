"""Verifiers on hostile model output: never raise, never evaluate, bounded work, 0.0 for junk."""

from __future__ import annotations

import builtins
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks import DIFFICULTIES, get_domain, get_suite

DOMAINS = ("math", "code", "logic", "strings", "graphs")


def _problems() -> list:
    """A few problems of every generator: tiny and hf, all difficulties (rg generators included)."""
    out = []
    for domain in DOMAINS:
        dom = get_domain(domain)
        rng = random.Random(7)
        for difficulty in DIFFICULTIES:
            out += [dom.sample(rng, difficulty, "tiny") for _ in range(2)]
            hf = [dom.sample(rng, difficulty, "hf") for _ in range(30)]
            by_generator = {p.meta["generator"]: p for p in hf}
            out += list(by_generator.values())
    return out


PROBLEMS = _problems()
HOSTILE = [
    "",
    "\x00" * 100,
    "#",
    "####",
    "#\x00",
    "\u202e31",  # right-to-left override before the digits
    "１３",  # full-width digits
    "٣١",
    "1e309",
    "9" * 5000,
    "-" * 3000,
    "[" * 5000 + "]" * 5000,
    "{" * 3000,
    "#### " + "[" * 1500,
    "__import__('os').system('touch /tmp/opd_bench_pwned')",
    "#### __import__('os').system('touch /tmp/opd_bench_pwned')",
    "#__import__('os').system('touch /tmp/opd_bench_pwned')",
    "print(open('/etc/passwd').read())",
    "#### eval(\"1+1\")",
    "'; DROP TABLE results; --",
    "\ud800",  # lone surrogate
    "NaN",
    "#### sNaN",
    "#### Infinity",
    "#### -0",
    "A is a knight, A is a knave, B is a knight, B is a knave" * 40,
]


# One instance per domain: `get_domain` reads the installed packages' entry points for plugins on every
# call, which would be most of the fuzz tests' time.
DOMAIN_OF = {name: get_domain(name) for name in DOMAINS}


def _all_problems_domains():
    return [(DOMAIN_OF[p.domain], p) for p in PROBLEMS]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_strings_score_zero_or_one_and_never_raise(text, tmp_path):
    for dom, problem in _all_problems_domains():
        value = dom.score(text, problem)
        assert value in (0.0, 1.0)
        if "pwned" in text or "eval" in text or "passwd" in text:
            assert value == 0.0
    import os

    assert not os.path.exists("/tmp/opd_bench_pwned")


def test_verifiers_never_call_eval_or_exec_on_output(monkeypatch):
    """Our own domains' scoring paths never reach eval/exec (reasoning-gym's scorers are checked
    by the sentinel-file test above instead: number_sorting evals its own reference answer)."""
    calls = []

    def trap(*args, **kwargs):
        calls.append(args)
        raise AssertionError("eval/exec called while scoring")

    own = [(d, p) for d, p in _all_problems_domains() if not p.meta["generator"].startswith("rg:")]
    monkeypatch.setattr(builtins, "eval", trap)
    monkeypatch.setattr(builtins, "exec", trap)
    for dom, problem in own:
        for text in ("1+1", "#__import__('os')", problem.answer, problem.solution):
            dom.score(text, problem)
    assert calls == []


@pytest.mark.parametrize("bad", [None, 13, b"13", ["13"], {"a": 1}, 1.5])
def test_non_string_completions_score_zero(bad):
    for dom, problem in _all_problems_domains():
        assert dom.score(bad, problem) == 0.0


@pytest.mark.timeout(300)  # a hang guard; what scoring costs against output length: benchmarks/test_task_speed.py
def test_huge_outputs_score_zero():
    huge = ["7" * 10_000_000, "#" * 10_000_000, "a " * 5_000_000, "[1," * 3_000_000]
    for dom, problem in _all_problems_domains():
        for text in huge:
            assert dom.score(text, problem) == 0.0, problem.meta["generator"]


def test_right_answer_beyond_the_reading_window_scores_zero():
    for dom, problem in _all_problems_domains():
        marker = "#" if problem.meta["fmt"] == "tiny" else "####"
        assert dom.score("x" * 2500 + f"{marker} {problem.answer}", problem) == 0.0
        assert dom.score(f"{marker} {problem.answer}", problem) == 1.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_arbitrary_text_never_raises(text):
    for dom, problem in _all_problems_domains():
        assert dom.score(text, problem) in (0.0, 1.0)


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x1F), max_size=200), st.integers(0, 3))
def test_control_characters_never_raise_or_pass(junk, where):
    for dom, problem in _all_problems_domains():
        if problem.meta["fmt"] != "tiny":
            continue
        # Control characters inside the answer make it wrong; only surrounding whitespace is stripped.
        mangled = problem.answer[:where] + "\x01" + problem.answer[where:]
        assert dom.score(mangled, problem) == 0.0
        assert dom.score(junk, problem) in (0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="0123456789+-#=;:,. abcxyz", max_size=40))
def test_suite_score_matches_domain_score(text):
    suite = get_suite("four_domain", "easy", "tiny")
    for dom, problem in _all_problems_domains():
        if problem.meta["fmt"] == "tiny" and problem.meta["difficulty"] == "easy" and dom.name in suite.domains:
            assert suite.score(problem, text) == dom.score(text, problem)


def test_the_scoring_skeleton_extracts_normalises_compares_and_never_raises():
    from tasks.base import Problem, safe_score

    problem = Problem("math", "2+2=", "4", "2+2=4#4", meta={"fmt": "tiny"})
    same = lambda got, p: got == p.answer  # noqa: E731
    assert safe_score("2+2=4#4", problem, str.strip, same) == 1.0
    assert safe_score("#5", problem, str.strip, same) == 0.0
    assert safe_score("4", problem, str.strip, same, fmt="worked") == 0.0  # worked answers need the marker
    assert safe_score("#4", problem, lambda text: None, same) == 0.0  # normalised to no answer
    assert safe_score(None, problem, str.strip, same) == 0.0  # not even text

    def explode(*args):
        raise RecursionError("hostile")

    assert safe_score("#4", problem, explode, same) == 0.0
    assert safe_score("#4", problem, str.strip, explode) == 0.0
