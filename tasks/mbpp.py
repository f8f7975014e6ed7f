"""MBPP (Mostly Basic Python Problems) from local files: `text`, `code`, `test_list` rows.

The `full` configuration of `google-research-datasets/mbpp` (train 374, validation 90, test 500,
prompt 10; the `sanitized` one is read too when it is the only one there): the prompt is the task
with its test asserts (as in the original paper, so the model knows the function's name) and asks
for one Python code block; the reference answer and the worked solution are the dataset's code.

Checking (`score_code`, also HumanEval's): the completion's code is the first fenced code block in
its first `MAX_CODE_CHARS` characters (```` ```python ````, ```` ```py ```` or bare ```` ``` ````; a
block the token limit cut off counts up to the end), else the whole of that text. The program run is
`meta["prefix"]` (HumanEval's prompt; empty here), then the code, then the check of what the tests'
calls return (`RESULT_CHECK`), then `meta["tests"]` (the asserts, after `test_setup_code`), in
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


# Before the tests: `_opd_bench_plain`, which the tests' calls are rewritten to go through
# (`checked_tests`), refuses a result holding an object of a class the tested code defined that makes
# its own comparisons, arithmetic or truth (an object whose `__eq__` is always true passes every `==`
# test, with a `__sub__` to match every `abs(result - y) < eps`); built-in and library values, and the
# code's own named tuples and enums, pass as before; containers are looked into. Only the tests' calls
# are checked: the code's own calls (its recursion, its helpers' objects) are as they were.
RESULT_CHECK = """
def _opd_bench_plain(value, depth=0, _type=type, _getattr=getattr, _isinstance=isinstance, _iter=iter,
                     _dict=dict, _many=(list, tuple, set, frozenset), _own=frozenset((
                         "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__",
                         "__sub__", "__rsub__", "__abs__", "__float__", "__int__", "__index__", "__round__",
                         "__contains__"))):
    for cls in _type(value).__mro__:
        if _getattr(cls, "__module__", None) == "__main__" and not _own.isdisjoint(_getattr(cls, "__dict__", ())):
            raise TypeError("a test's result is an object of a class the tested code defined, with comparisons "
                            "or arithmetic of its own")
    if depth < 20 and _isinstance(value, _dict):
        for key in _iter(value):
            _opd_bench_plain(key, depth + 1)
            _opd_bench_plain(value[key], depth + 1)
    elif depth < 20 and _isinstance(value, _many):
        for item in _iter(value):
            _opd_bench_plain(item, depth + 1)
    return value
"""


class _CheckCalls(ast.NodeTransformer):
    """Every call of a plain name in the tests (`f(x)`, `candidate(x)`) as `_opd_bench_plain(f(x))`."""

    def visit_Call(self, node: ast.Call) -> ast.AST:  # noqa: N802 - ast's visitor naming
        self.generic_visit(node)
        if not isinstance(node.func, ast.Name) or node.func.id.startswith("_opd_bench"):
            return node
        return ast.copy_location(ast.Call(ast.Name("_opd_bench_plain", ast.Load()), [node], []), node)


def checked_tests(tests: str) -> str:
    """The tests with each call of a name through `_opd_bench_plain` (`RESULT_CHECK`); tests that do not
    parse are run as written (they fail as written, too)."""
    try:
        tree = ast.parse(tests)
    except (SyntaxError, ValueError):
        return tests
    return ast.unparse(ast.fix_missing_locations(_CheckCalls().visit(tree)))


def build_program(code: str, problem: Problem) -> str:
    """The program that tests `code`: the problem's prefix, the code, the check of the tests' results
    (`RESULT_CHECK`), then its tests, their calls through that check."""
    prefix = str(problem.meta.get("prefix", ""))
    entry = problem.meta.get("entry_point")
    if prefix and entry and not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        body = prefix + code  # a completion of the prompt's function body
    else:
        body = f"{prefix}\n{code}" if prefix else code
    return f"{body}\n{RESULT_CHECK}\n{checked_tests(str(problem.meta['tests']))}\n"


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
