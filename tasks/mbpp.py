"""MBPP (Mostly Basic Python Problems) from local files: `text`, `code`, `test_list` rows.

The `full` configuration of `google-research-datasets/mbpp` (train 374, validation 90, test 500,
prompt 10; the `sanitized` one is read too when it is the only one there): the prompt is the task
with its test asserts (as in the original paper, so the model knows the function's name) and asks
for one Python code block; the reference answer and the worked solution are the dataset's code.

Checking (`score_code`, also HumanEval's): the completion's code is the first fenced code block in
its first `MAX_CODE_CHARS` characters (```` ```python ````, ```` ```py ```` or bare ```` ``` ````; a
block the token limit cut off counts up to the end), else the whole of that text. The program run is
`meta["prefix"]` (HumanEval's prompt; empty here), then the code, then `meta["tests"]` (the asserts,
after `test_setup_code`), in `tasks.sandbox`: a subprocess with time, memory and file-size limits
and no network. It scores 1.0 when the program runs to its end and exits 0. Model code is never run
in the evaluator's own process.
"""

from __future__ import annotations

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


def build_program(code: str, problem: Problem) -> str:
    """The program that tests `code`: the problem's prefix, the code, then its tests."""
    prefix = str(problem.meta.get("prefix", ""))
    entry = problem.meta.get("entry_point")
    if prefix and entry and not re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        body = prefix + code  # a completion of the prompt's function body
    else:
        body = f"{prefix}\n{code}" if prefix else code
    return f"{body}\n\n{problem.meta['tests']}\n"


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
