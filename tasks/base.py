"""The task contract: problems, domains, the held-out split rule and answer extraction.

Everything a domain module needs in common lives here, so that each domain file is only its
generators and its comparison rule:

- `Problem`: one prompt with its reference answer and a worked solution;
- `Domain`: the protocol a domain implements (`sample`, `score`, `config`);
- `in_heldout_bucket(prompt)`: the train/held-out split, a fixed hash bucket of the prompt text;
- `extract_answer(completion, fmt)`: the one extraction rule every verifier starts with;
- `safe_score(completion, problem, normalise, compare)`: the one scoring skeleton every verifier
  runs (extract, normalise, compare) under the hostile-text guard.

Formats: `tiny` (compact prompts, direct answers of a few characters), `worked` (compact prompts,
answers worked step by step over 22-60 characters and rewarded on the final answer only) and `hf`
(natural-language chat prompts for real models).

Final-answer rule (all domains): a completion is looked at through its first `MAX_COMPLETION_CHARS`
characters only; if it contains the format's marker (`#` in `tiny` and `worked`, `####` in `hf`) the
answer is the text after the last marker, otherwise (`tiny` and `hf` only) the whole completion;
surrounding whitespace is stripped. So in `tiny` a bare answer (`13`) and a worked solution
(`17+5=22;22-9=13#13`) are both scored by the same verifier; in `worked` an answer without the
marker is no answer.
Model output is hostile text: verifiers never evaluate it, and return 0.0 instead of raising.
"""

from __future__ import annotations

import difflib
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

DIFFICULTIES = ("easy", "medium", "hard")
FORMATS = ("tiny", "worked", "hf")

# Verifiers read at most this many characters of a completion: bounds the work hostile text can cause.
MAX_COMPLETION_CHARS = 2000
# One bucket out of this many (by sha256 of the prompt text) is the held-out prompt space.
HELDOUT_BUCKETS = 8
_SPLIT_SALT = b"opd-bench/split/v1\x00"

FINAL_MARKERS = {"tiny": "#", "worked": "#", "hf": "####"}
HF_INSTRUCTION = (
    "Think step by step if it helps, then give the final answer on the last line after '####', "
    "for example '#### 42'."
)


class UnknownSuiteError(ValueError):
    """An unknown suite, difficulty, format or domain name; the message is one line."""


@dataclass(frozen=True)
class Problem:
    """One task instance.

    Attributes:
        domain: "math", "code", "logic" or "strings".
        prompt: model input in the requested format (tiny: compact, ends with the domain's separator,
            no EOS; hf: natural-language instructions, one user message).
        answer: canonical reference answer, the short form a tiny model should emit.
        solution: verbose worked solution ending with the answer in its final-answer form.
        meta: generator name, difficulty and whatever the verifier needs (JSON-serialisable).
        alt_solution: another valid worked solution in a different style or procedure (`worked`
            format: what the external teacher is trained on), "" where there is none.
    """

    domain: str
    prompt: str
    answer: str
    solution: str
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    alt_solution: str = ""


@runtime_checkable
class Domain(Protocol):
    """A set of procedural generators with a verifier; one class per domain module."""

    name: str

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        """Draw one problem; deterministic given the state of `rng`."""
        ...

    def score(self, completion: str, problem: Problem) -> float:
        """1.0 if the completion's final answer is right, else 0.0; never raises."""
        ...

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        """The generator settings behind `sample` (JSON-serialisable; part of a suite's hash)."""
        ...


def check_choice(kind: str, value: object, allowed: Sequence[str]) -> str:
    """Return `value` if it is one of `allowed`, else raise a one-line `UnknownSuiteError`."""
    if isinstance(value, str) and value in allowed:
        return value
    first, _, rest = kind.partition(" ")  # "domain of suite x": "domains of suite x"
    plural = (first[:-1] + "ies" if first.endswith("y") else first + "s") + (f" {rest}" if rest else "")
    msg = f"unknown {kind} {value!r}; known {plural}: {', '.join(allowed)}"
    close = difflib.get_close_matches(str(value), list(allowed), n=1)
    if close:
        msg += f" (did you mean {close[0]!r}?)"
    raise UnknownSuiteError(msg)


def in_heldout_bucket(prompt: str) -> bool:
    """True if `prompt` falls in the held-out hash bucket (1 / HELDOUT_BUCKETS of prompt space)."""
    digest = hashlib.sha256(_SPLIT_SALT + prompt.encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") % HELDOUT_BUCKETS == 0


def extract_answer(completion: object, fmt: str) -> str | None:
    """The final answer in a completion (see the module docstring), or None if there is none."""
    if not isinstance(completion, str):
        return None
    text = completion[:MAX_COMPLETION_CHARS]
    marker = FINAL_MARKERS.get(fmt, "#")
    cut = text.rfind(marker)
    if cut >= 0:
        text = text[cut + len(marker) :]
    elif fmt == "worked":
        return None
    text = text.strip()
    return text or None


def safe_score(
    completion: object,
    problem: Problem,
    normalise: Callable[[str], Any],
    compare: Callable[[Any, Problem], bool],
    *,
    fmt: str | None = None,
) -> float:
    """1.0 if the completion's final answer is right, else 0.0; never raises.

    The final answer is extracted by the format's rule (`extract_answer`; the format is the problem's,
    `meta["fmt"]`, unless `fmt` is given), `normalise(text)` makes it comparable (None: no answer)
    and `compare(got, problem)` decides. Model output is hostile text: whatever raises scores 0.0.
    """
    try:
        text = extract_answer(completion, fmt or problem.meta.get("fmt", "tiny"))
        got = None if text is None else normalise(text)
        return 1.0 if got is not None and compare(got, problem) else 0.0
    except Exception:  # hostile text must never crash an evaluation
        return 0.0


def is_rg(problem: Problem) -> bool:
    """Whether a reasoning-gym generator made the problem (its verifier is `tasks.rg.score_rg`)."""
    return str(problem.meta.get("generator", "")).startswith("rg:")


def final_form(answer: str, fmt: str) -> str:
    """How a worked solution states its final answer: `#13` in tiny and worked, `#### 13` in hf."""
    return f"#### {answer}" if fmt == "hf" else f"#{answer}"


def parse_int(text: str | None, max_digits: int = 30) -> int | None:
    """Parse a plain ASCII integer (optional sign); None for anything else, never raises.

    `int()` alone would accept `1_000`, non-ASCII digits and surrounding whitespace, which the
    normalisation rules below do not want to depend on.
    """
    if not text:
        return None
    body = text[1:] if text[0] in "+-" else text
    if not body or len(body) > max_digits or not all("0" <= ch <= "9" for ch in body):
        return None
    value = int(body)
    return -value if text[0] == "-" else value


def hf_prompt(body: str) -> str:
    """Wrap a natural-language task in the hf format's final-answer instruction."""
    return f"{body.strip()}\n\n{HF_INSTRUCTION}"


def as_messages(problem: Problem) -> list[dict[str, str]]:
    """The hf prompt as a chat conversation (one user turn), for `tokenizer.apply_chat_template`."""
    return [{"role": "user", "content": problem.prompt}]


def pick(rng: random.Random, weighted: Sequence[tuple[str, float]]) -> str:
    """Draw one name from (name, weight) pairs."""
    names = [name for name, _ in weighted]
    weights = [weight for _, weight in weighted]
    return rng.choices(names, weights=weights, k=1)[0]


def level_config(
    tiny_levels: dict[str, Any], hf_levels: dict[str, Any], separator: str, difficulty: str, fmt: str,
    worked_levels: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A domain's generator settings for one difficulty and format (they feed the suite's hash)."""
    if fmt == "tiny":
        return {"tiny": tiny_levels[difficulty], "separator": separator}
    if fmt == "worked":
        if worked_levels is None:
            raise UnknownSuiteError("this domain has no worked format; domains with one: math, code, graphs, strings")
        return {"worked": worked_levels[difficulty], "separator": separator}
    return {"hf": [list(entry) for entry in hf_levels[difficulty]]}
