"""Sorting digits, an example OPD-Bench domain from a package of its own.

Prompt `d:3142>`, answer `1234`. The worked format inserts one digit at a time, `3,13,134,1234#1234`
(its alternative solution, the external teacher's style, counts each digit instead,
`1x1,2x1,3x1,4x1#1234`). No hf format: `bench run --profile hf --suite digits` says so in one line.

A domain is three methods (`config`, `sample`, `score`) and a `name`; the entry point
`opd_bench.domains` makes it a suite of its own name, and `opd_bench.suites` can combine it with
other domains, built-in or not.
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from tasks import Problem, check_choice, final_form, safe_score

LEVELS = {"easy": (3, 5), "medium": (5, 7), "hard": (7, 9)}  # digits per prompt, inclusive
DIGITS_MATH = ("digits", "math")  # the `digits_math` suite


class DigitsDomain:
    name = "digits"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        check_choice("format of the digits domain", fmt, ["tiny", "worked"])
        return {"length": list(LEVELS[difficulty]), "separator": ">"}

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(*LEVELS[difficulty])))
        answer = "".join(sorted(digits))
        steps = ["".join(sorted(digits[: i + 1])) for i in range(len(digits))]
        counts = Counter(digits)
        solution = ",".join(steps)
        alt = ",".join(f"{d}x{counts[d]}" for d in sorted(counts)) if fmt == "worked" else ""
        return Problem(self.name, f"d:{digits}>", answer, f"{solution}{final_form(answer, fmt)}",
                       {"generator": "digits", "difficulty": difficulty, "fmt": fmt},
                       f"{alt}{final_form(answer, fmt)}" if alt else "")

    def score(self, completion: str, problem: Problem) -> float:
        return safe_score(completion, problem, lambda text: text.strip(), lambda got, p: got == p.answer)
