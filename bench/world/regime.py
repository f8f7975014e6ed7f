"""A world's regime criteria (docs/world.md, Regime criteria): what the paper's regime needs, what was measured.

Measured values come from two places: the prepared models' own calibration (`bench prepare`: base
pass@1 and pass@8, completion lengths, the teacher's pass@1) and the world's calibration runs
(`benchmarks/calibrate_world.py`, single-method runs only), shipped as
`bench/reference/<profile>-calibration.json`.

    rows = regime_rows(profile, prepared)      # [{criterion, needs, measured, met}], met None = reported only
    print("\\n".join(format_regime(profile, prepared)))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.world import reference
from bench.world.prepare import Prepared
from bench.world.profiles import PROFILES

CALIBRATION_ROOT = reference.ROOT


def calibration_path(profile_name: str) -> Path:
    return CALIBRATION_ROOT / f"{profile_name}-calibration.json"


def load_calibration(profile_name: str) -> dict | None:
    path = calibration_path(profile_name)
    return json.loads(path.read_text()) if path.exists() else None


def _per_domain(values: dict[str, float | None], fmt: str) -> str:
    return ", ".join(f"{d} {'—' if v is None else format(v, fmt)}" for d, v in values.items())


def _row(criterion: str, needs: str, measured: str, met: bool | None) -> dict[str, Any]:
    return {"criterion": criterion, "needs": needs, "measured": measured, "met": met}


def _calibration_rows(c: dict) -> list[dict]:
    rows = []
    share = c.get("completion_share")
    if share is not None:
        rows.append(_row("completion share of update tokens", ">= 60%", f"{share:.0%}", share >= 0.6))
    tokens, position = c.get("informative_tokens") or {}, c.get("max_position_share") or {}
    if tokens:
        rows.append(_row("informative tokens per sample at the start of distillation", ">= 3 (|log-ratio| > 0.5 nat)",
                         _per_domain(tokens, ".1f"), all(v is not None and v >= 3 for v in tokens.values())))
        rows.append(_row("largest share of the signal on one position", "<= 50%", _per_domain(position, ".0%"),
                         all(v is not None and v <= 0.5 for v in position.values())))
    zero = c.get("zero_adv_share") or {}
    if zero:
        rows.append(_row("GRPO groups with zero advantage (expert training)", "< 50% per domain",
                         _per_domain(zero, ".0%"), all(v is not None and v < 0.5 for v in zero.values())))
    plateau = c.get("plateau") or {}
    if plateau:
        parts, met = [], True
        for d, runs in plateau.items():
            grpo = [runs.get(f"grpox{m}", {}).get("steps") for m in ("0.5", "1", "2")]
            opd = [runs.get(f"opdx{m}", {}).get("steps") for m in ("0.5", "1", "2")]
            parts.append(f"{d} GRPO {'/'.join(map(str, grpo))} OPD {'/'.join(map(str, opd))}")
            met = met and all(g is not None and o is not None and o < g for g, o in zip(grpo, opd))
        rows.append(_row("steps to plateau at lr x0.5/x1/x2", "OPD fewer than GRPO at every rate", "; ".join(parts),
                         met))
    transfer = c.get("transfer") or {}
    if transfer:
        ratios = {}
        for a, row in transfer.items():
            own = row[a]
            off = max((abs(v) for b, v in row.items() if b != a), default=0.0)
            ratios[a] = off / own if own > 0 else None
        rows.append(_row("transfer: largest change on another domain / own gain", "< 1/3 for every domain",
                         _per_domain(ratios, ".2f"), all(r is not None and r < 1 / 3 for r in ratios.values())))
    gap = c.get("joint_vs_expert") or {}
    if gap:
        rows.append(_row("joint GRPO minus expert, per domain (points)", "reported",
                         _per_domain({d: 100 * v for d, v in gap.items()}, "+.1f"), None))
    stop = c.get("stop_rule")
    if stop:
        chosen = stop["threshold"]
        fires = stop["fires"].get(repr(chosen), {}) if chosen is not None else {}
        measured = "none of the grid" if chosen is None else f"{chosen:g} nat; fires at step " + ", ".join(
            f"{d} {'never' if f is None else f} (plateau {stop['plateau_steps'][d]})" for d, f in fires.items())
        rows.append(_row(f"distillation stopping threshold (per-token reverse KL, {stop['patience']} steps)",
                         "the largest that fires no earlier than every domain's OPD plateau", measured, None))
        reward = stop.get("reward_rule")
        if reward:
            fired = ", ".join(f"{d} {'never' if f is None else f} (plateau {stop['plateau_steps'][d]})"
                              for d, f in reward["fires"].items())
            rows.append(_row("distillation accuracy rule (student's sample reward reaches its expert's)",
                             "kept if it fires no earlier than every domain's OPD plateau",
                             f"{'kept' if reward['kept'] else 'off'}; fires at step {fired}", None))
    rollout = c.get("rollout_share")
    if rollout is not None:
        rows.append(_row("rollout share of counted FLOPs", ">= 20%", f"{rollout:.0%}", rollout >= 0.2))
    return rows


def regime_rows(profile: Any, prepared: Any, base_hash: str | None = None) -> list[dict]:
    """The regime table for a prepared profile (its own calibration plus the shipped calibration runs);
    its base's weights hash is recomputed from the model, unless given (`base_hash`)."""
    calibration = {r["domain"]: r for r in prepared.calibration()}
    lengths = {d: r["base_length"] for d, r in calibration.items()}
    suite_means = [sum(lengths[d] for d in s) / len(s) for s in (("math", "code"), tuple(lengths))
                   if set(s) <= set(lengths)]
    long_enough = all(m >= 30 for m in suite_means) and all(v >= 20 for v in lengths.values())
    rows = [_row("completion length (base, greedy, tokens)", "suite mean >= 30, every domain >= 20",
                 _per_domain(lengths, ".1f"), long_enough)]
    pass1 = {d: r["base_pass1"] for d, r in calibration.items()}
    near40 = any(0.3 <= v <= 0.5 for v in pass1.values())
    near12 = any(0.08 <= v <= 0.18 for v in pass1.values())
    rows.append(_row("base pass@1", "one domain near 40%, one near 10-15%", _per_domain(pass1, ".0%"),
                     near40 and near12))
    pass8 = {d: r["base_pass8"] for d, r in calibration.items()}
    rows.append(_row("base pass@8", "well above pass@1", _per_domain(pass8, ".0%"),
                     all(pass8[d] >= 1.5 * pass1[d] and pass8[d] > pass1[d] + 0.1 for d in pass1)))
    shipped = load_calibration(profile.name)
    if shipped is None:
        rows.append(_row("calibration runs", "benchmarks/calibrate_world.py", "not run for this profile", None))
        return rows
    c = shipped["criteria"]
    rows += _calibration_rows(c)
    teacher = {d: r.get("teacher_pass1") for d, r in calibration.items()}
    ceiling = c.get("expert_ceiling") or {}
    if ceiling and all(v is not None for v in teacher.values()):
        rows.append(_row("external teacher pass@1 vs the student's GRPO ceiling", "10+ points above on every domain",
                         ", ".join(f"{d} {teacher[d]:.0%} vs {ceiling.get(d, 0):.0%}" for d in teacher),
                         all(teacher[d] >= ceiling.get(d, 1.0) + 0.1 for d in teacher)))
    if base_hash is None:
        base_hash = prepared.model_hashes().get("base")
    if shipped.get("model_hashes", {}).get("base") != base_hash:
        rows.append(_row("calibration base", "the prepared base", "measured on another base (hash differs)", False))
    return rows


def format_regime(profile: Any, prepared: Any) -> list[str]:
    """The regime table as aligned text lines."""
    rows = regime_rows(profile, prepared)
    width = max(len(r["criterion"]) for r in rows)
    needs = max(len(r["needs"]) for r in rows)
    mark = {True: "met", False: "NOT MET", None: ""}
    lines = [f"regime criteria ({profile.name}; docs/world.md)",
             f"{'criterion':<{width}}  {'needs':<{needs}}  {'':7}  measured"]
    lines += [f"{r['criterion']:<{width}}  {r['needs']:<{needs}}  {mark[r['met']]:7}  {r['measured']}" for r in rows]
    return lines


def shipped_worlds() -> list[dict[str, Any]]:
    """The regime table of every profile with shipped reference models, for the site's findings page.

    Read from the shipped files only (the reference's prepared.json and external.json, and the
    calibration JSON): building a report never trains or loads a model.
    """
    worlds = []
    for name, profile in PROFILES.items():
        folder = reference.ROOT / name
        if not (folder / "prepared.json").exists():
            continue
        prepared = Prepared(folder, json.loads((folder / "prepared.json").read_text()), profile)
        base_hash = prepared.info["model_hashes"]["base"]  # the manifest's files: never loaded here
        worlds.append({"profile": name, "description": profile.description,
                       "rows": regime_rows(profile, prepared, base_hash)})
    return worlds
