"""Task suites for OPD-Bench: domains, generators, verifiers, splits (docs/design.md, Tasks and worlds).

    from tasks import get_suite
    suite = get_suite("four_domain", "easy", "tiny")

`DOMAINS` is the registry: domain name -> lazy "module:Class". A domain module holds its generators
for both prompt formats and its verifier; `tasks.suites` turns domains into suites with seeded train
samplers, fixed held-out splits and content hashes.
"""

from __future__ import annotations

from typing import Any

from tasks.base import (
    DIFFICULTIES, FORMATS, Domain, Problem, UnknownSuiteError, as_messages, check_choice, final_form, safe_score,
)
from tasks.suites import HELDOUT_PER_DOMAIN, STANDARD_SUITES, SUITES, Suite, get_domain, get_suite, list_suites

DOMAINS: dict[str, str] = {
    "math": "tasks.math:MathDomain",
    "code": "tasks.code:CodeDomain",
    "logic": "tasks.logic:LogicDomain",
    "strings": "tasks.strings:StringsDomain",
    "graphs": "tasks.graphs:GraphsDomain",
    # Standard benchmarks from local files (tasks/standard.py), hf format only.
    "gsm8k": "tasks.gsm8k:GSM8KDomain",
    "hendrycks_math": "tasks.hendrycks_math:MathDomain",
    "mbpp": "tasks.mbpp:MBPPDomain",
    "humaneval": "tasks.humaneval:HumanEvalDomain",
}

__all__ = [
    "DIFFICULTIES", "DOMAINS", "FORMATS", "HELDOUT_PER_DOMAIN", "STANDARD_SUITES", "SUITES", "Domain", "Problem",
    "Suite", "UnknownSuiteError", "as_messages", "check_choice", "describe_suites", "final_form", "get_domain",
    "get_suite", "list_suites", "safe_score",
]


def describe_suites(fmt: str = "tiny", difficulties: tuple[str, ...] = DIFFICULTIES) -> list[dict[str, Any]]:
    """One row per (suite, difficulty), then one per standard benchmark suite: domains, split sizes,
    version, content hash, an example, and where the problems come from (`data`).

    Generates every held-out split involved (seconds in the tiny format; cached per process). A standard
    benchmark's suite (`STANDARD_SUITES`, hf format, no difficulty) reads its local files when they are
    there; when they are not, its row says where they belong and leaves the sizes empty.
    """
    check_choice("format", fmt, FORMATS)
    rows = []
    for name in (s for s in list_suites() if s not in STANDARD_SUITES):
        for difficulty in difficulties:
            suite = get_suite(name, check_choice("difficulty", difficulty, DIFFICULTIES), fmt)
            rows.append(_suite_row(suite, name, difficulty, fmt, "generated"))
    for name in STANDARD_SUITES:
        rows.append(_standard_row(name))
    return rows


def _suite_row(suite: Suite, name: str, difficulty: str | None, fmt: str, data: str) -> dict[str, Any]:
    heldout = suite.heldout()
    example = heldout[0]
    return {
        "suite": name,
        "difficulty": difficulty,
        "format": fmt,
        "domains": list(suite.domains),
        "version": suite.version,
        "heldout_size": len(heldout),
        "heldout_per_domain": len(heldout) // len(suite.domains),
        "train_size": None,  # endless sampler
        "content_hash": suite.content_hash,
        "example_prompt": example.prompt,
        "example_answer": example.answer,
        "data": data,
    }


def _standard_row(name: str) -> dict[str, Any]:
    """A standard benchmark suite's row, from its local files or, without them, where they belong."""
    from tasks.standard import MissingDataError, data_root

    folders = ", ".join(str(data_root() / d) for d in STANDARD_SUITES[name])
    try:
        row = _suite_row(get_suite(name, "easy", "hf"), name, None, "hf", folders)
        row["heldout_per_domain"] = None  # each benchmark's own test split, sizes differ
        return row
    except MissingDataError:
        return {"suite": name, "difficulty": None, "format": "hf", "domains": list(STANDARD_SUITES[name]),
                "version": None, "heldout_size": None, "heldout_per_domain": None, "train_size": None,
                "content_hash": None, "example_prompt": None, "example_answer": None,
                "data": f"missing: {folders}"}
