"""Standard benchmarks from local files: loading through datasets, the split rule, the answer checkers
on right, wrong and hostile completions, and suites whose canonical solutions all score 1."""

from __future__ import annotations

import itertools
import os
import re
import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from tasks import STANDARD_SUITES, UnknownSuiteError, get_suite, list_suites
from tasks.gsm8k import GSM8K, normalise_number
from tasks.gsm8k import score as score_gsm8k
from tasks.hendrycks_math import MATH, last_boxed, normalise_latex
from tasks.hendrycks_math import score as score_math
from tasks.hendrycks_math import to_problem as to_math_problem
from tasks.humaneval import HUMANEVAL
from tasks.base import Problem
from tasks.mbpp import MBPP, build_program, extract_code, score_code
from tasks.sandbox import run_python
from tasks.standard import DATA_ENV, MissingDataError, data_root, load_split, split_files
from tasks.suites import SCORE_THREADS

pytest.importorskip("datasets")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "standard"
HOSTILE = [None, 42, "", "####", "\\boxed{", "\\boxed{" * 3000, "}" * 5000, "\udcff####\udcff", "#### 1e999999",
           "#### " + "9" * 5000, "```python\n" + "(" * 10000 + "\n```", "\x00" * 100]


@pytest.fixture(autouse=True)
def data(monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(FIXTURES))
    return FIXTURES


def problems(bench, split="test"):
    return load_split(bench, split)


# Loading and splits.


def test_files_load_through_datasets_with_their_own_splits():
    assert data_root() == FIXTURES
    assert {s: len(p) for s, p in split_files(GSM8K).items()} == {"train": 1, "test": 1}
    assert split_files(MBPP)["validation"][0].parent == FIXTURES / "mbpp" / "full"  # the Hub's config folder
    assert [len(problems(b, s)) for b, s in [(GSM8K, "train"), (GSM8K, "test"), (MATH, "train"), (MATH, "test"),
                                               (MBPP, "train"), (MBPP, "validation"), (MBPP, "test")]] == [
        24, 12, 18, 12, 8, 2, 6]
    assert load_split(HUMANEVAL, "train") == [] and len(problems(HUMANEVAL)) == 10


def test_a_folder_of_unnamed_files_is_a_test_split_and_parquet_reads_too(tmp_path, monkeypatch):
    import datasets

    rows = [json.loads(line) for line in (FIXTURES / "humaneval/openai_humaneval/test-00000-of-00001.jsonl").open()]
    (tmp_path / "humaneval").mkdir()
    (tmp_path / "humaneval" / "HumanEval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "gsm8k" / "main").mkdir(parents=True)
    datasets.Dataset.from_list([{"question": "What is 2+2?", "answer": "2+2=4\n#### 4"}]).to_parquet(
        str(tmp_path / "gsm8k" / "main" / "test-00000-of-00001.parquet"))
    (tmp_path / "gsm8k" / ".cache").mkdir()
    (tmp_path / "gsm8k" / ".cache" / "train.jsonl").write_text("not data\n")  # hidden folders are skipped
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    assert len(problems(HUMANEVAL)) == 10
    [gsm] = problems(GSM8K)
    assert gsm.answer == "4" and gsm.solution.endswith("#### 4") and "####" in gsm.prompt


def test_missing_data_is_one_line_naming_the_folder_and_the_download(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    for name in STANDARD_SUITES:
        with pytest.raises(MissingDataError) as info:
            get_suite(name, "easy", "hf")
        message = str(info.value)
        assert "\n" not in message and str(tmp_path) in message and "hf download" in message and DATA_ENV in message


def test_humaneval_without_mbpp_cannot_train(tmp_path, monkeypatch):
    shutil.copytree(FIXTURES / "humaneval", tmp_path / "humaneval")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    with pytest.raises(MissingDataError, match="mbpp"):
        get_suite("humaneval", "easy", "hf")


@pytest.mark.parametrize("fmt", ["tiny", "worked"])
def test_standard_suites_are_hf_only(fmt):
    with pytest.raises(UnknownSuiteError, match="format hf only"):
        get_suite("gsm8k", "easy", fmt)


def test_suites_are_registered():
    assert set(STANDARD_SUITES) <= set(list_suites())
    assert STANDARD_SUITES["std_math_code"] == ("gsm8k", "mbpp")


def test_listed_with_their_sizes_or_where_their_files_belong(monkeypatch, tmp_path):
    import json

    from typer.testing import CliRunner

    from bench.cli import app

    def listed():
        result = CliRunner().invoke(app, ["list", "suites", "--json"])
        assert result.exit_code == 0, result.output
        return {row["suite"]: row for row in json.loads(result.output) if row["format"] == "hf"}

    rows = listed()  # from the fixtures
    assert set(rows) == set(STANDARD_SUITES)
    for name, row in rows.items():
        suite = get_suite(name, "easy", "hf")
        assert row["heldout_size"] == len(suite.heldout()) > 0 and row["content_hash"] == suite.content_hash
        assert row["domains"] == list(STANDARD_SUITES[name]) and str(FIXTURES) in row["data"]
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "nothing-here"))
    rows = listed()
    assert set(rows) == set(STANDARD_SUITES)
    for row in rows.values():
        assert row["heldout_size"] is None and row["data"].startswith(f"missing: {tmp_path / 'nothing-here'}")


# Suites built from the fixtures.


@pytest.mark.parametrize("name", list(STANDARD_SUITES))
def test_canonical_solutions_score_one_and_splits_are_the_benchmarks(name):
    suite = get_suite(name, "easy", "hf")
    heldout = suite.heldout()
    assert heldout and all(p.domain in suite.domains for p in heldout)
    assert [suite.score(p, p.solution) for p in heldout] == [1.0] * len(heldout)
    assert [suite.score(p, "I do not know.") for p in heldout] == [0.0] * len(heldout)
    train = list(itertools.islice(suite.train_sampler(seed=1), 40))
    assert {p.domain for p in train} == set(suite.domains)
    assert not {p.prompt for p in train} & {p.prompt for p in heldout}
    assert list(itertools.islice(suite.train_sampler(seed=1), 40)) == train
    for domain in suite.domains:
        assert suite.validation(domain) and all(p.domain == domain for p in suite.validation(domain))
    assert len(suite.content_hash) == 64


def test_humaneval_trains_and_validates_on_mbpp():
    suite = get_suite("humaneval", "easy", "hf")
    train = list(itertools.islice(suite.train_sampler(seed=0), 10))
    assert all(p.domain == "humaneval" and p.meta["generator"] == "mbpp" for p in train)
    assert all(suite.score(p, p.solution) == 1.0 for p in train[:3])
    assert [p.meta["generator"] for p in suite.validation("humaneval")] == ["mbpp", "mbpp"]


# GSM8K.


@pytest.mark.parametrize("text, value", [("#### 72", "72"), ("#### 1,200", "1200"), ("#### $1,200.00.", "1200"),
                                         ("so she has 5 apples, then 7", "7"), ("#### -3", "-3"),
                                         ("#### \u22123", "-3"), ("#### +4.50", "4.5"), ("1, 2, 3", "3")])
def test_gsm8k_normalises_the_last_number(text, value):
    assert normalise_number(text) == Decimal(value)


def test_gsm8k_right_wrong_and_hostile():
    problem = problems(GSM8K)[0]
    answer = problem.answer
    assert score_gsm8k(f"Let me think.\n#### {answer}", problem) == 1.0
    assert score_gsm8k(f"The answer is {answer}.", problem) == 1.0  # no marker: the last number
    assert score_gsm8k(f"#### {answer}.00", problem) == 1.0
    assert score_gsm8k(f"#### {int(answer) + 1}", problem) == 0.0
    assert score_gsm8k(f"#### -{answer}", problem) == 0.0
    assert score_gsm8k(f"#### {answer}\n#### 0", problem) == 0.0  # the last marker counts
    assert all(score_gsm8k(h, problem) == 0.0 for h in HOSTILE)


# MATH.


@pytest.mark.parametrize("a, b", [("\\frac{3}{4}", "3/4"), ("\\dfrac{1}{6}", "\\frac16"), ("\\tfrac{1}{2}", "0.5"),
                                  ("\\left(2, 3\\right)", "(2,3)"), ("120^\\circ", "120"), ("12{,}000", "12000"),
                                  ("x = 5", "5"), ("\\text{5}", "5"), (".5", "0.5"), ("25\\%", "25"),
                                  ("\\sqrt2", "\\sqrt{2}"), ("3\\sqrt{3}.", "3\\sqrt{3}"), ("$-5$", "-5")])
def test_math_normalisation_equates_common_forms(a, b):
    from tasks.hendrycks_math import same_answer

    assert same_answer(normalise_latex(a), normalise_latex(b))


@pytest.mark.parametrize("a, b", [("\\frac{3}{4}", "4/3"), ("\\sqrt{2}", "2"), ("(2,3)", "(3,2)"), ("-5", "5")])
def test_math_normalisation_keeps_different_answers_apart(a, b):
    from tasks.hendrycks_math import same_answer

    assert not same_answer(normalise_latex(a), normalise_latex(b))


def test_math_boxed_extraction_matches_braces():
    assert last_boxed("so \\boxed{\\frac{1}{2}} and finally \\boxed{\\sqrt{x^{2}}}") == "\\sqrt{x^{2}}"
    assert last_boxed("\\boxed{unclosed") is None and last_boxed("no box") is None


def test_math_right_wrong_and_hostile():
    problem = next(p for p in problems(MATH, "train") + problems(MATH) if p.answer == "\\frac{3}{4}")
    assert score_math("Adding, we get $\\boxed{3/4}$.", problem) == 1.0
    assert score_math("#### 0.75", problem) == 1.0
    assert score_math("\\boxed{\\dfrac{3}{4}}", problem) == 1.0
    assert score_math("\\boxed{\\frac{4}{3}}", problem) == 0.0
    assert score_math("3/4", problem) == 0.0  # neither boxed nor after ####
    assert all(score_math(h, problem) == 0.0 for h in HOSTILE)
    # a row with no answer to be found (no `answer`, no braced \boxed{} in its solution) is scored 0
    blank = to_math_problem({"problem": "p", "solution": "the answer is \\boxed 5"})
    assert blank.answer == "" and score_math("\\boxed{}", blank) == score_math("\\boxed{5}", blank) == 0.0


# MBPP and HumanEval.


def test_code_extraction_takes_the_first_fenced_block():
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nUsage:\n```python\nf()\n```") == (
        "def f():\n    return 1\n")
    assert extract_code("```\nx = 1\n```") == "x = 1\n"
    assert extract_code("def f(): return 1") == "def f(): return 1"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut off by the token limit


def test_mbpp_right_wrong_and_hostile():
    problem = problems(MBPP)[0]
    assert score_code(problem.solution, problem) == 1.0
    assert score_code(f"Sure!\n```python\n{problem.answer}\n```\nDone.", problem) == 1.0
    wrong = problem.answer.replace("return", "return None and", 1)
    assert score_code(f"```python\n{wrong}\n```", problem) == 0.0
    hostile = ["```python\nwhile True: pass\n```", "```python\nimport os\nos._exit(0)\n```",
               "```python\nimport socket\nsocket.socket()\n```", "```python\nx = bytearray(1 << 40)\n```"]
    assert all(score_code(h, problem) == 0.0 for h in HOSTILE + hostile)


def test_humaneval_takes_a_whole_function_or_the_body():
    problem = problems(HUMANEVAL)[0]
    assert problem.meta["entry_point"] == "add"
    assert score_code("```python\n    return x + y\n```", problem) == 1.0  # the body, continuing the prompt
    assert score_code("```python\ndef add(x, y):\n    return y + x\n```", problem) == 1.0
    assert score_code("```python\ndef add(x, y):\n    return x - y\n```", problem) == 0.0
    assert all(score_code(h, problem) == 0.0 for h in HOSTILE)


# an object equal to everything, and near everything: it would pass `==` and `abs(x - y) < eps` tests
ALWAYS_EQUAL = ("```python\nclass _A:\n    __eq__ = lambda s, o: True\n    __ne__ = lambda s, o: False\n"
                "    __sub__ = __rsub__ = lambda s, o: 0\n    __hash__ = object.__hash__\n"
                "def {name}(*a, **k):\n    return {value}\n```")


@pytest.mark.parametrize("value", ["_A()", "type('I', (int,), {'__eq__': lambda s, o: True})(0)"])
def test_code_that_returns_an_object_equal_to_everything_fails(value):
    for problem in (problems(MBPP)[0], problems(HUMANEVAL)[0]):
        name = problem.meta.get("entry_point") or re.search(r"assert (\w+)\(", problem.meta["tests"]).group(1)
        assert score_code(ALWAYS_EQUAL.format(name=name, value=value), problem) == 0.0, (problem.domain, value)


@pytest.mark.parametrize("code, tests", [
    ("import collections\nPt = collections.namedtuple('Pt', 'x y')\ndef mid():\n    return Pt(1.0, 1.0)",
     "assert mid() == (1.0, 1.0)"),
    ("import enum\nclass C(enum.IntEnum):\n    A = 1\n    B = 2\ndef f():\n    return C.B", "assert f() == 2"),
    ("import sys\nsys.setrecursionlimit(100000)\ndef s(n):\n    return 0 if n == 0 else n + s(n - 1)",
     "assert s(20000) == 20000 * 20001 // 2"),  # the tests' call is checked, not the code's recursion
    ("def g(n):\n    return (i for i in range(n))", "assert list(g(3)) == [0, 1, 2]"),
])
def test_the_result_check_passes_the_codes_own_named_tuples_enums_recursion_and_generators(code, tests):
    problem = Problem("mbpp", "p", "a", "s", {"tests": tests})
    result = run_python(build_program(code, problem))
    assert result.passed, result.output


def test_a_helper_the_tests_do_not_call_may_return_objects_of_its_own():
    problem = problems(HUMANEVAL)[0]  # add(x, y)
    code = ("```python\nclass Box:\n    def __init__(self, v):\n        self.v = v\n"
            "def boxed(v):\n    return Box(v)\n"
            "def add(x, y):\n    return boxed(x).v + boxed(y).v\n```")
    assert score_code(code, problem) == 1.0


def test_mbpp_sanitized_rows_read_too(tmp_path, monkeypatch):
    row = {"source_file": "x", "task_id": 2, "prompt": "Write a function to add one to the square root.",
           "code": "def f(x):\n    return math.sqrt(x) + 1", "test_imports": ["import math"],
           "test_list": ["assert f(4) == 3"]}
    (tmp_path / "mbpp" / "sanitized").mkdir(parents=True)
    (tmp_path / "mbpp" / "sanitized" / "test.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    [problem] = problems(MBPP)
    assert "square root" in problem.prompt
    assert score_code(f"```python\nimport math\n{row['code']}\n```", problem) == 1.0


def test_score_many_scores_code_on_threads_in_order_with_programs_running_at_once(monkeypatch):
    suite = get_suite("std_math_code", "easy", "hf")
    heldout = suite.heldout()
    completions = [p.solution if i % 2 else "wrong" for i, p in enumerate(heldout)]
    scores = suite.score_many(heldout, completions)
    assert scores == [suite.score(p, c) for p, c in zip(heldout, completions)]
    assert scores == [float(i % 2) for i in range(len(heldout))]
    # each program prints when it started and ended, then fails; the sandbox's output is kept here
    outputs = []

    def run_and_keep(program):
        result = run_python(program)
        outputs.append(result)
        return result

    monkeypatch.setattr("tasks.mbpp.run_python", run_and_keep)
    slow = ("```python\nimport time\nstart = time.time()\ntime.sleep(1)\n"
            "print('RAN', start, time.time())\nraise SystemExit(1)\n```")
    assert suite.score_many(heldout[-4:], [slow] * 4) == [0.0] * 4
    spans = [tuple(map(float, re.search(r"RAN (\S+) (\S+)", r.output).groups())) for r in outputs]
    assert len(spans) == 4
    # the most programs running at one moment: as many as score_many has threads, not one after another
    at_once = max(sum(s <= start < e for s, e in spans) for start, _ in spans)
    assert at_once == min(4, SCORE_THREADS, os.cpu_count() or 1) >= 2


def test_heldout_is_the_test_split_in_a_fixed_shuffled_order():
    suite = get_suite("hendrycks_math", "easy", "hf")
    heldout, rows = suite.heldout(), problems(MATH)
    assert sorted(p.prompt for p in heldout) == sorted(p.prompt for p in rows)
    assert [p.prompt for p in heldout] != [p.prompt for p in rows]
    assert [p.prompt for p in get_suite("hendrycks_math", "hard", "hf").heldout()] == [p.prompt for p in heldout]
