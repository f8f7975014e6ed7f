"""HumanEval (OpenAI, 164 hand-written functions) from local files, for evaluation; trains on MBPP.

Rows: `task_id`, `prompt` (imports, the signature and docstring), `canonical_solution` (the body),
`test` (a `check(candidate)` function) and `entry_point`, from `openai/openai_humaneval` or the
original `HumanEval.jsonl`. HumanEval has a test split only, so it cannot be trained on: the
`humaneval` domain holds out HumanEval and trains (and validates) on MBPP's train (and validation)
split, which must be present too. A code model trained on MBPP and scored on HumanEval is the
usual pairing; the two share no problems.

The prompt shows the function to complete and asks for it in one code block. Checking is MBPP's
(`tasks.mbpp.score_code`): the program is the HumanEval prompt, then the completion's code (a whole
function that redefines the entry point, or the body that continues the prompt), then the test and
`check(<entry_point>)`, run in the sandbox.
"""

from __future__ import annotations

from typing import Any

from tasks.base import Problem
from tasks.mbpp import CODE_INSTRUCTION, MBPP, score_code
from tasks.standard import Benchmark, StandardDomain


def to_problem(row: dict[str, Any]) -> Problem:
    prefix, body, entry = str(row["prompt"]), str(row["canonical_solution"]), str(row["entry_point"])
    prompt = f"Complete this Python function:\n\n```python\n{prefix.rstrip()}\n```\n\n{CODE_INSTRUCTION}"
    meta = {"generator": "humaneval", "fmt": "hf", "task_id": str(row.get("task_id", "")), "prefix": prefix,
            "entry_point": entry, "tests": f"{row['test']}\n\ncheck({entry})"}
    return Problem("humaneval", prompt, body, f"```python\n{prefix}{body}\n```", meta)


HUMANEVAL = Benchmark("humaneval", "openai/openai_humaneval", to_problem, score_code, config_dir="openai_humaneval",
                      train_from=MBPP, parallel_score=True)


def HumanEvalDomain() -> StandardDomain:  # noqa: N802 - the registry calls it like a class
    return StandardDomain(HUMANEVAL)
