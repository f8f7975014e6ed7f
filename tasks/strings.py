"""Strings domain: reverse, sort and count letters (tiny); reasoning-gym string tasks (hf).

Tiny prompt: an operation code, the input, then the separator `>`:
- reverse `r:qwzx>` -> `xzwq`, worked `x,z,w,q#xzwq`;
- sort `s:qwzx>` -> `qwxz`, worked `q1w1x1z1#qwxz` (letter counts in alphabetical order);
- count `c:a:abaca>` -> `3`, worked `a1b1a2c2a3#3` (running count after each letter).
Counting draws its text from a small alphabet (`count_alphabet` letters) so counts are not all 0/1.

Worked prompt: reverse or count over 11-13 letters (easy), with a running trace: reverse
`r:abcdefghij>` -> `j,i,h,g,f,e,d,c,b,a#jihgfedcba`; count `c:a:abacadbcab>` -> the letters with
the running count, `a1b1a2c2a3d3b3c3a4b4#4`. The alternative solution (the external teacher's)
numbers the positions it reads in reverse (`10j,9i,...,1a#jihgfedcba`) and lists only the
matches while counting (`a1,a2,a3,a4#4`).

hf prompt: reasoning-gym `spell_backward`, `letter_counting` and `number_sorting`, plus our reverse and
sort in words. Normalisation (own generators): extract the final answer and drop spaces and quotes;
reverse and sort compare case-insensitively, counts as plain ASCII integers. reasoning-gym problems
use its verifier, except `number_sorting`, whose numbers must match exactly (see `tasks.rg`).
"""

from __future__ import annotations

import random
import string
from collections import Counter
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, is_rg, level_config, parse_int, safe_score
from tasks.rg import sample_mix, score_rg

SEPARATOR = ">"

TINY_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"ops": "rsc", "length": [3, 4], "alphabet": 26, "count_alphabet": 3},
    "medium": {"ops": "rsc", "length": [5, 5], "alphabet": 26, "count_alphabet": 4},
    "hard": {"ops": "rsc", "length": [6, 6], "alphabet": 26, "count_alphabet": 4},
}

WORKED_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"ops": "rc", "length": [11, 13], "alphabet": 26, "count_alphabet": 4},
    "medium": {"ops": "rc", "length": [12, 14], "alphabet": 26, "count_alphabet": 4},
    "hard": {"ops": "rc", "length": [14, 16], "alphabet": 26, "count_alphabet": 5},
}

HF_LEVELS: dict[str, list[tuple[str, float, dict[str, Any]]]] = {
    "easy": [
        ("text", 1.0, {"ops": "rs", "length": [5, 7], "alphabet": 26, "count_alphabet": 4}),
        ("rg:spell_backward", 1.0, {"min_word_len": 3, "max_word_len": 6}),
        ("rg:letter_counting", 1.0, {"min_words": 3, "max_words": 6}),
        ("rg:number_sorting", 1.0, {"min_numbers": 3, "max_numbers": 5, "min_decimals": 0,
                                    "max_decimals": 0}),
    ],
    "medium": [
        ("text", 1.0, {"ops": "rs", "length": [8, 10], "alphabet": 26, "count_alphabet": 4}),
        ("rg:spell_backward", 1.0, {"min_word_len": 6, "max_word_len": 9}),
        ("rg:letter_counting", 1.0, {"min_words": 6, "max_words": 12}),
        ("rg:number_sorting", 1.0, {"min_numbers": 5, "max_numbers": 8, "min_decimals": 0,
                                    "max_decimals": 1}),
    ],
    "hard": [
        ("text", 1.0, {"ops": "rs", "length": [12, 16], "alphabet": 26, "count_alphabet": 4}),
        ("rg:spell_backward", 1.0, {"min_word_len": 8, "max_word_len": 10}),
        ("rg:letter_counting", 1.0, {"min_words": 12, "max_words": 20}),
        ("rg:number_sorting", 1.0, {"min_numbers": 8, "max_numbers": 12, "min_decimals": 1,
                                    "max_decimals": 2}),
    ],
}

_HF_OPS = {"r": "Reverse the string", "s": "Sort the letters of the string in alphabetical order"}


def _draw(rng: random.Random, level: dict[str, Any]) -> tuple[str, str, str]:
    """(op, target letter or "", text)."""
    op = rng.choice(level["ops"])
    n = rng.randint(*level["length"])
    if op == "c":
        letters = rng.sample(string.ascii_lowercase, level["count_alphabet"])
        return op, rng.choice(letters), "".join(rng.choice(letters) for _ in range(n))
    letters = string.ascii_lowercase[: level["alphabet"]]
    return op, "", "".join(rng.choice(letters) for _ in range(n))


def _answer_and_steps(op: str, target: str, text: str) -> tuple[str, str]:
    if op == "r":
        answer = text[::-1]
        return answer, ",".join(answer)
    if op == "s":
        counts = sorted(Counter(text).items())
        return "".join(sorted(text)), "".join(f"{ch}{n}" for ch, n in counts)
    running, steps = 0, []
    for ch in text:
        running += ch == target
        steps.append(f"{ch}{running}")
    return str(running), "".join(steps)


def _alt_steps(op: str, target: str, text: str) -> str:
    """The alternative trace: positions read in reverse, or only the matches while counting."""
    if op == "r":
        return ",".join(f"{i + 1}{text[i]}" for i in reversed(range(len(text))))
    hits = [ch for ch in text if ch == target]
    return ",".join(f"{ch}{k + 1}" for k, ch in enumerate(hits)) or "none"


def _problem(rng: random.Random, level: dict[str, Any], difficulty: str, fmt: str) -> Problem:
    op, target, text = _draw(rng, level)
    answer, steps = _answer_and_steps(op, target, text)
    meta = {"generator": "text", "op": op, "difficulty": difficulty, "fmt": fmt}
    if fmt in ("tiny", "worked"):
        head = f"c:{target}:" if op == "c" else f"{op}:"
        alt = _alt_steps(op, target, text) + final_form(answer, fmt) if fmt == "worked" else ""
        return Problem("strings", f"{head}{text}{SEPARATOR}", answer, steps + final_form(answer, fmt), meta,
                       alt_solution=alt)
    if op == "c":
        body = f'How many times does the letter "{target}" appear in the string "{text}"?'
    else:
        body = f'{_HF_OPS[op]} "{text}". Answer with the resulting string only, without quotes.'
    solution = f"Step by step: {steps}\n{final_form(answer, fmt)}"
    return Problem("strings", hf_prompt(body), answer, solution, meta)


def _normalise(text: str) -> str:
    return text.replace(" ", "").strip("\"'`").removesuffix(".").lower()


class StringsDomain:
    """Reversing, sorting and counting letters; hf adds reasoning-gym string tasks."""

    name = "strings"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt, WORKED_LEVELS)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _problem(rng, TINY_LEVELS[difficulty], difficulty, fmt)
        if fmt == "worked":
            return _problem(rng, WORKED_LEVELS[difficulty], difficulty, fmt)
        own = {"text": lambda settings: _problem(rng, settings, difficulty, fmt)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        if is_rg(problem):
            return score_rg(completion, problem)
        return safe_score(completion, problem, _normalise, _matches)


def _matches(got: str, problem: Problem) -> bool:
    """Counts as plain integers; reversed and sorted letters case-insensitively."""
    if problem.meta.get("op") == "c":
        return parse_int(got) is not None and parse_int(got) == parse_int(problem.answer)
    return got == problem.answer.lower()
