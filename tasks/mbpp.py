"""MBPP (Mostly Basic Python Problems) from local files: `text`, `code`, `test_list` rows.

The `full` configuration of `google-research-datasets/mbpp` (train 374, validation 90, test 500,
prompt 10; the `sanitized` one is read too when it is the only one there): the prompt is the task
with its test asserts (as in the original paper, so the model knows the function's name) and asks
for one Python code block; the reference answer and the worked solution are the dataset's code.

Checking (`score_code`, also HumanEval's): the completion's code is the first fenced code block in
its first `MAX_CODE_CHARS` characters (```` ```python ````, ```` ```py ```` or bare ```` ``` ````; a
block the token limit cut off counts up to the end), else the whole of that text. The program run is
`meta["prefix"]` (HumanEval's prompt; empty here), then the code, then the check of what the tested
functions return (`RESULT_CHECK`), then `meta["tests"]` (the asserts, after `test_setup_code`), in
`tasks.sandbox`: a subprocess with time, memory and file-size limits
and no network. It scores 1.0 when the program runs to its end and exits 0. Model code is never run
in the evaluator's own process.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from tasks.base import Problem
from tasks.sandbox import run_python
from tasks.standard import Benchmark, StandardDomain

MAX_CODE_CHARS = 8000
CODE_INSTRUCTION = "Write the Python code in a single ```python code block."
# A block cut off by the token limit (no closing fence) still counts.
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(completion: str) -> str:
    """The first fenced code block of the completion, else the completion itself (both truncated)."""
    text = completion[:MAX_CODE_CHARS]
    match = _FENCE.search(text)
    return match.group(1) if match else text


# Between the code and its tests: each function the tests call that the code defined is wrapped so
# that what it returns may hold no object of a class the code defined (one whose `__eq__` is always
# true would pass every `==` test, and `abs(result - y) < eps` with a `__sub__` to match); values of
# built-in and library types pass as before, containers are looked into. Helpers the tests do not
# call may return what they like (a tree's nodes, say).
RESULT_CHECK = """
def _opd_bench_checked(function, _wraps=__import__("functools").wraps, _type=type, _getattr=getattr,
                       _isinstance=isinstance, _iter=iter, _dict=dict, _many=(list, tuple, set, frozenset)):
    def plain(value, depth=0):
        if _getattr(_type(value), "__module__", None) == "__main__":
            raise TypeError("a test's result holds an object of a class the tested code defined")
        if depth < 20 and _isinstance(value, _dict):
            for key in _iter(value):
                plain(key, depth + 1)
                plain(value[key], depth + 1)
        elif depth < 20 and _isinstance(value, _many):
            for item in _iter(value):
                plain(item, depth + 1)
        return value

    @_wraps(function)
    def checked(*args, **kwargs):
        return plain(function(*args, **kwargs))
    return checked
for _opd_bench_name in TESTED:
    _opd_bench_value = globals().get(_opd_bench_name)
    if _opd_bench_value.__class__ is _opd_bench_checked.__class__ and _opd_bench_value.__module__ == "__main__":
        globals()[_opd_bench_name] = _opd_bench_checked(_opd_bench_value)
"""


def tested_names(problem: Problem) -> tuple[str, ...]:
    """The functions a problem's tests call by name (HumanEval's `check` calls its entry point)."""
    entry = problem.meta.get("entry_point")
    try:
        tree = ast.parse(str(problem.meta["tests"]))
    except SyntaxError:
        return (entry,) if entry else ()
    called = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return tuple(sorted(called | ({entry} if entry else set())))


def build_program(code: str, problem: Problem) -> str:
    """The program that tests `code`: the problem's prefix, the code, the check of its functions'
    results (`RESULT_CHECK`), then its tests."""
    prefix = str(problem.meta.get("prefix", ""))
    entry = problem.meta.get("entry_point")
    if prefix and entry and not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        body = prefix + code  # a completion of the prompt's function body
    else:
        body = f"{prefix}\n{code}" if prefix else code
    check = RESULT_CHECK.replace("TESTED", repr(tested_names(problem)))
    return f"{body}\n{check}\n{problem.meta['tests']}\n"


def score_code(completion: str, problem: Problem) -> float:
    """1.0 if the completion's code passes the problem's tests in the sandbox, else 0.0; never raises."""
    try:
        if not isinstance(completion, str) or not completion.strip():
            return 0.0
        return 1.0 if run_python(build_program(extract_code(completion), problem)).passed else 0.0
    except Exception:  # hostile text must never crash an evaluation
        return 0.0


def to_problem(row: dict[str, Any]) -> Problem:
    tests = list(row["test_list"])
    # The `sanitized` configuration names the task `prompt` and lists its imports in `test_imports`.
    setup = "\n".join([*(row.get("test_imports") or []), str(row.get("test_setup_code") or "")]).strip()
    task = str(row.get("text") or row.get("prompt") or "").strip()
    prompt = (f"You are an expert Python programmer, and here is your task: {task}\n"
              f"Your code should pass these tests:\n\n" + "\n".join(tests) + f"\n\n{CODE_INSTRUCTION}")
    code = str(row["code"]).replace("\r\n", "\n").strip()
    meta = {"generator": "mbpp", "fmt": "hf", "task_id": str(row.get("task_id", "")),
            "tests": "\n".join([setup, *tests]).strip()}
    return Problem("mbpp", prompt, code, f"```python\n{code}\n```", meta)


MBPP = Benchmark("mbpp", "google-research-datasets/mbpp", to_problem, score_code, config_dir="full",
                 parallel_score=True)


def MBPPDomain() -> StandardDomain:  # noqa: N802 - the registry calls it like a class
    return StandardDomain(MBPP)
