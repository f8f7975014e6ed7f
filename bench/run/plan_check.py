"""Does a command, resolved by today's code, plan exactly a set of records? `bench report` asks it of
the site's own `bench reproduce` command and of each study's `bench sweep` command, so that a
reference number whose command does not make it is seen on the site, not discovered by accident.

    check = plan_check(configs, records)   # {"differences": [...], "added": [...]}: both empty when the
                                           # plan is the records, run for run

Each planned run is resolved as `bench run` resolves it (its world's calibrated defaults, then its
`--set` overrides) and compared with the record of its run id on what makes the run: the method and
its whole resolved config, suite, difficulty, suite hash, profile, seed, budget and held-out prompts
per domain; its settings (token caps, evaluation schedule, kind of device); the world's version;
and, where the world ships its models (bench/reference), the hash of the base, and of the external
teacher where the record names one; and the rollout engine. Where, when and on what a run was made
(times, hardware, commits) is not compared. How its independent phases drew their samples is
(`phase_streams`: opd-multi's experts one after another share one stream, side by side each has
its own, and the numbers differ; bench/run/phases.py): a record whose phases had their own streams
is not made by a command that runs them one after another. The converse is not decided here: a
parallel executor runs the phases one after another where the budget ends inside them. A config
option the record lacks (added since it was made) is listed apart and, as `bench compare` reads it,
never decides.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.run.config import ABSENT, RunConfig, dotted
from bench.run.record import settings as record_settings
from bench.run.runner import Runner
from bench.world import reference

FIELDS = ("method", "method_config", "suite", "difficulty", "suite_hash", "profile", "seed", "budget_flops",
          "eval_size", "settings")
# a record that lacks one of these lacks what makes it, not an option added since: a difference
_NEVER_ABSENT = frozenset({*FIELDS, "world_version", "model_hashes.base"})


def _what_makes(fields: dict[str, Any], world_version: Any, rollout: Any, hashes: dict[str, Any]) -> dict[str, Any]:
    out = dotted({name: fields.get(name, ABSENT) for name in FIELDS})
    out["world_version"], out["rollout"] = world_version, rollout
    out.update({f"model_hashes.{name}": value for name, value in hashes.items()})
    return out


def plan_check(configs: list[RunConfig], records: list[dict[str, Any]]) -> dict[str, list[str]]:
    """How the runs `configs` plan differ from `records`, one line each.

    Returns:
        {"differences": a planned run with no record, a record no config plans, or a value that makes a
        run and differs, or that its record has and the plan lacks ("<run id>: <key> is X in its record,
        Y at this code"); "added": the values the plan sets and a record lacks, a config option added
        since it was made ("<key> = Y", each key once, with how many records lack it). As `bench
        compare` reads two records, an added key never decides: its effect, if any, shows in the
        values both have. Both empty: the plan is the records, run for run.}
    Raises:
        RunError (bench.errors): a config that cannot be resolved (unknown method, bad override, ...).
    """
    runners = [Runner(c, progress=False) for c in configs]
    planned = {runner.run_id: runner for runner in runners}
    by_id = {r["run_id"]: r for r in records}
    # two commands (or one) that plan one run id twice would make one run over the other
    out = [f"{rid}: planned {n} times" for rid, n in sorted(Counter(r.run_id for r in runners).items()) if n > 1]
    out += [f"{rid}: planned by the command, but there is no record of it" for rid in sorted(set(planned) - set(by_id))]
    out += [f"{rid}: a record the command does not plan" for rid in sorted(set(by_id) - set(planned))]
    added: dict[str, list[Any]] = {}
    shipped_by_world = {p: reference.shipped_hashes(p) for p in {r.config.profile for r in planned.values()}}
    for rid in sorted(set(planned) & set(by_id)):
        runner, record = planned[rid], by_id[rid]
        provenance = record.get("provenance") or {}
        recorded_hashes = provenance.get("model_hashes") or {}
        shipped = shipped_by_world[runner.config.profile]
        # the base always, where shipped; the teacher where the record names one (a run may not load it)
        names = [n for n in shipped if n == "base" or n in recorded_hashes]
        want = _what_makes({**runner.fingerprint(), "settings": record_settings(runner.config)},
                           runner.profile.world_version, runner.config.rollout,
                           {n: shipped[n] for n in names})
        have = _what_makes(record, provenance.get("world_version", ABSENT), provenance.get("rollout", ABSENT),
                           {n: recorded_hashes.get(n, ABSENT) for n in names})
        for key in sorted(set(want) | set(have)):
            mine, theirs = want.get(key, ABSENT), have.get(key, ABSENT)
            if theirs == ABSENT and mine != ABSENT and key not in _NEVER_ABSENT:
                added.setdefault(key, []).append(mine)
            elif mine != theirs:
                out.append(f"{rid}: {key} is {theirs!r} in its record, {mine!r} at this code")
        streams = record.get("phase_streams")
        if streams in ("own", "mixed") and runner.config.phase_executor == "sequential":
            out.append(f"{rid}: its phases drew samples side by side ({streams!r} streams) in its record, one "
                       "after another at this command (phase executor sequential)")
    return {"differences": out,
            "added": [f"{key} = {', '.join(dict.fromkeys(map(repr, values)))} ({len(values)} of "
                      f"{len(by_id)} records lack it)" for key, values in added.items()]}
