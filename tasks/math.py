"""Math domain: integer arithmetic chains (tiny and hf), plus reasoning-gym problems in hf.

Tiny prompt: `17+5-9=` (the separator `=` means "answer now"), answer `13`, worked solution
`17+5=22;22-9=13#13`. Easy is one wide operand and one digit (`347+8=` -> `355`): a large prompt
space whose answer a 2-layer student can learn in one pass (mostly copying, one carry), calibrated
for the tiny profile (issue #4); multi-digit chains are far harder for it. Hard levels add one `*`,
evaluated first (usual precedence), e.g. `3+4*5-2=` -> `4*5=20;3+20=23;23-2=21#21`.

hf prompt: the same chains in words ("Calculate 17 + 5 - 9."), reasoning-gym `chain_sum`,
`basic_arithmetic` and the `gsm_symbolic` word problems, with the hf final-answer instruction.

Normalisation (own generators): extract the final answer (`tasks.base.extract_answer`), drop spaces,
a trailing `.` and, in hf only, `,` thousands separators; it must then be a plain ASCII integer equal
to the reference (`+13` and `013` count as 13). reasoning-gym problems use reasoning-gym's verifier.
"""

from __future__ import annotations

import random
from typing import Any

from tasks.base import Problem, extract_answer, final_form, hf_prompt, level_config, parse_int
from tasks.rg import sample_mix, score_rg

SEPARATOR = "="

# Difficulty knobs of the tiny generator (also used by the hf `chain` generator).
TINY_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"n_operands": [2, 2], "first_max": 999, "max_operand": 9, "ops": "+-", "max_mul": 0,
             "mul_max_operand": 0},
    "medium": {"n_operands": [4, 4], "max_operand": 20, "ops": "+-", "max_mul": 0, "mul_max_operand": 0},
    "hard": {"n_operands": [5, 5], "max_operand": 20, "ops": "+-*", "max_mul": 1, "mul_max_operand": 12},
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


def _normalise(text: str | None, fmt: str) -> int | None:
    if text is None:
        return None
    text = text.replace(" ", "").removesuffix(".")
    if fmt == "hf":
        text = text.replace(",", "")
    return parse_int(text)


class MathDomain:
    """Integer arithmetic chains; hf adds reasoning-gym arithmetic and word problems."""

    name = "math"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _chain_problem(rng, TINY_LEVELS[difficulty], difficulty, fmt)
        own = {"chain": lambda settings: _chain_problem(rng, settings, difficulty, fmt)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        try:
            if problem.meta.get("generator", "").startswith("rg:"):
                return score_rg(completion, problem)
            fmt = problem.meta.get("fmt", "tiny")
            got = _normalise(extract_answer(completion, fmt), fmt)
            return 1.0 if got is not None and got == parse_int(problem.answer) else 0.0
        except Exception:  # hostile text must never crash an evaluation
            return 0.0
