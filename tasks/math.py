"""Math domain: integer arithmetic chains (tiny and hf), plus reasoning-gym problems in hf.

Tiny prompt: `17+5-9=` (the separator `=` means "answer now"), answer `13`, worked solution
`17+5=22;22-9=13#13`. Easy is one wide operand and one digit (`347+8=` -> `355`): a large prompt
space whose answer a 2-layer student can learn in one pass (mostly copying, one carry), calibrated
for the direct profile; multi-digit chains are far harder for it. Hard levels add one `*`,
evaluated first (usual precedence), e.g. `3+4*5-2=` -> `4*5=20;3+20=23;23-2=21#21`.

Worked prompt: column addition or subtraction of two numbers of equal length (`48371+25968=`), worked
right to left one column at a time with its carry or borrow, then the answer after `#`:
`1+8=9,7+6=13,3+9+1=13,8+5+1=14,4+2+1=7#74339`; subtraction borrows by writing the column's top digit
plus ten (`48371-25968=` -> `11-8=3,7-6-1=0,13-9=4,8-5-1=2,4-2=2#22403`). The alternative solution
(the external teacher's) states every carry in and out: `1+8+0=9c0;7+6+0=13c1;...#74339`.

hf prompt: the same chains in words ("Calculate 17 + 5 - 9."), reasoning-gym `chain_sum`,
`basic_arithmetic` and the `gsm_symbolic` word problems, with the hf final-answer instruction.

Normalisation (own generators): extract the final answer (`tasks.base.extract_answer`), drop spaces,
a trailing `.` and, in hf only, `,` thousands separators; it must then be a plain ASCII integer equal
to the reference (`+13` and `013` count as 13). reasoning-gym problems use reasoning-gym's verifier.
"""

from __future__ import annotations

import random
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, is_rg, level_config, parse_int, safe_score
from tasks.rg import sample_mix, score_rg

SEPARATOR = "="

# Difficulty knobs of the tiny generator (also used by the hf `chain` generator).
TINY_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"n_operands": [2, 2], "first_max": 999, "max_operand": 9, "ops": "+-", "max_mul": 0,
             "mul_max_operand": 0},
    "medium": {"n_operands": [4, 4], "max_operand": 20, "ops": "+-", "max_mul": 0, "mul_max_operand": 0},
    "hard": {"n_operands": [5, 5], "max_operand": 20, "ops": "+-*", "max_mul": 1, "mul_max_operand": 12},
}

# Worked format: operand length in digits and the operations.
WORKED_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"digits": [4, 5], "ops": "+-"},
    "medium": {"digits": [5, 6], "ops": "+-"},
    "hard": {"digits": [6, 7], "ops": "+-"},
}

# hf mixture: (generator, weight, settings). "chain" is ours; "rg:<name>" is a reasoning-gym dataset.
HF_LEVELS: dict[str, list[tuple[str, float, dict[str, Any]]]] = {
    "easy": [
        ("chain", 1.0, TINY_LEVELS["medium"]),
        ("rg:chain_sum", 1.0, {"min_terms": 3, "max_terms": 4, "min_digits": 1, "max_digits": 2}),
        ("rg:gsm_symbolic", 1.0, {}),
    ],
    "medium": [
        ("chain", 1.0, TINY_LEVELS["hard"]),
        ("rg:basic_arithmetic", 1.0, {"min_terms": 3, "max_terms": 5, "min_digits": 1, "max_digits": 2,
                                      "operators": ["+", "-", "*"], "allow_parentheses": True}),
        ("rg:gsm_symbolic", 1.0, {}),
    ],
    "hard": [
        ("rg:basic_arithmetic", 1.0, {"min_terms": 4, "max_terms": 6, "min_digits": 1, "max_digits": 3,
                                      "operators": ["+", "-", "*", "/"], "allow_parentheses": True}),
        ("rg:gsm_symbolic", 2.0, {}),
    ],
}


def _draw_chain(rng: random.Random, level: dict[str, Any]) -> tuple[list[int], list[str]]:
    n = rng.randint(*level["n_operands"])
    ops = [rng.choice(level["ops"]) for _ in range(n - 1)]
    # Keep at most max_mul multiplications; surplus ones become + or -.
    mul_at = [i for i, op in enumerate(ops) if op == "*"]
    rng.shuffle(mul_at)
    for i in mul_at[level["max_mul"] :]:
        ops[i] = rng.choice("+-")
    nums = []
    for i in range(n):
        next_to_mul = (i > 0 and ops[i - 1] == "*") or (i < n - 1 and ops[i] == "*")
        # The first operand may be wider than the rest (`347+8-5=`): a large prompt space whose answer
        # mostly copies digits, so a 2-layer student can learn it.
        top = level.get("first_max", level["max_operand"]) if i == 0 else level["max_operand"]
        nums.append(rng.randint(0, level["mul_max_operand"] if next_to_mul else top))
    return nums, ops


def _evaluate(nums: list[int], ops: list[str]) -> tuple[int, list[tuple[int, str, int, int]]]:
    """Value of the chain and its steps (left, op, right, result): products first, then left to right."""
    steps = []
    terms, term_ops = [nums[0]], []
    for op, num in zip(ops, nums[1:]):
        if op == "*":
            product = terms[-1] * num
            steps.append((terms[-1], "*", num, product))
            terms[-1] = product
        else:
            terms.append(num)
            term_ops.append(op)
    total = terms[0]
    for op, num in zip(term_ops, terms[1:]):
        new = total + num if op == "+" else total - num
        steps.append((total, op, num, new))
        total = new
    return total, steps


def _chain_problem(rng: random.Random, level: dict[str, Any], difficulty: str, fmt: str) -> Problem:
    nums, ops = _draw_chain(rng, level)
    value, steps = _evaluate(nums, ops)
    answer = str(value)
    meta = {"generator": "chain", "difficulty": difficulty, "fmt": fmt}
    if fmt == "tiny":
        expr = "".join(f"{num}{op}" for num, op in zip(nums, ops + [""]))
        worked = ";".join(f"{a}{op}{b}={c}" for a, op, b, c in steps)
        return Problem("math", expr + SEPARATOR, answer, f"{worked}{final_form(answer, fmt)}", meta)
    expr = " ".join(f"{num} {op}" for num, op in zip(nums, ops)) + f" {nums[-1]}"
    worked = "\n".join(f"{a} {op} {b} = {c}" for a, op, b, c in steps)
    prompt = hf_prompt(f"Calculate {expr}.")
    return Problem("math", prompt, answer, f"{worked}\n{final_form(answer, fmt)}", meta)


def columns(a: int, b: int, op: str) -> tuple[list[str], list[str]]:
    """Column steps of `a op b` (equal-length operands, a >= b for `-`), right to left.

    Returns (the solution's steps, the alternative solution's steps).
    """
    steps, alt = [], []
    carry = 0
    for x, y in zip(map(int, reversed(str(a))), map(int, reversed(str(b)))):
        if op == "+":
            total = x + y + carry
            steps.append(f"{x}+{y}{'+1' if carry else ''}={total}")
            alt.append(f"{x}+{y}+{carry}={total}c{total // 10}")
            carry = total // 10
        else:
            borrow = int(x - carry < y)
            top = x + 10 * borrow
            steps.append(f"{top}-{y}{'-1' if carry else ''}={top - y - carry}")
            alt.append(f"{top}-{y}-{carry}={top - y - carry}b{borrow}")
            carry = borrow
    return steps, alt


def _worked_problem(rng: random.Random, level: dict[str, Any], difficulty: str) -> Problem:
    n = rng.randint(*level["digits"])
    a, b = (rng.randint(10 ** (n - 1), 10**n - 1) for _ in range(2))
    op = rng.choice(level["ops"])
    if op == "-" and a < b:
        a, b = b, a
    answer = str(a + b if op == "+" else a - b)
    steps, alt = columns(a, b, op)
    meta = {"generator": "columns", "difficulty": difficulty, "fmt": "worked"}
    return Problem("math", f"{a}{op}{b}{SEPARATOR}", answer, ",".join(steps) + final_form(answer, "worked"), meta,
                   alt_solution=";".join(alt) + final_form(answer, "worked"))


def _normalise(text: str, fmt: str) -> int | None:
    text = text.replace(" ", "").removesuffix(".")
    if fmt == "hf":
        text = text.replace(",", "")
    return parse_int(text)


class MathDomain:
    """Integer arithmetic chains; hf adds reasoning-gym arithmetic and word problems."""

    name = "math"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt, WORKED_LEVELS)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _chain_problem(rng, TINY_LEVELS[difficulty], difficulty, fmt)
        if fmt == "worked":
            return _worked_problem(rng, WORKED_LEVELS[difficulty], difficulty)
        own = {"chain": lambda settings: _chain_problem(rng, settings, difficulty, fmt)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        if is_rg(problem):
            return score_rg(completion, problem)
        fmt = problem.meta.get("fmt", "tiny")
        return safe_score(completion, problem, lambda text: _normalise(text, fmt),
                          lambda got, p: got == parse_int(p.answer))
