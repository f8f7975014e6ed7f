"""What a run writes about itself: `config.json` (written first, checked on resume) and `summary.json`,
the result record written last, which the report reads (docs/records.md)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from bench.accounting.ledger import Ledger
from bench.run import provenance as prov
from bench.run.config import RunConfig
from bench.world.profiles import Profile

SCHEMA_VERSION = 1


def fingerprint(method: str, method_config: Any, config: RunConfig, suite: Any) -> dict:
    """What makes a run, the part of `config.json` a resumed run must match. It is built as it reads back
    from disk (a config's tuple, such as a plugin's list of rates, as a list), so a run compares equal
    to its own config.json."""
    return json.loads(json.dumps({
        "method": method,
        "method_config": dataclasses.asdict(method_config),
        "suite": config.suite,
        "difficulty": config.difficulty,
        "suite_hash": suite.content_hash,
        "profile": config.profile,
        "seed": config.seed,
        "budget_flops": config.budget,
        "eval_every": config.eval_every,
        "eval_early": list(config.eval_early),
        "distill_eval_every": config.distill_eval_every,
        "eval_size": config.heldout_size,
        "max_new_tokens": config.rollout_tokens,
        # `--max-new-tokens` caps evaluations too; where that moves their cap off the profile's, it is said
        # (a default run's fingerprint, and every record made before this key, stay as they were)
        **({"eval_max_new_tokens": config.eval_tokens}
           if config.eval_tokens != config.resolved_profile.eval_max_new_tokens else {}),
        "models": {"student": config.model, "external": config.external,
                   "teachers": dict(config.teachers)} if config.model
        else ({"teachers": dict(config.teachers)} if config.teachers else None),
        # a GPU run's kind of device (an hf model loads in bf16 there, fp32 on a CPU); a CPU run's
        # fingerprint, and every one made before this key, stay as they were
        **({"device": device_kind(config)} if config.on_gpu else {}),
    }, default=str))


def device_kind(config: RunConfig) -> str:
    """The kind of device the run trains on: `--device`, else its world's (`cuda` for gpu-small)."""
    return (config.device if config.device != "cpu" else config.resolved_profile.device).split(":")[0]


def settings(config: RunConfig) -> dict:
    """The run's options besides its method config that change its numbers, as its record keeps them
    (`settings`; docs/records.md): the token caps of rollouts and of evaluations, the evaluation
    schedule (which FLOPs the curve is read at) and the kind of device."""
    return {"max_new_tokens": config.rollout_tokens, "eval_max_new_tokens": config.eval_tokens,
            "eval_every": config.eval_every, "eval_early": list(config.eval_early),
            "distill_eval_every": config.distill_eval_every, "device": device_kind(config)}


# what every complete run's summary.json holds and the command line reads back (docs/records.md)
RECORD_KEYS = ("run_id", "base_accuracy", "final_accuracy", "final_mean_length", "flops", "curve", "ledger", "wall_s")


def record_damage(summary: Any, run_id: str) -> str | None:
    """Why a `summary.json` (as read) is not the complete record of run `run_id`, or None where it is."""
    if not isinstance(summary, dict):
        return f"it holds a JSON {type(summary).__name__}, not a record"
    if missing := [key for key in RECORD_KEYS if key not in summary]:
        return f"it lacks {', '.join(missing)}"
    if summary["run_id"] != run_id:
        return f"it is the record of {summary['run_id']!r}"
    if not isinstance(summary["flops"], dict) or "counted" not in summary["flops"]:
        return "it lacks flops.counted"
    return None


def config_record(run_id: str, method: str, method_config: Any, config: RunConfig, profile: Profile,
                  suite: Any, method_code: str | None = None) -> dict:
    """`config.json`: the fingerprint a resumed run must match, then the suite version and provenance."""
    made = fingerprint(method, method_config, config, suite)
    return {
        "run_id": run_id,
        "fingerprint": made,
        **made,
        "suite_version": suite.version,
        # a plugin's source hash, and how it was named (a file's path:Class), for the command that reruns it
        "provenance": {**provenance(suite, profile, config.device if config.device != "cpu" else profile.device),
                       **({"method_code": method_code, "method_source": config.method} if method_code else {})},
    }


def code_difference(written: Any, method_code: str | None) -> str | None:
    """How the plugin code a complete run's record names (`provenance.method_code`) differs from the
    plugin's now, or None (the same, a built-in method, or a record that names none)."""
    made = written.get("provenance") if isinstance(written, dict) else None
    recorded = made.get("method_code") if isinstance(made, dict) else None
    if not (isinstance(recorded, str) and method_code) or recorded == method_code:
        return None
    return f"provenance.method_code is {recorded} there, {method_code} here"


def note_code(written: dict) -> bool:
    """On a resume: where the project's code is not the code a run began with (config.json's
    `provenance`, `written`, as read), name the code that finishes it (`code_hash`, `git_commit`) and
    keep the first in `code_hash_at_start` / `git_commit_at_start`. True where `written` changed."""
    made = written.get("provenance")
    now = {"code_hash": prov.code_hash(), "git_commit": prov.git_commit()}
    if not isinstance(made, dict) or made.get("code_hash") in (None, now["code_hash"]):
        return False
    for key, value in now.items():
        made.setdefault(f"{key}_at_start", made.get(key))
        made[key] = value
    return True


def models_difference(written: Any, now: dict[str, str]) -> str | None:
    """How the models a run was made from (the `provenance.model_hashes` of its config.json or record,
    `written`, as read) differ from its world's now (`now`, its `model_hashes()`): "model_hashes.NAME is
    X there, Y here" for the first whose weights hash differs, or None. A model on only one side is not
    compared: a run records a world's teacher only once it is built, and a world builds it on first use;
    a config.json of older code records none."""
    made = written.get("provenance") if isinstance(written, dict) else None
    recorded = made.get("model_hashes") if isinstance(made, dict) else None
    if not isinstance(recorded, dict):
        return None
    name = next((n for n in sorted(recorded) if n in now and now[n] != recorded[n]), None)
    return None if name is None else f"model_hashes.{name} is {recorded[name]} there, {now[name]} here"


def provenance(suite: Any, profile: Profile, device: str = "cpu") -> dict:
    return {
        "code_hash": prov.code_hash(),
        "git_commit": prov.git_commit(),
        "suite_hash": suite.content_hash,
        "world_version": profile.world_version,
        "packages": prov.package_versions(),
        "hardware": prov.hardware(device),
        "created": prov.now_iso(),
    }


def throughput(ledger: Ledger, provenance: dict, device_type: str) -> dict:
    """Counted work by kind: FLOPs, wall seconds, achieved FLOP/s and, on a GPU whose peak is
    known and that the run used, model FLOP utilisation (achieved / dense bf16 peak)."""
    out = ledger.throughput("counted")
    peak = (provenance.get("hardware") or {}).get("gpu_peak_bf16_flops")
    if peak and device_type == "cuda":
        for row in out.values():
            row["mfu"] = row["flop_per_s"] / peak
    return out


def summary(
    *,
    run_id: str,
    method: str,
    method_config: Any,
    config: RunConfig,
    suite: Any,
    curve: list[dict],
    ledger: Ledger,
    reports: dict[str, Any],
    phase_streams: str | None,
    heldout_reads: int,
    steps: list[dict],
    max_step_flops: float,
    provenance: dict,
    model_hashes: dict[str, str],
    device_type: str,
    wall_s: float,
) -> dict:
    """`summary.json`: the result record (docs/records.md). `reports` are the method's `ctx.report`s:
    `recovery` fills the recovery block, the rest are `method_metrics`."""
    base, final = curve[0], curve[-1]
    # listed by FLOPs: where two evaluations share them (a student declared after the last step), the later's
    latest = list({p["flops"]: p for p in curve}.values())
    samples = [{"flops": p["flops"], **s} for p in latest for s in p.get("samples", [])]
    curve = [{k: v for k, v in p.items() if k != "samples"} for p in curve]
    # prompts each domain's evaluations scored: a held-out split smaller than eval_size (a standard
    # benchmark's test split, HumanEval's 164) is scored whole, and the record says so
    scored = {d: min(config.heldout_size, len(suite.heldout(d))) for d in suite.domains}
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "method": method,
        "method_config": dataclasses.asdict(method_config),
        "suite": config.suite,
        "difficulty": config.difficulty,
        "domains": list(suite.domains),
        "suite_version": suite.version,
        "suite_hash": suite.content_hash,
        "profile": config.profile,
        "seed": config.seed,
        "budget_flops": config.budget,
        "status": "complete",
        "base_accuracy": base["accuracy"],
        "final_accuracy": final["accuracy"],
        "base_domain_accuracy": base["domain_accuracy"],
        "final_domain_accuracy": final["domain_accuracy"],
        "final_mean_length": final["mean_length"],
        "curve": curve,
        "ledger": ledger.rows(),
        "flops": ledger.by_category(),
        "recovery": reports.get("recovery"),
        "method_metrics": {k: v for k, v in reports.items() if k != "recovery"},
        "eval_size": config.heldout_size,
        **({"domain_eval_size": scored} if any(n < config.heldout_size for n in scored.values()) else {}),
        "settings": settings(config),
        "phase_streams": phase_streams,
        "heldout_reads": heldout_reads,
        "steps": steps,
        "max_step_flops": max_step_flops,
        "throughput": throughput(ledger, provenance, device_type),
        "provenance": {**provenance, "model_hashes": model_hashes,
                       "phase_executor": config.phase_executor, "rollout": config.rollout},
        "wall_s": wall_s,
        "samples": samples,
    }
