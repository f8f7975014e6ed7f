"""Code domain: trace a short generated Python program to what it prints.

Tiny prompt: the program itself, statements separated by `;`, then the separator `>`:
`a=3;b=a*2;print(b+1)>` -> `7`; easy has one assignment and `+`, `-` only (`a=512;print(a-7)>`).
Medium adds a conditional expression (`c=b*2 if b>3 else b+1`); hard adds a small for loop, which
Python cannot put after a `;`, so hard programs put the loop and the final print on their own lines
(the only character outside printable ASCII in any tiny prompt is that `\\n`). Worked solution: each
variable's value after each statement (and each loop iteration), e.g. `a=3;b=6;print 7#7`.

Worked prompt: two variables and a loop whose body updates both, e.g.
`a=3;b=4\nfor i in range(3):a=a+b;b=b+1\nprint(a)>`; the solution traces the state after each
iteration, `i=0:a=7,b=5;i=1:a=12,b=6;i=2:a=18,b=7#18`; the alternative solution (the external teacher's) shows
each iteration's arithmetic, `i=0:a=3+4=7,b=4+1=5;i=1:...#18`. Values stay within 0..max_value.

hf prompt: the same programs laid out as ordinary Python in a code block, and reasoning-gym `bf`
(print the output of a Brainf*ck program; difficulty 1 at every level, difficulty 2 costs ~50 ms a
problem). reasoning-gym `codeio` is left out: its snippets use unseeded randomness (numpy's global
generator, set order), so one index gives different answers in different processes and cannot back a
fixed held-out split; a few of its snippets also fail to serialise their own output.

The reference answer comes from running the generated program (our own code, in a namespace whose
only builtins are `print` and `range`), never from text. Model output is never executed.
Normalisation (own programs): extract the final answer, drop spaces and a trailing `.`; it must be a
plain ASCII integer equal to what the program printed. reasoning-gym problems use its verifier.
"""

from __future__ import annotations

import random
from typing import Any

from tasks.base import Problem, final_form, hf_prompt, is_rg, level_config, parse_int, safe_score
from tasks.rg import sample_mix, score_rg

SEPARATOR = ">"
_VARS = "abcd"

TINY_LEVELS: dict[str, dict[str, Any]] = {
    # Calibrated for the direct profile: one assignment and a printed expression, the
    # arithmetic of easy math (a 3-digit number +- a digit) behind a variable lookup. Measured on
    # 3,000-step four-domain warm-ups: two assignments of constants <= 15 left the 2-layer student
    # guessing (greedy 8-21%, its samples no better) and GRPO lost 6-11 points on it; `a=X;print(a+Y)`
    # with X, Y <= 99 fared no better (7-14%).
    "easy": {"n_assign": [1, 1], "first_max": 999, "max_const": 9, "ops": "+-", "conditional": False,
             "loop": False, "iters": [0, 0], "max_abs_answer": 999, "bare_print": 0.0},
    "medium": {"n_assign": [2, 2], "max_const": 9, "ops": "+-*", "conditional": True, "loop": False,
               "iters": [0, 0], "max_abs_answer": 999},
    "hard": {"n_assign": [2, 2], "max_const": 9, "ops": "+-*", "conditional": False, "loop": True,
             "iters": [2, 4], "max_abs_answer": 999},
}

# Worked format: iterations, the largest starting value and constant, the range every value stays in.
WORKED_LEVELS: dict[str, dict[str, Any]] = {
    "easy": {"iters": [4, 5], "init_max": 9, "const_max": 3, "max_value": 99},
    "medium": {"iters": [5, 6], "init_max": 9, "const_max": 5, "max_value": 99},
    "hard": {"iters": [5, 6], "init_max": 20, "const_max": 9, "max_value": 199},
}

HF_LEVELS: dict[str, list[tuple[str, float, dict[str, Any]]]] = {
    "easy": [("program", 2.0, TINY_LEVELS["medium"]), ("rg:bf", 1.0, {"difficulty": 1})],
    "medium": [("program", 2.0, TINY_LEVELS["hard"]), ("rg:bf", 1.0, {"difficulty": 1})],
    "hard": [
        ("program", 2.0, {**TINY_LEVELS["hard"], "conditional": True, "n_assign": [2, 3]}),
        ("rg:bf", 1.0, {"difficulty": 1}),
    ],
}

# A statement is ("assign", target, tokens) | ("loop", n_iters, target, tokens) | ("print", tokens).
Statement = tuple


def _render_expr(tokens: list[str], spaced: bool) -> str:
    if spaced:
        return " ".join(tokens)
    return "".join(f" {tok} " if tok in ("if", "else") else tok for tok in tokens)


def _render(program: list[Statement], spaced: bool) -> str:
    """Source text: compact (`;`-joined, tiny) or one statement per line (hf)."""
    eq = " = " if spaced else "="
    lines: list[str] = []
    for stmt in program:
        if stmt[0] == "assign":
            lines.append(f"{stmt[1]}{eq}{_render_expr(stmt[2], spaced)}")
        elif stmt[0] == "loop":
            body = f"{stmt[2]}{eq}{_render_expr(stmt[3], spaced)}"
            lines.append(f"for i in range({stmt[1]}):" + (f"\n    {body}" if spaced else body))
        else:
            lines.append(f"print({_render_expr(stmt[1], spaced)})")
    if spaced:
        return "\n".join(lines)
    out = lines[0]
    for prev, line in zip(program, lines[1:]):
        # Nothing may follow a loop on its line, and a loop cannot follow a `;`.
        joiner = "\n" if prev[0] == "loop" or line.startswith("for ") else ";"
        out += joiner + line
    return out


def run_program(source: str) -> str:
    """Run one of OUR generated programs and return what it printed (stripped).

    Never call this on model output: the restricted namespace is a guard against our own bugs,
    not a sandbox.
    """
    printed: list[str] = []

    def _print(*args: object) -> None:
        printed.append(" ".join(str(a) for a in args))

    namespace = {"__builtins__": {"print": _print, "range": range}}
    exec(compile(source, "<generated>", "exec"), namespace)  # noqa: S102 - our generated code only
    return "\n".join(printed).strip()


def _binary(rng: random.Random, names: list[str], level: dict[str, Any], allow_i: bool = False) -> list[str]:
    """`x op y` with at least one variable, so that every line depends on the state.

    The second operand is another variable or a constant, never the same variable: `a*a`-style lines
    would make a few short programs recur often, and `x-x` is always 0.
    """
    pool = names + (["i"] if allow_i else [])
    left = rng.choice(pool)
    others = [name for name in pool if name != left]
    right = rng.choice(others) if others and rng.random() < 0.5 else str(rng.randint(1, level["max_const"]))
    # x*i is 0 on the first iteration and would make "0" the answer to many loops.
    ops = [op for op in level["ops"] if not (op == "*" and "i" in (left, right))] or ["+"]
    pair = [left, right] if rng.random() < 0.5 else [right, left]
    return [pair[0], rng.choice(ops), pair[1]]


def _draw_program(rng: random.Random, level: dict[str, Any]) -> list[Statement]:
    first = rng.randint(1, level.get("first_max", level["max_const"]))
    program: list[Statement] = [("assign", "a", [str(first)])]
    names = ["a"]
    for _ in range(rng.randint(*level["n_assign"]) - 1):
        target = _VARS[len(names)]
        program.append(("assign", target, _binary(rng, names, level)))
        names.append(target)
    if level["conditional"]:
        target = _VARS[len(names)]
        cond_var = rng.choice(names)
        # Threshold near the variable's current value, so both branches are taken about equally.
        value = _trace(program)[1].get(cond_var, 0)
        threshold = max(0, value + rng.randint(-3, 3))
        tokens = _binary(rng, names, level) + ["if", cond_var, rng.choice("<>"), str(threshold), "else"]
        program.append(("assign", target, tokens + _binary(rng, names, level)))
        names.append(target)
    if level["loop"]:
        target = rng.choice(names)
        body = _binary(rng, [target], level, allow_i=True)
        body = [target] + body[1:] if target not in body else body
        program.append(("loop", rng.randint(*level["iters"]), target, body))
        out = target
    else:
        out = names[-1]
    bare = rng.random() < level.get("bare_print", 1 / 3)  # `print(b)`: few distinct programs in easy
    tokens = [out] if bare else [out, rng.choice(level["ops"]), str(rng.randint(1, level["max_const"]))]
    program.append(("print", tokens))
    return program


def _trace(program: list[Statement]) -> tuple[list[tuple[str, str, int]], dict[str, int]]:
    """Run the program statement by statement: ([(label, name, value)], final variables)."""
    ns: dict[str, Any] = {"__builtins__": {}}
    steps = []
    for stmt in program:
        if stmt[0] == "assign":
            exec(f"{stmt[1]}={_render_expr(stmt[2], False)}", ns)  # noqa: S102 - our generated code only
            steps.append(("", stmt[1], ns[stmt[1]]))
        elif stmt[0] == "loop":
            for i in range(stmt[1]):
                ns["i"] = i
                exec(f"{stmt[2]}={_render_expr(stmt[3], False)}", ns)  # noqa: S102
                steps.append((f"i={i}:", stmt[2], ns[stmt[2]]))
        else:
            steps.append(("", "print", eval(_render_expr(stmt[1], False), ns)))  # noqa: S307
    return steps, {k: v for k, v in ns.items() if k in _VARS}


def _solution(steps: list[tuple[str, str, int]], answer: str, fmt: str) -> str:
    if fmt == "tiny":
        parts = [f"{label}print {v}" if name == "print" else f"{label}{name}={v}" for label, name, v in steps]
        return ";".join(parts) + final_form(answer, fmt)
    lines = []
    for label, name, v in steps:
        prefix = f"when {label[:-1].replace('=', ' = ')}, " if label else ""
        lines.append(prefix + (f"print outputs {v}" if name == "print" else f"{name} = {v}"))
    return "\n".join(lines) + "\n" + final_form(answer, fmt)


def _program_problem(rng: random.Random, level: dict[str, Any], difficulty: str, fmt: str) -> Problem:
    for _ in range(1000):
        program = _draw_program(rng, level)
        source = _render(program, spaced=fmt == "hf")
        answer = run_program(source)
        if abs(int(answer)) <= level["max_abs_answer"]:
            break
    else:
        raise RuntimeError("code generator: no program within max_abs_answer in 1000 draws")
    steps, _ = _trace(program)
    meta = {"generator": "program", "difficulty": difficulty, "fmt": fmt}
    if fmt == "tiny":
        prompt = source + SEPARATOR
    else:
        prompt = hf_prompt(f"What does this Python program print?\n\n```python\n{source}\n```")
    return Problem("code", prompt, answer, _solution(steps, answer, fmt), meta)


def _worked_expr(rng: random.Random, target: str, level: dict[str, Any]) -> list[str]:
    """`x op y` for one loop statement: x a variable, y the other variable, `i` or a constant."""
    other = "b" if target == "a" else "a"
    left = rng.choice([target, target, other])
    right = rng.choice([other if left == target else target, "i", str(rng.randint(1, level["const_max"]))])
    return [left, rng.choice("+-"), right]


def _worked_problem(rng: random.Random, level: dict[str, Any], difficulty: str) -> Problem:
    for _ in range(1000):
        a, b = rng.randint(1, level["init_max"]), rng.randint(1, level["init_max"])
        iters = rng.randint(*level["iters"])
        body = [("a", _worked_expr(rng, "a", level)), ("b", _worked_expr(rng, "b", level))]
        state, steps, alt = {"a": a, "b": b}, [], []
        for i in range(iters):
            state["i"] = i
            shown = []
            for target, (x, op, y) in body:
                xv, yv = state[x], state[y] if y in state else int(y)
                state[target] = xv + yv if op == "+" else xv - yv
                shown.append(f"{target}={xv}{op}{yv}={state[target]}")
            steps.append(f"i={i}:a={state['a']},b={state['b']}")
            alt.append(f"i={i}:" + ",".join(shown))
            if not all(0 <= state[v] <= level["max_value"] for v in "ab"):
                break
        else:
            out = rng.choice("ab")
            loop = ";".join(f"{t}={''.join(e)}" for t, e in body)
            source = f"a={a};b={b}\nfor i in range({iters}):{loop}\nprint({out})"
            answer = run_program(source)
            meta = {"generator": "loop", "difficulty": difficulty, "fmt": "worked"}
            final = final_form(answer, "worked")
            return Problem("code", source + SEPARATOR, answer, ";".join(steps) + final, meta,
                           alt_solution=";".join(alt) + final)
    raise RuntimeError("code generator: no loop within max_value in 1000 draws")


class CodeDomain:
    """Tracing generated Python programs; hf adds reasoning-gym bf and codeio."""

    name = "code"

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        return level_config(TINY_LEVELS, HF_LEVELS, SEPARATOR, difficulty, fmt, WORKED_LEVELS)

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        if fmt == "tiny":
            return _program_problem(rng, TINY_LEVELS[difficulty], difficulty, fmt)
        if fmt == "worked":
            return _worked_problem(rng, WORKED_LEVELS[difficulty], difficulty)
        own = {"program": lambda settings: _program_problem(rng, settings, difficulty, fmt)}
        return sample_mix(rng, HF_LEVELS[difficulty], self.name, difficulty, own)

    def score(self, completion: str, problem: Problem) -> float:
        if is_rg(problem):
            return score_rg(completion, problem)
        return safe_score(completion, problem, lambda text: parse_int(text.replace(" ", "").removesuffix(".")),
                          lambda got, p: got == parse_int(p.answer))
