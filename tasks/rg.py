"""reasoning-gym generators and verifiers behind our `Problem` contract (hf format only).

A reasoning-gym dataset is a pure function of (config, seed, index). We create each configured
dataset once, with a fixed seed and a virtual size of 2**20, and draw an index from the caller's rng,
so a suite's train sampler and held-out split stay reproducible from our own seeds.

Scoring: our extraction rule (`tasks.base.extract_answer`) first, then the dataset's own
`score_answer` on the extracted text with the stored metadata; a problem counts as solved only at
full credit (reasoning-gym gives partial credit for near misses; our metric is pass@1).
Two verifiers are replaced by exact ones, because reasoning-gym's pay full credit for wrong answers:
- `number_sorting` accepts any sorted list within 1.0 of each reference number: we compare the
  numbers exactly (a list in JSON or Python syntax, quoted or not, or bare comma-separated numbers);
- `spell_backward` sums 1/len per matching leading letter, which reaches 1.0 (float rounding) for
  the right word followed by junk: we compare case-insensitively and exactly;
- `gsm_symbolic` takes the first number in the text and drops a leading minus sign (`-288` scores
  as `288`): we require the whole final answer to be that number (commas, spaces, a trailing `.`
  and a leading `$` are ignored).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import random
import warnings
from decimal import Decimal
from collections.abc import Callable
from typing import Any

from tasks.base import Problem, extract_answer, final_form, hf_prompt, pick, safe_score

_VIRTUAL_SIZE = 2**20
_SEED = 20_251_129


def _freeze(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


@functools.lru_cache(maxsize=64)
def _dataset(name: str, frozen_config: str):
    import reasoning_gym

    config = json.loads(frozen_config)
    return reasoning_gym.create_dataset(name, seed=_SEED, size=_VIRTUAL_SIZE, **config)


@functools.lru_cache(maxsize=32)
def _scorer(name: str):
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(name)


def _json_safe(value: Any) -> Any:
    """Metadata as it will come back from JSON (tuples become lists), so scoring sees one form."""
    return json.loads(json.dumps(value, default=str))


def _worked_solution(name: str, entry: dict[str, Any]) -> str:
    """A worked solution: the dataset's own chain of thought where it has one."""
    answer = entry["answer"]
    cot = entry["metadata"].get("answer_cot") if isinstance(entry.get("metadata"), dict) else None
    if isinstance(cot, str) and cot.strip():
        body = cot.strip()
        # gsm_symbolic's chain of thought already ends with "#### <answer>"
        return body if body.endswith(final_form(answer, "hf")) else f"{body}\n{final_form(answer, 'hf')}"
    steps = {
        "bf": "Running the program cell by cell, the characters it outputs are:",
        "codeio": "Tracing main_solution on this input, the returned value serialises to:",
        "knights_knaves": "Checking every assignment against all statements, the only consistent one is:",
        "spell_backward": "Reading the letters from last to first gives:",
        "letter_counting": "Going through the text word by word and counting matches gives:",
        "number_sorting": "Comparing the numbers pairwise and ordering them gives:",
        "chain_sum": "Adding and subtracting the terms from left to right gives:",
        "basic_arithmetic": "Applying operator precedence and evaluating step by step gives:",
    }
    return f"{steps.get(name, 'The answer is:')} {answer}\n{final_form(answer, 'hf')}"


def sample_rg(
    name: str, config: dict[str, Any], rng: random.Random, domain: str, difficulty: str
) -> Problem:
    """Draw one reasoning-gym problem as a hf-format `Problem`."""
    dataset = _dataset(name, _freeze(config))
    for _ in range(100):
        # Some generators (codeio) print or warn while generating; keep that off the user's console.
        index = rng.randrange(_VIRTUAL_SIZE)
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                entry = dataset[index]
        except Exception:  # some codeio snippets fail to serialise their output: draw again
            continue
        answer = entry.get("answer")
        # A usable problem has a reference answer that survives our extraction rule unchanged.
        if isinstance(answer, str) and answer.strip() and "####" not in answer:
            if extract_answer(answer, "hf") == answer.strip():
                break
    else:
        raise RuntimeError(f"reasoning-gym {name} produced no usable problem in 100 draws")
    meta = {
        "generator": f"rg:{name}",
        "difficulty": difficulty,
        "fmt": "hf",
        "rg_metadata": _json_safe(entry.get("metadata", {})),
    }
    return Problem(
        domain=domain,
        prompt=hf_prompt(entry["question"]),
        answer=answer.strip(),
        solution=_worked_solution(name, entry),
        meta=meta,
    )


def _number_list(text: str) -> list[float] | None:
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    items = [item.strip().strip("'\"") for item in body.split(",")]
    if len(items) > 1000:
        return None
    try:
        return [float(item) for item in items]
    except ValueError:
        return None


def _score_number_sorting(extracted: str, answer: str) -> float:
    got, want = _number_list(extracted), _number_list(answer)
    if got is None or want is None or len(got) != len(want):
        return 0.0
    return 1.0 if all(abs(g - w) <= 1e-9 * max(1.0, abs(w)) for g, w in zip(got, want)) else 0.0


def _score_number(extracted: str, answer: str) -> float:
    text = extracted.replace(",", "").replace(" ", "").removesuffix(".").removeprefix("$")
    if not text or len(text) > 40 or not text.isascii():
        return 0.0
    try:
        return 1.0 if Decimal(text) == Decimal(answer.strip()) else 0.0
    except ArithmeticError:  # decimal.InvalidOperation: not a number
        return 0.0


_EXACT_SCORERS = {
    "number_sorting": _score_number_sorting,
    "spell_backward": lambda got, want: 1.0 if got.lower() == want.strip().lower() else 0.0,
    "gsm_symbolic": _score_number,
}


def score_rg(completion: str, problem: Problem) -> float:
    """1.0 if reasoning-gym's verifier gives the extracted answer full credit, else 0.0; never raises."""
    return safe_score(completion, problem, lambda text: text, _full_credit, fmt="hf")


def _full_credit(extracted: str, problem: Problem) -> bool:
    name = problem.meta["generator"].removeprefix("rg:")
    if name in _EXACT_SCORERS:
        return _EXACT_SCORERS[name](extracted, problem.answer) >= 1.0
    entry = {
        "question": problem.prompt,
        "answer": problem.answer,
        "metadata": problem.meta.get("rg_metadata", {}),
    }
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = _scorer(name)(extracted, entry)
    # Exactly full credit: partial credits that round to 0.999... are still wrong answers.
    return isinstance(value, (int, float)) and value >= 1.0


def sample_mix(
    rng: random.Random,
    mix: list[tuple[str, float, dict[str, Any]]],
    domain: str,
    difficulty: str,
    own: dict[str, Callable[[dict[str, Any]], Problem]],
) -> Problem:
    """One problem from an hf mixture of (generator, weight, settings): the domain's own generators by
    name (`own`, called with their settings), reasoning-gym datasets as `rg:<name>`."""
    generator = pick(rng, [(name, weight) for name, weight, _ in mix])
    settings = next(s for name, _, s in mix if name == generator)
    if generator in own:
        return own[generator](settings)
    return sample_rg(generator.removeprefix("rg:"), settings, rng, domain, difficulty)
