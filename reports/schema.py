"""The versioned JSON Schema of a result record (docs/records.md) and the checks a schema cannot say.

`validate_record(record)` returns a list of human-readable reasons; empty means the record may go on
the leaderboard; it is the source of truth for what a valid record is (docs/records.md lists the
rules). Structure and types come from JSON Schema (draft-07, compiled by `fastjsonschema`: about ten times
faster than `jsonschema`, which matters at a thousand records; it names the first error only); the
cross-field rules (status "complete", curve starts at 0 FLOPs and never goes back, base and final
accuracy equal the first and last evaluations, the counted total equals the ledger's counted rows and
stays within one step of the budget, per-step FLOPs never go back) are checked by hand afterwards.
Fields added after version 1 was first published (`eval_size`, `domain_eval_size`, `curve[*].phase_flops`,
`curve[*].ledger_phase`, `steps`, `method_metrics`, `max_step_flops`, more of `recovery`, `samples`,
`provenance.git_commit`) are optional: older records stay valid.
Non-finite numbers (NaN, Infinity) are rejected when the JSON is parsed (`parse_record_text`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

import fastjsonschema

SCHEMA_VERSION = 1
REPORTED_STATUSES = ("complete",)  # a result record summarises a finished run; the leaderboard shows no other
MAX_NAME_CHARS = 200  # longer names would be unreadable in a table; rejected, not truncated
_TOL = 1e-6

_number = {"type": "number"}
_nonneg = {"type": "number", "minimum": 0}
_fraction = {"type": "number", "minimum": 0, "maximum": 1}
_name = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS}
_fraction_map = {"type": "object", "additionalProperties": _fraction}
_nonneg_map = {"type": "object", "additionalProperties": _nonneg}

_CURVE_POINT = {
    "type": "object",
    "required": ["flops", "accuracy", "mean_length"],
    "properties": {
        "flops": _nonneg,
        "accuracy": _fraction,
        "mean_length": _nonneg,
        "domain_accuracy": _fraction_map,
        "domain_mean_length": _nonneg_map,
        "wall_s": _nonneg,
        "phase": {"type": "string", "maxLength": MAX_NAME_CHARS},  # a free label: start, milestone, boundary, ...
        "ledger_phase": _name,  # the ledger phase running when the evaluation happened
        "phase_flops": {"type": "object", "propertyNames": {"maxLength": MAX_NAME_CHARS},
                        "additionalProperties": _nonneg},
    },
}

# One training step: the counted FLOPs after it, its ledger phase, and any numeric statistics
_STEP = {
    "type": "object",
    "required": ["step", "flops"],
    "properties": {"step": {"type": "integer", "minimum": 1}, "flops": _nonneg, "phase": _name},
    # statistic names are not length-checked: a record has thousands of steps, each check costs ~2 us a key,
    # and the names only reach the figure, escaped and truncated
    "additionalProperties": {"type": ["number", "null"]},
}

_LEDGER_ROW = {
    "type": "object",
    "required": ["category", "phase", "kind", "model", "flops", "tokens", "calls"],
    "properties": {
        "category": {"enum": ["counted", "shared", "external", "eval"]},
        "phase": _name,
        "kind": {"enum": ["rollout", "score", "update"]},
        "model": _name,
        "flops": _nonneg,
        "tokens": {"type": "integer", "minimum": 0},
        "calls": {"type": "integer", "minimum": 0},
        "audit_flops": _nonneg,
        "seconds": _nonneg,
    },
}

_RECOVERY = {
    "type": ["object", "null"],
    "required": ["domain", "grpo_flops", "opd_flops"],
    "properties": {
        "domain": _name,
        "target": _fraction,
        "grpo_flops": {"type": ["number", "null"], "minimum": 0},
        "opd_flops": {"type": ["number", "null"], "minimum": 0},
        "check_size": {"type": "integer", "minimum": 1},  # held-out prompts the recovery target was checked on
        "teacher_accuracy": _fraction,
        "lost_accuracy": _fraction,
        # per arm (grpo, opd), every check in order as [the arm's counted FLOPs so far, accuracy]
        "checks": {"type": "object", "additionalProperties": {
            "type": "array", "items": {"type": "array", "items": [_nonneg, _fraction], "minItems": 2, "maxItems": 2}}},
    },
}

MAX_SAMPLE_CHARS = 2000  # a sample's prompt and completion each; a record is read whole into memory
MAX_SAMPLES = 5000

# One held-out prompt, the student's completion and its reward, at one evaluation (docs/records.md)
_SAMPLE = {
    "type": "object",
    "required": ["flops", "domain", "prompt", "completion", "reward"],
    "properties": {
        "flops": _nonneg,  # the counted FLOPs of the evaluation it was scored at
        "domain": _name,
        "prompt": {"type": "string", "maxLength": MAX_SAMPLE_CHARS},
        "completion": {"type": "string", "maxLength": MAX_SAMPLE_CHARS},
        "reward": _fraction,
    },
}

_PROVENANCE = {
    "type": "object",
    "properties": {
        "code_hash": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "suite_hash": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "model_hashes": {"type": "object", "additionalProperties": {"type": "string"}},
        "packages": {"type": "object", "additionalProperties": {"type": "string", "maxLength": MAX_NAME_CHARS}},
        "hardware": {"type": "object"},
        "created": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "git_commit": {"type": ["string", "null"], "maxLength": MAX_NAME_CHARS},
        "method_code": {"type": "string", "maxLength": MAX_NAME_CHARS},  # a plugin's source hash
        "method_source": {"type": "string", "maxLength": 4096},  # how the run named a plugin (path:Class)
        "method_code_at_start": {"type": "string", "maxLength": MAX_NAME_CHARS},  # resumed after an edit
        "code_hash_at_start": {"type": "string", "maxLength": MAX_NAME_CHARS},  # resumed at other code
        "git_commit_at_start": {"type": ["string", "null"], "maxLength": MAX_NAME_CHARS},
    },
}

RECORD_SCHEMA: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "https://opd-bench.invalid/schemas/result-record-v1.json",
    "title": "OPD-Bench result record, schema version 1",
    "type": "object",
    "required": [
        "schema_version", "run_id", "method", "method_config", "suite", "difficulty", "domains",
        "suite_version", "suite_hash", "profile", "seed", "budget_flops", "status", "base_accuracy",
        "final_accuracy", "final_mean_length", "curve", "ledger", "flops", "provenance",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "run_id": _name,
        "method": _name,
        "method_config": {"type": "object"},
        "suite": _name,
        "difficulty": _name,
        "domains": {"type": "array", "minItems": 1, "items": _name},
        "suite_version": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "suite_hash": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "profile": _name,
        "seed": {"type": "integer"},
        "budget_flops": {"type": "number", "exclusiveMinimum": 0},
        "status": {"type": "string", "maxLength": MAX_NAME_CHARS},
        "base_accuracy": _fraction,
        "final_accuracy": _fraction,
        "base_domain_accuracy": _fraction_map,
        "final_domain_accuracy": _fraction_map,
        "final_mean_length": _nonneg,
        "curve": {"type": "array", "minItems": 1, "items": _CURVE_POINT},
        "ledger": {"type": "array", "items": _LEDGER_ROW},
        "flops": {"type": "object", "required": ["counted"], "additionalProperties": _nonneg},
        "recovery": _RECOVERY,
        "provenance": _PROVENANCE,
        "wall_s": _nonneg,
        "eval_size": {"type": "integer", "minimum": 1},  # held-out prompts per domain per evaluation
        # where a domain's held-out split is smaller than eval_size: the prompts each domain scored
        "domain_eval_size": {"type": "object", "minProperties": 1,
                             "additionalProperties": {"type": "integer", "minimum": 1}},
        "steps": {"type": "array", "items": _STEP},
        "method_metrics": {"type": "object", "propertyNames": {"maxLength": MAX_NAME_CHARS},
                           "additionalProperties": {"type": ["number", "null"]}},
        "max_step_flops": _nonneg,  # the largest counted FLOPs one step spent
        "samples": {"type": "array", "maxItems": MAX_SAMPLES, "items": _SAMPLE},
        # the run's settings (bench/run/record.py `settings`): typed, as the command the site shows reads them
        "settings": {"type": "object", "properties": {
            "max_new_tokens": {"type": "integer", "minimum": 1},
            "eval_max_new_tokens": {"type": "integer", "minimum": 1},
            "eval_every": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "eval_early": {"type": "array", "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}},
            "distill_eval_every": {"type": "integer", "minimum": 0},
            "device": {"type": "string", "maxLength": MAX_NAME_CHARS}}},
        # how a method's independent phases drew samples (bench/context.py `map_phases`); null: no phases
        "phase_streams": {"enum": ["shared", "own", "mixed", None]},
        # the method's own reads of held-out accuracy (`ctx.evaluate(split="heldout")`)
        "heldout_reads": {"type": "integer", "minimum": 0},
        "throughput": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["flops", "seconds", "flop_per_s"],
            "properties": {"flops": _nonneg, "seconds": _nonneg, "flop_per_s": _nonneg, "mfu": _nonneg}}},
    },
}

_validate = fastjsonschema.compile(RECORD_SCHEMA)


class RecordParseError(ValueError):
    """The file is not a JSON object with finite numbers."""


def _reject_constant(token: str) -> float:
    raise RecordParseError(f"non-finite number {token} (NaN and Infinity are not allowed)")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_record_text(text: str) -> dict[str, Any]:
    """Parse one record's JSON text; raises RecordParseError with a reason on anything but an object.

    Also rejected: NaN / Infinity, and strings with an unpaired UTF-16 surrogate (`"\\ud800"` is valid
    JSON but not Unicode text; it breaks pandas' string columns and every file written as UTF-8).
    """
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise RecordParseError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from exc
    if not isinstance(value, dict):
        raise RecordParseError(f"top level is a JSON {type(value).__name__}, not an object")
    if _SURROGATE_ESCAPE.search(text):  # rare: only then pay for the full check (pairs are fine)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise RecordParseError("a string holds an unpaired surrogate escape (not Unicode text)") from exc
    return value


def _consistency(record: dict[str, Any]) -> list[str]:
    """Cross-field rules of docs/records.md, run only on a structurally valid record."""
    reasons = []
    if record["status"] not in REPORTED_STATUSES:
        reasons.append(f"status is {record['status']!r}; only {', '.join(REPORTED_STATUSES)} runs are reported")
    curve = record["curve"]
    if curve[0]["flops"] != 0:
        reasons.append(f"curve[0].flops is {curve[0]['flops']!r}; the first evaluation is the base model at 0")
    flops = [p["flops"] for p in curve]
    if any(b < a for a, b in zip(flops, flops[1:])):
        reasons.append("curve FLOPs go backwards; evaluations must be in order of cumulative FLOPs")
    if not math.isclose(record["base_accuracy"], curve[0]["accuracy"], abs_tol=_TOL):
        reasons.append("base_accuracy differs from curve[0].accuracy")
    if not math.isclose(record["final_accuracy"], curve[-1]["accuracy"], abs_tol=_TOL):
        reasons.append("final_accuracy differs from the last curve point's accuracy")
    counted = sum(r["flops"] for r in record["ledger"] if r["category"] == "counted")
    if not math.isclose(record["flops"]["counted"], counted, rel_tol=_TOL, abs_tol=1.0):
        reasons.append(
            f"flops.counted ({record['flops']['counted']:.6g}) differs from the ledger's counted rows ({counted:.6g})"
        )
    return reasons + _ledger_rows(record["ledger"]) + _budget_and_steps(record) + _domain_sizes(record)


def _domain_sizes(record: dict[str, Any]) -> list[str]:
    """`domain_eval_size` names the record's domains, each scored on at most `eval_size` prompts."""
    sizes = record.get("domain_eval_size")
    if sizes is None:
        return []
    if set(sizes) != set(record["domains"]):
        return [f"domain_eval_size names {sorted(sizes)}, not the record's domains {record['domains']}"]
    if (size := record.get("eval_size")) is None or any(n > size for n in sizes.values()):
        return [f"domain_eval_size {sizes} is not at most eval_size ({size}) per domain"]
    return []


def _ledger_rows(ledger: list[dict[str, Any]]) -> list[str]:
    """An evaluation never trains (negative charges are already refused by the schema)."""
    if any(r["category"] == "eval" and r["kind"] == "update" for r in ledger):
        return ["ledger books training (kind update) as eval; evaluations never train, so this "
                "compute belongs to counted"]
    return []


def _budget_and_steps(record: dict[str, Any]) -> list[str]:
    """A run stops within one step of its budget; its steps' FLOPs never go back."""
    reasons = []
    step_flops, budget, counted = record.get("max_step_flops"), record["budget_flops"], record["flops"]["counted"]
    # the runner checks the budget between steps, so the last step may cross it, by at most one step
    if step_flops is not None and counted > (budget + step_flops) * (1 + _TOL) + 1.0:
        reasons.append(f"flops.counted ({counted:.6g}) exceeds budget_flops ({budget:.6g}) by more than one step "
                       f"(max_step_flops {step_flops:.6g}): the run trained past its budget")
    flops = [s["flops"] for s in record.get("steps", ())]
    if any(b < a for a, b in zip(flops, flops[1:])):
        reasons.append("steps FLOPs go backwards; steps must be in order of cumulative counted FLOPs")
    return reasons


def validate_record(record: Any) -> list[str]:
    """Reasons the record is not a valid schema-version-1 result record; [] when it is.

    Args:
        record: a parsed JSON value (untrusted).
    Returns:
        reasons, each one line naming the offending field (the first schema error, or every
        cross-field rule broken).
    """
    if not isinstance(record, dict):
        return [f"top level is a JSON {type(record).__name__}, not an object"]
    version = record.get("schema_version")
    if version != SCHEMA_VERSION:
        return [f"schema_version is {version!r}; this report reads version {SCHEMA_VERSION}"]
    try:
        _validate(record)
    except fastjsonschema.JsonSchemaValueException as exc:
        # "data.curve[0].accuracy must be ..." -> "curve[0].accuracy must be ..."
        message = exc.message
        message = message[5:] if message.startswith("data.") else "record" + message[4:]
        return [_short(message)]
    return _consistency(record)


def _short(message: str, limit: int = 160) -> str:
    # an error may quote the offending value, which may be a megabyte of untrusted text
    return message if len(message) <= limit else message[: limit - 1] + "…"
