"""Logic domain: truth tables of boolean formulas (tiny), formula evaluation and knights and knaves (hf).

Tiny prompt: a formula over `a`, `b` (`~` not, `&` and, `|` or, `^` xor; every compound operand is
parenthesised) then the separator `>`: `(a&~b)|(b^a)>` -> `0111`, the formula's value on the rows
ab = 00, 01, 10, 11 (with three variables, rows abc = 000 ... 111). A truth table rather than one
truth value, so that guessing is worth 1/16 and not 1/2. Worked solution: per row, the values of the
two top-level operands and the result, e.g. `00:0|0=0;01:0|1=1;10:1|1=1;11:0|1=1#0111`.

hf prompt: one formula in words under a given assignment ("Let p = True, q = False. Is
(p and not q) or q true or false?"), answer `True`/`False`; and reasoning-gym `knights_knaves`.

Normalisation: extract the final answer and drop spaces. Tiny: it must equal the reference bit
string. hf formulas: true/t/yes/1 and false/f/no/0, any case, name the two truth values. reasoning-gym
problems use its verifier (it accepts the roles in any order).
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, is_rg, level_config, safe_score
from tasks.rg import sample_mix, score_rg

SEPARATOR = ">"

TINY_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"n_vars": 2, "n_leaves": [4, 4], "ops": "&|^", "neg_prob": 0.0},
    "medium": {"n_vars": 2, "n_leaves": [5, 5], "ops": "&|^", "neg_prob": 0.2},
    "hard": {"n_vars": 2, "n_leaves": [6, 6], "ops": "&|^", "neg_prob": 0.2},
}

HF_LEVELS: dict[str, list[tuple[str, float, dict[str, Any]]]] = {
    "easy": [("formula", 1.0, {"n_vars": 2, "n_leaves": [3, 4], "ops": "&|^", "neg_prob": 0.2}),
             ("rg:knights_knaves", 1.0, {"n_people": 2})],
    "medium": [("formula", 1.0, {"n_vars": 3, "n_leaves": [4, 6], "ops": "&|^", "neg_prob": 0.2}),
               ("rg:knights_knaves", 1.0, {"n_people": 3})],
    "hard": [("formula", 1.0, {"n_vars": 3, "n_leaves": [6, 8], "ops": "&|^", "neg_prob": 0.3}),
             ("rg:knights_knaves", 1.0, {"n_people": 4})],
}

_TINY_VARS = "abc"
_HF_VARS = "pqr"
_HF_OPS = {"&": "and", "|": "or", "^": "xor"}
_TRUE = {"true", "t", "yes", "1"}
_FALSE = {"false", "f", "no", "0"}

# A formula is ("var", index, negated) | (op, left, right, negated) with op in "&|^".
Node = tuple


def _draw(rng: random.Random, n_leaves: int, level: dict[str, Any]) -> Node:
    if n_leaves == 1:
        return ("var", rng.randrange(level["n_vars"]), rng.random() < 0.5)
    k = rng.randint(1, n_leaves - 1)
    left, right = _draw(rng, k, level), _draw(rng, n_leaves - k, level)
    return (rng.choice(level["ops"]), left, right, rng.random() < level["neg_prob"])


def _value(node: Node, row: tuple[bool, ...]) -> bool:
    if node[0] == "var":
        return row[node[1]] != node[2]
    a, b = _value(node[1], row), _value(node[2], row)
    out = {"&": a and b, "|": a or b, "^": a != b}[node[0]]
    return out != node[3]


def _render(node: Node, hf: bool, top: bool = True) -> str:
    if node[0] == "var":
        name = (_HF_VARS if hf else _TINY_VARS)[node[1]]
        return ("not " if hf else "~") * node[2] + name
    op = f" {_HF_OPS[node[0]]} " if hf else node[0]
    inner = _render(node[1], hf, False) + op + _render(node[2], hf, False)
    if node[3]:
        return ("not " if hf else "~") + f"({inner})"
    return inner if top else f"({inner})"


def _bits(values: list[bool]) -> str:
    return "".join("1" if v else "0" for v in values)


def _tiny_problem(rng: random.Random, level: dict[str, Any], difficulty: str) -> Problem:
    formula = _draw(rng, rng.randint(*level["n_leaves"]), level)
    rows = list(itertools.product((False, True), repeat=level["n_vars"]))
    answer = _bits([_value(formula, row) for row in rows])
    steps = []
    for row in rows:
        if formula[0] == "var":
            steps.append(f"{_bits(list(row))}:{_bits([_value(formula, row)])}")
            continue
        left, right = _bits([_value(formula[1], row)]), _bits([_value(formula[2], row)])
        pair = f"{left}{formula[0]}{right}"
        pair = f"~({pair})" if formula[3] else pair
        steps.append(f"{_bits(list(row))}:{pair}={_bits([_value(formula, row)])}")
    meta = {"generator": "truth_table", "difficulty": difficulty, "fmt": "tiny"}
    solution = ";".join(steps) + final_form(answer, "tiny")
    return Problem("logic", _render(formula, hf=False) + SEPARATOR, answer, solution, meta)


def _subformulas(node: Node) -> list[Node]:
    """Compound subformulas, innermost first (the order a worked solution evaluates them in)."""
    if node[0] == "var":
        return []
    return _subformulas(node[1]) + _subformulas(node[2]) + [node]


def _hf_formula_problem(rng: random.Random, level: dict[str, Any], difficulty: str) -> Problem:
    formula = _draw(rng, rng.randint(*level["n_leaves"]), level)
    row = tuple(rng.random() < 0.5 for _ in range(level["n_vars"]))
    names = _HF_VARS[: level["n_vars"]]
    given = ", ".join(f"{name} = {value}" for name, value in zip(names, row))
    answer = str(_value(formula, row))
    body = (
        f"Let {given}. Here 'xor' is true when exactly one side is true. "
        f"Is the following formula true or false?\n\n{_render(formula, hf=True)}\n\nAnswer True or False."
    )
    lines = [f"{given}."] + [f"{_render(sub, hf=True)} is {_value(sub, row)}" for sub in _subformulas(formula)]
    meta = {"generator": "formula", "difficulty": difficulty, "fmt": "hf"}
    return Problem("logic", hf_prompt(body), answer, "\n".join(lines) + "\n" + final_form(answer, "hf"), meta)


class LogicDomain:
    """Boolean formulas (truth tables in tiny, evaluation in hf); hf adds knights and knaves."""

    name = "logic"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _tiny_problem(rng, TINY_LEVELS[difficulty], difficulty)
        own = {"formula": lambda settings: _hf_formula_problem(rng, settings, difficulty)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        if is_rg(problem):
            return score_rg(completion, problem)
        return safe_score(completion, problem, lambda text: text.replace(" ", ""), _matches)


def _matches(got: str, problem: Problem) -> bool:
    """A truth value in any accepted spelling for an hf formula; the exact table otherwise."""
    if problem.meta.get("generator") == "formula":
        got, want = got.lower().removesuffix("."), problem.answer.lower()
        return (got in _TRUE and want == "true") or (got in _FALSE and want == "false")
    return got == problem.answer
