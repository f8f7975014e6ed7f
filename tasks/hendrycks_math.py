"""MATH (Hendrycks et al., competition mathematics) from local files: `problem`, `solution` rows.

Any copy with those columns works: `EleutherAI/hendrycks_math` (one sub-folder per subject, train and
test), or `HuggingFaceH4/MATH-500` (test only, with an `answer` column: evaluation only). The
reference answer is the row's `answer` when present, else the last `\\boxed{...}` of its solution.
The prompt asks for the final answer in `\\boxed{}`, as the dataset's solutions give it.

Checking: the answer is the content of the last `\\boxed{...}` (or `\\fbox{...}`) in the first 2,000
characters of the completion, else the text after its last `####`. Both it and the reference go
through `normalise_latex`, a deliberately small set of rewrites, then compare as strings, or as
numbers when both are plain numbers or fractions. What it rewrites:

- drops `$`, all whitespace, `\\left` / `\\right`, spacing commands (`\\!`, `\\,`, `\\;`, `\\:`), a
  trailing `.`, degree signs (`^\\circ`), percent signs and `\\text{}` / `\\mathrm{}` / `\\mbox{}`
  wrappers (keeping their content);
- `\\dfrac` and `\\tfrac` to `\\frac`, `\\frac12` to `\\frac{1}{2}`, `\\sqrt2` to `\\sqrt{2}`, then
  `\\frac{a}{b}` with brace-free `a`, `b` to `a/b` (so `\\frac{3}{4}`, `3/4` and `0.75` all match);
- a leading `x=` (one letter), thousands separators in integers (`1,000`), a leading `.5` to `0.5`.

What it does not do: algebraic equivalence (`2\\sqrt{2}` vs `\\sqrt{8}`), units words, interval or set
order, or matrices. A right answer written in another form scores 0 here; that is the price of a
transparent checker, and it is the same for every method.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from tasks.base import MAX_COMPLETION_CHARS, Problem
from tasks.standard import Benchmark, StandardDomain

MATH_INSTRUCTION = "Think step by step, then give the final answer in \\boxed{}, for example \\boxed{\\frac{1}{2}}."


def last_boxed(text: str) -> str | None:
    """The content of the last `\\boxed{...}` or `\\fbox{...}` (braces matched), None if there is none."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    open_at = text.find("{", start)
    if open_at < 0:
        return None
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    return None


def _unwrap(text: str, command: str) -> str:
    return re.sub(rf"\\{command}\{{([^{{}}]*)\}}", r"\1", text)


def normalise_latex(text: str) -> str:
    """A canonical string for a MATH answer (see the module docstring for the rewrites)."""
    s = re.sub(r"\s+", "", text).replace("$", "").replace("{,}", ",")
    s = s.replace("\\left", "").replace("\\right", "")
    for spacing in ("\\!", "\\,", "\\;", "\\:"):
        s = s.replace(spacing, "")
    for command in ("text", "textbf", "mathrm", "mbox"):
        s = _unwrap(s, command)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = re.sub(r"\^\{?\\circ\}?", "", s).replace("\\%", "").replace("%", "")
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\w)", r"\\sqrt{\1}", s)
    while True:
        rewritten = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"\1/\2", s)
        if rewritten == s:
            break
        s = rewritten
    s = s.rstrip(".")
    s = re.sub(r"^[a-zA-Z]=", "", s)
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+", s):
        s = s.replace(",", "")
    return re.sub(r"^(-?)\.(\d)", r"\g<1>0.\2", s)


def as_number(text: str) -> Fraction | None:
    """A normalised answer as an exact number when it is one (`-3`, `0.75`, `3/4`), else None."""
    if not re.fullmatch(r"-?\d+(\.\d+)?(/-?\d+(\.\d+)?)?", text) or len(text) > 50:
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def same_answer(got: str, reference: str) -> bool:
    """Whether two normalised answers are equal as strings or as numbers."""
    if got == reference:
        return True
    a, b = as_number(got), as_number(reference)
    return a is not None and a == b


def _extract(completion: str) -> str | None:
    text = completion[:MAX_COMPLETION_CHARS]
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    cut = text.rfind("####")
    return (text[cut + 4 :].strip() or None) if cut >= 0 else None


def score(completion: str, problem: Problem) -> float:
    """1.0 if the completion's boxed (or `####`) answer matches the reference, else 0.0; never raises. A
    problem whose row gave no answer (no `answer`, no braced `\\boxed{}` in its solution) scores 0: an
    empty `\\boxed{}` would otherwise match it."""
    try:
        reference = normalise_latex(problem.answer)
        found = _extract(completion) if isinstance(completion, str) and reference else None
        right = found is not None and same_answer(normalise_latex(found), reference)
        return 1.0 if right else 0.0
    except Exception:  # hostile text must never crash an evaluation
        return 0.0


def to_problem(row: dict[str, Any]) -> Problem:
    solution = str(row["solution"]).strip()
    answer = str(row.get("answer") or last_boxed(solution) or "").strip()
    meta = {"generator": "hendrycks_math", "fmt": "hf", "level": str(row.get("level", "")),
            "type": str(row.get("type", row.get("subject", "")))}
    return Problem("hendrycks_math", f"{str(row['problem']).strip()}\n\n{MATH_INSTRUCTION}", answer, solution, meta)


MATH = Benchmark("hendrycks_math", "EleutherAI/hendrycks_math", to_problem, score)


def MathDomain() -> StandardDomain:  # noqa: N802 - the registry calls it like a class
    return StandardDomain(MATH)
