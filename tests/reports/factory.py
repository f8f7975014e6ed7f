"""Synthetic, schema-valid result records for the report's tests and benchmark (tests only).

These records follow docs/records.md, optional fields included (eval_size, per-evaluation
phase_flops and ledger_phase, steps, method_metrics, max_step_flops, the recovery check size, samples,
the git commit), and give each method the behaviour the paper reports, with seed noise, so the
metrics have something to find: OPD's experts leave the student at the base model until distillation, which then overtakes
joint GRPO with fewer FLOPs and stops early; an external teacher lengthens answers; self-GRPO
recovers cheaply. Evaluations follow the runner's milestones: 0, 1%, 2%, 5%, then every 10% of the
budget; opd-multi adds a boundary point where distillation starts and denser points during it.

    make_record(method="opd-multi", suite="math_code", seed=0)  -> dict
    make_sweep(1000)                                           -> list of dicts
    write_runs(records, runs_dir)                              -> runs_dir/<run_id>/summary.json
    make_recover_record(seed=0, lost=0.2, ratio=3.0)           -> a `recover` run's record
    write_study(folder, records, title=...)                    -> folder (study.json and records/)
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
MILESTONES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
EVAL_SIZE = 1000  # held-out prompts per domain per evaluation, the tiny profile's
DISTILL_EVALS = 8  # opd-multi evaluates this often during distillation
STEPS = 120  # training steps of a run, split over its phases by FLOPs (at least 12 a phase)
# the fixed held-out prompts whose completions a record keeps at every evaluation: (prompt, answer)
SAMPLE_PROMPTS = {"math": [("17+25=", "42"), ("8*7=", "56")], "code": [("x=3;x+=4;print(x)", "7"),
                                                                     ("print(len('abc'))", "3")],
                  "graphs": [("a-b b-c c-d: a..d?", "3"), ("a-b a-c: b..c?", "2")],
                  "strings": [("reverse 'opd'", "dpo"), ("count 'a' in 'banana'", "3")]}
GIT_COMMIT = "5eed" * 10


def _plan(method: str, domains: list[str], counted: float, rng) -> list[tuple[str, float]]:
    """The run's ledger phases in the order it ran them, with the counted FLOPs of each."""
    n = len(domains)
    if method == "opd-multi":
        share = 0.052 if n <= 2 else 0.080  # the paper's distillation shares
        experts = counted / (1 + share)
        return [(f"expert:{d}", experts / n) for d in domains] + [("distill", experts * share)]
    if method == "self-grpo":
        return [(f"stage:{d}", 0.9 * counted / n) for d in domains] + [("distill", 0.1 * counted)]
    return [("distill" if method == "opd-external" else "train", counted)]


def _phase_at(plan: list[tuple[str, float]], flops: float) -> tuple[str, dict[str, float]]:
    """The phase running after `flops` counted FLOPs (at a phase's end: that phase), and each phase's FLOPs so far."""
    spent, phases, running = 0.0, {}, plan[0][0]
    for phase, total in plan:
        if phases and flops <= spent:  # this phase has not started yet
            break
        phases[phase] = float(max(0.0, min(total, flops - spent)))
        running = phase
        spent += total
    return running, phases


def _opd_multi_points(rng, base: float, gain: float, budget: float, plan) -> list[tuple[float, float, str]]:
    """(flops, accuracy, label): the base model until distillation, then a rise that levels off at 3/4 of it."""
    experts = sum(f for p, f in plan if p != "distill")
    distill = plan[-1][1]
    points = [(frac * budget, base, "start" if frac == 0 else "milestone") for frac in MILESTONES
              if frac * budget < experts]
    points.append((experts, base, "boundary"))  # the end of the last expert: the student distillation starts from
    for t in np.linspace(1, DISTILL_EVALS, DISTILL_EVALS) / DISTILL_EVALS:
        rise = 1 - (1 - min(t / 0.75, 1.0)) ** 2
        points.append((experts + t * distill, base + gain * rise + rng.normal(0, 0.004), "distill"))
    return points


def _curve(rng, method: str, base: float, budget: float, stop: float, length: float, plan) -> list[dict]:
    gain, mid, _ = _SHAPE.get(method, (0.2, 0.25, 1.1))
    counted = sum(f for _, f in plan)
    if method == "opd-multi":
        raw = _opd_multi_points(rng, base, gain, budget, plan)
    else:
        fracs = [f for f in MILESTONES if f <= stop + 1e-9]
        raw = []
        for frac in fracs:
            # evaluations happen just after each milestone is spent (a step overshoots it)
            flops = 0.0 if frac == 0 else min(frac * budget * (1 + 0.004 * rng.random()), counted)
            acc = base if frac == 0 else base + gain / (1 + (mid / frac) ** 1.3) + rng.normal(0, 0.01)
            raw.append((flops, acc, "start" if frac == 0 else "milestone"))
        raw[-1] = (counted, raw[-1][1], "final")  # the last evaluation is after the last charge
    points = []
    for i, (flops, acc, label) in enumerate(raw):
        running, phases = _phase_at(plan, flops)
        points.append({"flops": flops, "accuracy": float(np.clip(acc, 0, 1)),
                       "mean_length": round(length * (1 + 0.05 * i / 10) + rng.normal(0, 0.05), 4),
                       "wall_s": 10.0 * i, "phase": label, "ledger_phase": running, "phase_flops": phases})
    return points


def _ledger(plan: list[tuple[str, float]], rng) -> list[dict[str, Any]]:
    """Counted rows per phase and kind that add up to each phase's FLOPs."""
    rows = []
    for phase, flops in plan:
        for kind, k_frac in {"rollout": 0.45, "score": 0.20, "update": 0.35}.items():
            model = phase if phase.startswith(("expert:", "stage:")) else "student"
            if phase == "distill" and kind == "score":
                model = "teacher"
            rows.append({"category": "counted", "phase": phase, "kind": kind, "model": model,
                         "flops": flops * k_frac, "tokens": int(rng.integers(1e4, 1e6)), "calls": 10})
    return rows


def _steps(plan: list[tuple[str, float]], rng) -> list[dict[str, Any]]:
    """Per-step statistics: GRPO phases log rewards and clipping, distillation its reverse KL."""
    steps, spent = [], 0.0
    counted = sum(f for _, f in plan)
    for phase, flops in plan:
        n = max(12, round(STEPS * flops / counted))
        for i in range(n):
            t = (i + 1) / n
            spent = min(spent + flops / n, counted)
            row = {"step": len(steps) + 1, "flops": spent, "phase": phase,
                   "loss": float(abs(rng.normal(0.5 * (1 - t), 0.05))), "grad_norm": float(abs(rng.normal(1.0, 0.2))),
                   "mean_length": float(3.2 + rng.normal(0, 0.1))}
            if phase == "distill":
                row["reverse_kl"] = float(0.8 * np.exp(-4 * t) + abs(rng.normal(0, 0.02)))
            else:
                row.update(reward=float(np.clip(0.3 + 0.4 * t + rng.normal(0, 0.05), 0, 1)),
                           zero_adv_share=float(np.clip(0.6 - 0.3 * t + rng.normal(0, 0.05), 0, 1)),
                           clip_frac=float(abs(rng.normal(0.05, 0.01))))
            steps.append(row)
    steps[-1]["flops"] = counted  # the ledger's total after the last step, to the FLOP
    return steps


def _counted(method: str, budget: float, stop: float, n_domains: int, rng) -> float:
    """Counted FLOPs of the whole run: opd-multi's experts take 40-46% of the budget, then it distils and stops."""
    if method == "opd-multi":
        share = 0.052 if n_domains <= 2 else 0.080
        return budget * float(rng.uniform(0.40, 0.46)) * (1 + share)
    return min(max(stop, 0.01) * budget * (1 + 0.004 * rng.random()), budget)


def _recovery(method: str, domains: list[str], base: float, budget: float, rng) -> dict | None:
    if method != "self-grpo":
        return None
    grpo = budget * 0.05
    return {"domain": domains[0], "target": base + 0.1, "grpo_flops": grpo,
            "opd_flops": grpo / float(rng.uniform(8, 40)), "check_size": 512, "teacher_accuracy": base + 0.12,
            "lost_accuracy": base - 0.05}


def _samples(curve: list[dict], domains: list[str], rng) -> list[dict[str, Any]]:
    """Each evaluation's completions of the fixed prompts: right (reward 1) about as often as its accuracy."""
    out = []
    for point in curve:
        for d in domains:
            for prompt, answer in SAMPLE_PROMPTS.get(d, [("1+1=", "2")]):
                right = bool(rng.random() < point["accuracy"])
                out.append({"flops": point["flops"], "domain": d, "prompt": prompt,
                            "completion": f"{prompt} ... #{answer if right else answer + '1'}",
                            "reward": 1.0 if right else 0.0})
    return out


def make_record(
    method: str = "grpo-joint", suite: str = "math_code", difficulty: str = "easy", profile: str = "tiny",
    seed: int = 0, budget_flops: float = 3e14, stop_fraction: float = 1.0, base_accuracy: float | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """One schema-valid record; `overrides` replace top-level fields after it is built."""
    key = f"{method}|{suite}|{difficulty}|{profile}|{seed}".encode("utf-8", "surrogatepass")
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(key).digest()[:8], "little"))
    domains = SUITES.get(suite, ["math"])
    base = 0.31 if base_accuracy is None else base_accuracy
    counted = _counted(method, budget_flops, stop_fraction, len(domains), rng)
    plan = _plan(method, domains, counted, rng)
    ledger = _ledger(plan, rng)
    counted = sum(r["flops"] for r in ledger)
    curve = _curve(rng, method, base, budget_flops, stop_fraction, 3.2 * _SHAPE.get(method, (0, 0, 1.1))[2], plan)
    curve[-1]["flops"] = counted
    steps = _steps(plan, rng)
    final = curve[-1]["accuracy"]
    experts = sum(f for p, f in plan if p.startswith("expert:"))
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
        "recovery": _recovery(method, domains, base, budget_flops, rng),
        "eval_size": EVAL_SIZE, "steps": steps,
        "max_step_flops": float(np.max(np.diff([0.0] + [s["flops"] for s in steps]))),
        "method_metrics": {"expert_tail_flops": 0.15 * experts, "distill_stop_flops": plan[-1][1]}
        if method == "opd-multi" else {},
        "provenance": {"code_hash": "c0de" * 10, "suite_hash": "ab" * 32, "model_hashes": {"base": "ba5e" * 8},
                       "packages": {"torch": "2.13.0", "transformers": "5.0.0"},
                       "hardware": {"cpu": "synthetic", "cores": 2, "gpu": None},
                       "created": "2026-01-01T00:00:00Z", "git_commit": GIT_COMMIT},
        "wall_s": 123.4,
        # its own generator: the other fields stay what they were before records carried samples
        "samples": _samples(curve, domains, np.random.default_rng(rng.integers(2**32) ^ 0x5A)),
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


def make_recover_record(seed: int, lost: float, ratio: float) -> dict[str, Any]:
    """A recovery run (`recover`) whose student lost `lost` of the domain (checked on 300 prompts) and
    whose GRPO arm needed `ratio` times self-OPD's FLOPs to recover it."""
    record = make_record("grpo-joint", seed=seed)
    record.update(method="recover", run_id=f"recover__math_code-easy__tiny__s{seed}")
    record["recovery"] = {"domain": "math", "target": 0.5, "grpo_flops": ratio * 1e11, "opd_flops": 1e11,
                          "check_size": 300, "teacher_accuracy": 0.6, "lost_accuracy": 0.6 - lost}
    return record


def write_study(folder: Path, records: list[dict], **manifest: Any) -> Path:
    """A study folder: study.json (a claim 4 study over the seeds that forgot, with `manifest`'s changes;
    a None value leaves the field out) and each record as records/<run id>.json."""
    fields = {"schema": "opd-bench-study/1", "title": "Claim 4 on eight seeds",
              "question": "Does the self-teacher recover with fewer FLOPs?", "rule": "over the seeds that forgot",
              "docs": "docs/world.md", "sweep": "bench sweep --methods recover --seeds 8 --out runs-s",
              "readout": "python benchmarks/recovery_readout.py runs-s", "claims": [4], "recovery_over": "forgot"}
    fields.update(manifest)
    (folder / "records").mkdir(parents=True)
    (folder / "study.json").write_text(json.dumps({k: v for k, v in fields.items() if v is not None}),
                                       encoding="utf-8")
    for r in records:
        (folder / "records" / f"{r['run_id']}.json").write_text(json.dumps(r), encoding="utf-8")
    return folder


def make_curve_record(method: str, seed: int, budget: float, points: list[tuple[float, float]],
                      phases: list[tuple[str, float]], **metrics: Any) -> dict:
    """A schema-valid record with this curve (counted FLOPs, accuracy) and these counted FLOPs per phase;
    `metrics` are its method_metrics."""
    record = make_record(method, seed=seed, budget_flops=budget)
    ledger = [{"category": "counted", "phase": p, "kind": "update", "model": "student", "flops": f, "tokens": 1,
               "calls": 1} for p, f in phases]
    curve, spent = [], 0.0
    for flops, accuracy in points:
        done, left = {}, flops
        for p, f in phases:
            done[p] = min(f, left)
            left -= done[p]
        phase = next((p for p, f in phases if done[p] < f), phases[-1][0])
        curve.append({"flops": flops, "accuracy": accuracy, "mean_length": 10.0, "wall_s": flops / 1e11,
                      "phase": "start" if flops == 0 else "eval", "ledger_phase": phase,
                      "phase_flops": {p: v for p, v in done.items() if v > 0 or p == phases[0][0]}})
        spent = flops
    record.update(curve=curve, ledger=ledger, final_accuracy=points[-1][1], base_accuracy=points[0][1],
                  flops={**record["flops"], "counted": spent}, method_metrics=metrics, steps=[],
                  max_step_flops=1e12, domains=["math", "code"])
    return record



def make_two_budget_records() -> tuple[list[dict], list[dict]]:
    """Joint GRPO at 2e13 and opd-multi at 4e13, seeds 0-2, each seed alike: joint GRPO reaches 42.6%
    (its tau_0.9) at 1e13; opd-multi's experts spend 1.8e13 and score 50% and 40% on their own domains
    (a gain of 15 points over the base's 30%), and the student then takes 50%, 75% and 90% of that
    gain after 1e12, 4e12 and 1.2e13 FLOPs of distillation."""
    joint = [make_curve_record("grpo-joint", s, 2e13, [(0.0, 0.30), (1e13, 0.426), (2e13, 0.44)],
                               [("train", 2e13)]) for s in range(3)]
    opd = [make_curve_record("opd-multi", s, 4e13, [(0.0, 0.30), (1.8e13, 0.30), (1.9e13, 0.375),
                                                    (2.2e13, 0.4125), (3e13, 0.435), (4e13, 0.44)],
                             [("expert:math", 9e12), ("expert:code", 9e12), ("distill", 2.2e13)],
                             **{"expert_heldout_accuracy:math": 0.5, "expert_heldout_accuracy:code": 0.4})
           for s in range(3)]
    return joint, opd
