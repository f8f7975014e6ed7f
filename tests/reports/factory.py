"""Synthetic, schema-valid result records for the report's tests and benchmark (tests only).

The real runner is not ready yet; these records follow docs/records.md and give each method the
behaviour the paper reports (OPD reaches the reference's accuracy sooner, an external teacher
lengthens answers, self-GRPO recovers cheaply), with seed noise, so the metrics have something to find.

    make_record(method="opd-multi", suite="math_code", seed=0)  -> dict
    make_sweep(1000)                                           -> list of dicts
    write_runs(records, runs_dir)                              -> runs_dir/<run_id>/summary.json
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

SUITES = {"math": ["math"], "code": ["code"], "math_code": ["math", "code"],
          "four_domain": ["math", "code", "graphs", "strings"]}
METHODS = ("grpo-joint", "opd-multi", "opd-external", "self-grpo", "grpo", "sft")
# method -> (asymptote gain over base, midpoint as a fraction of the budget, mean-length factor)
_SHAPE = {
    "grpo-joint": (0.30, 0.30, 1.00),
    "grpo": (0.26, 0.30, 1.00),
    "opd-multi": (0.33, 0.12, 1.02),
    "opd-external": (0.22, 0.35, 1.45),
    "self-grpo": (0.29, 0.20, 1.05),
    "sft": (0.18, 0.15, 1.20),
}


def _curve(rng, base: float, gain: float, mid: float, budget: float, stop: float, length: float) -> list[dict]:
    points = []
    fractions = [0.0] + [round(0.1 * k, 1) for k in range(1, 11) if 0.1 * k <= stop + 1e-9]
    for i, frac in enumerate(fractions):
        # evaluations happen just after each tenth of the budget is spent (a step overshoots it)
        flops = 0.0 if frac == 0 else min(frac * budget * (1 + 0.004 * rng.random()), budget)
        acc = base if frac == 0 else base + gain / (1 + (mid / frac) ** 1.3) + rng.normal(0, 0.01)
        points.append({"flops": flops, "accuracy": float(np.clip(acc, 0, 1)),
                       "mean_length": round(length * (1 + 0.05 * i / 10) + rng.normal(0, 0.05), 4),
                       "wall_s": 10.0 * i, "phase": "start" if i == 0 else "train"})
    return points


def _ledger(method: str, domains: list[str], counted: float, rng) -> list[dict[str, Any]]:
    """Counted rows that add up to `counted`, split by the phases this method uses."""
    n = len(domains)
    if method == "opd-multi":
        share = 0.052 if n <= 2 else 0.080  # the paper's distillation shares
        phases = [(f"expert:{d}", 1 / n / (1 + share)) for d in domains] + [("distill", share / (1 + share))]
    elif method == "self-grpo":
        phases = [(f"stage:{d}", 0.9 / n) for d in domains] + [("distill", 0.1)]
    elif method == "opd-external":
        phases = [("distill", 1.0)]
    else:
        phases = [("train", 1.0)]
    rows = []
    for phase, frac in phases:
        kinds = {"rollout": 0.45, "score": 0.20, "update": 0.35}
        for kind, k_frac in kinds.items():
            model = phase if phase.startswith(("expert:", "stage:")) else "student"
            if phase == "distill" and kind == "score":
                model = "teacher"
            rows.append({"category": "counted", "phase": phase, "kind": kind, "model": model,
                         "flops": counted * frac * k_frac, "tokens": int(rng.integers(1e4, 1e6)), "calls": 10})
    return rows


def make_record(
    method: str = "grpo-joint", suite: str = "math_code", difficulty: str = "easy", profile: str = "tiny",
    seed: int = 0, budget_flops: float = 3e14, stop_fraction: float = 1.0, base_accuracy: float | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """One schema-valid record; `overrides` replace top-level fields after it is built."""
    key = f"{method}|{suite}|{difficulty}|{profile}|{seed}".encode("utf-8", "surrogatepass")
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
    domains = SUITES.get(suite, ["math"])
    gain, mid, length_factor = _SHAPE.get(method, (0.2, 0.25, 1.1))
    base = 0.31 if base_accuracy is None else base_accuracy
    curve = _curve(rng, base, gain, mid, budget_flops, stop_fraction, 3.2 * length_factor)
    counted = curve[-1]["flops"]
    ledger = _ledger(method, domains, counted, rng)
    counted = sum(r["flops"] for r in ledger)
    curve[-1]["flops"] = counted  # the last evaluation is after the last charge
    final = curve[-1]["accuracy"]
    recovery = None
    if method == "self-grpo":
        grpo = budget_flops * 0.05
        recovery = {"domain": domains[0], "target": base + 0.1, "grpo_flops": grpo,
                    "opd_flops": grpo / float(rng.uniform(8, 40))}
    record = {
        "schema_version": 1, "run_id": f"{method}__{suite}-{difficulty}__{profile}__s{seed}",
        "method": method, "method_config": {"lr": 1e-5, "group_size": 8, "note": "synthetic"},
        "suite": suite, "difficulty": difficulty, "domains": domains, "suite_version": "1",
        "suite_hash": "ab" * 32, "profile": profile, "seed": seed, "budget_flops": budget_flops,
        "status": "complete", "base_accuracy": base, "final_accuracy": final,
        "base_domain_accuracy": {d: base for d in domains},
        "final_domain_accuracy": {d: float(np.clip(final + rng.normal(0, 0.03), 0, 1)) for d in domains},
        "final_mean_length": curve[-1]["mean_length"], "curve": curve, "ledger": ledger,
        "flops": {"counted": counted, "shared": 1e13, "eval": 4e12,
                  "external": 5e14 if method == "opd-external" else 0.0},
        "recovery": recovery,
        "provenance": {"code_hash": "c0de" * 10, "suite_hash": "ab" * 32, "model_hashes": {"base": "ba5e" * 8},
                       "packages": {"torch": "2.13.0", "transformers": "5.0.0"},
                       "hardware": {"cpu": "synthetic", "cores": 2, "gpu": None},
                       "created": "2026-01-01T00:00:00Z"},
        "wall_s": 123.4,
    }
    record.update(overrides)
    return record


def make_sweep(n_records: int = 1000, methods: tuple[str, ...] = METHODS, suites: tuple[str, ...] = tuple(SUITES),
               difficulties: tuple[str, ...] = ("easy", "medium", "hard"), profile: str = "tiny") -> list[dict]:
    """`n_records` records: every method x suite x difficulty, seeds 0, 1, ... until there are enough."""
    cells = [(m, s, d) for s in suites for d in difficulties for m in methods]
    out = []
    for i in range(n_records):
        method, suite, difficulty = cells[i % len(cells)]
        out.append(make_record(method, suite, difficulty, profile, seed=i // len(cells)))
    return out


def write_runs(records: list[dict], runs_dir: Path) -> Path:
    """Write records as runs_dir/<safe name>/summary.json, the layout the runner writes."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    for i, record in enumerate(records):
        run_dir = runs_dir / f"run{i:05d}"
        run_dir.mkdir(exist_ok=True)
        (run_dir / "summary.json").write_text(json.dumps(record), encoding="utf-8")
    return runs_dir

