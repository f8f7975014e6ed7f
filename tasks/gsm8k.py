"""GSM8K (grade-school math word problems) from local files: `question`, `answer` rows.

The reference answer is the number after `####` in the dataset's `answer`; the worked solution is that
text with its calculator annotations (`<<48/2=24>>`) removed, so it ends in the hf format's final
form `#### 72`. The prompt is the question with the hf format's instruction.

Checking (`normalise_number`): the final answer is extracted by the hf rule (`tasks.base`: the text
after the last `####`, else the whole completion, first 2,000 characters); in it, thousands
separators (`1,000`), `$` and a Unicode minus are dropped and the LAST number is the answer (so
`#### $1,200.` and `... so she earns 1200` both give 1200). Numbers compare as decimals: `72`,
`72.0` and `+72` are equal; `-72` is not.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, safe_score
from tasks.standard import Benchmark, StandardDomain

_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")


def normalise_number(text: str) -> Decimal | None:
    """The last number in `text` as a Decimal, None if there is none."""
    text = _THOUSANDS.sub("", text.replace("\u2212", "-").replace("$", ""))
    numbers = _NUMBER.findall(text)
    if not numbers:
        return None
    try:
        return Decimal(numbers[-1])
    except InvalidOperation:
        return None


def to_problem(row: dict[str, Any]) -> Problem:
    worked, _, final = str(row["answer"]).rpartition("####")
    answer = final.strip().replace(",", "")
    solution = re.sub(r"<<[^>]*>>", "", worked).strip() + "\n" + final_form(answer, "hf")
    return Problem("gsm8k", hf_prompt(str(row["question"])), answer, solution,
                   {"generator": "gsm8k", "fmt": "hf"})


def score(completion: str, problem: Problem) -> float:
    return safe_score(completion, problem, normalise_number, lambda got, p: got == normalise_number(p.answer))


GSM8K = Benchmark("gsm8k", "openai/gsm8k", to_problem, score, config_dir="main")


def GSM8KDomain() -> StandardDomain:  # noqa: N802 - the registry calls it like a class
    return StandardDomain(GSM8K)
