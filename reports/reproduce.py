"""How to reproduce what the site shows: the command of each run, the commits of the records, the site's command.

    run_command(record)      -> "OMP_NUM_THREADS=1 bench run --method opd-multi ... --set lr=0.0005 ..."
    commits(records)         -> [{"commit": "560b4b6…", "records": 33}, {"commit": None, "records": 2}]
    site_command(records)    -> "bench reproduce --seeds 3 --profile direct --profile tiny" (seeds 0-2 recorded)

A run's command names every field of the record's resolved `method_config` with `--set`, not only
those that differ from today's defaults: defaults may change, the record's values do not. It sets
the torch thread count the run had (`provenance.hardware.torch_threads`), since a CPU's float sums,
and so a run's last digits, change with it, and how its independent phases ran
(`provenance.phase_executor`): experts trained one after another share one sampling stream, experts
trained side by side each have their own. Every
argument is quoted for a POSIX shell (`shlex.quote`), since names and config values are untrusted:
a value such as `$(rm -rf ~)` is printed as one quoted word, and Jinja escapes it for the page.
"""

from __future__ import annotations

import shlex
from collections import Counter
from typing import Any

SITE_COMMAND = "bench reproduce"  # the reference leaderboard's sweep: every method, seeds 0 to n-1, per world
DEFAULT_SEEDS = 3  # a site with no records names the reference board's


def site_seeds(records: list[dict[str, Any]]) -> int:
    """How many seeds the site's command runs: 0 to the largest seed of its records."""
    seeds = [int(r["seed"]) for r in records if isinstance(r.get("seed"), int)]
    return max(seeds) + 1 if seeds else DEFAULT_SEEDS


def site_command(records: list[dict[str, Any]]) -> str:
    """The command that rebuilds every record of the site: SITE_COMMAND with its seeds and each world it
    shows (whether it makes exactly these records is for the engine to check: `bench report` does)."""
    worlds = sorted({str(r["profile"]) for r in records if r.get("profile")})
    # records made by Ray tasks: their phases ran as tasks too, so the command that makes them says so
    ray = any((r.get("provenance") or {}).get("phase_executor") == "ray" for r in records)
    return " ".join([SITE_COMMAND, f"--seeds {site_seeds(records)}",
                     *(f"--profile {shlex.quote(w)}" for w in worlds), *(["--executor ray"] if ray else [])])


def seeds_text(n: int) -> str:
    """"seed 0", "seeds 0 and 1", "seeds 0, 1 and 2", "seeds 0-9"."""
    if n == 1:
        return "seed 0"
    if n <= 3:
        return "seeds " + ", ".join(map(str, range(n - 1))) + f" and {n - 1}"
    return f"seeds 0-{n - 1}"


def budget_text(flops: float) -> str:
    """The shortest text that reads back as exactly this budget: 2e12, 3.5e13, 123456789."""
    for digits in range(1, 18):
        text = f"{flops:.{digits}g}"
        if float(text) == flops:
            return text.replace("e+", "e")
    return repr(float(flops))  # pragma: no cover


def _set_value(value: Any) -> str | None:
    """A config value as `bench run --set` parses it (bool, int, float, comma-separated tuple, str, `none`
    for null); None for a value it cannot express (a mapping, a nested list)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value) if not isinstance(value, float) else repr(value)
    if isinstance(value, list) and all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in value):
        return ",".join(str(v) for v in value)
    return None


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested method config as the dotted keys `--set` takes (`distill.lr`)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _settings_flags(record: dict[str, Any]) -> str:
    """The flags of the record's rollout engine and settings (none where it has none): `--max-new-tokens`
    where its two caps are equal (the flag sets both; where they differ, the run took its world's)."""
    q, out = shlex.quote, []
    rollout = (record.get("provenance") or {}).get("rollout")
    if isinstance(rollout, str) and rollout:
        out.append(f"--rollout {q(rollout)}")
    s = record.get("settings")
    if not isinstance(s, dict):
        return "".join(f" {flag}" for flag in out)
    if s.get("device") not in (None, "cpu"):
        out.append(f"--device {q(str(s['device']))}")
    if isinstance(s.get("max_new_tokens"), int) and s.get("max_new_tokens") == s.get("eval_max_new_tokens"):
        out.append(f"--max-new-tokens {s['max_new_tokens']}")
    if isinstance(s.get("eval_every"), (int, float)):
        out.append(f"--eval-every {s['eval_every']!r}")
    if isinstance(s.get("eval_early"), list):
        out.append(f"--eval-early {q(','.join(repr(float(f)) for f in s['eval_early']))}")
    if isinstance(s.get("distill_eval_every"), int):
        out.append(f"--distill-eval-every {s['distill_eval_every']}")
    return "".join(f" {flag}" for flag in out)


def run_command(record: dict[str, Any]) -> dict[str, Any]:
    """The `bench run` command that reproduces a record, and the config fields it cannot pass.

    Returns:
        {"text": the command, three lines joined by backslash continuations (every --set on the last),
        "unset": [keys of method_config whose values `--set` cannot express (the page points to the
        config block for those)], "needs": [the model folders the command must be given, which the
        record names by weights hash only: an hf run's `--model` and `--external`, any run's named
        `--teacher`]}.
    """
    q = shlex.quote
    # the torch thread count the run had: a CPU's sums add up in another order at another count
    threads = ((record.get("provenance") or {}).get("hardware") or {}).get("torch_threads")
    env = f"OMP_NUM_THREADS={int(threads)} " if isinstance(threads, int) and threads > 0 else ""
    # a plugin as the run named it (path/to/file.py:Class, or its entry point); a built-in by its name
    method = (record.get("provenance") or {}).get("method_source") or record["method"]
    parts = [f"{env}bench run --method {q(str(method))} --suite {q(record['suite'])} "
             f"--difficulty {q(record['difficulty'])}",
             f"--profile {q(record['profile'])} --seed {int(record['seed'])} "
             f"--budget {budget_text(float(record['budget_flops']))}"]
    if record.get("eval_size") is not None:
        parts[-1] += f" --eval-size {int(record['eval_size'])}"
    executor = (record.get("provenance") or {}).get("phase_executor")
    if isinstance(executor, str) and executor:
        parts[-1] += f" --phase-executor {q(executor)}"
    parts[-1] += _settings_flags(record)
    unset, sets = [], []
    config = _flatten(record.get("method_config") or {})
    for key in sorted(config, key=str):
        value = _set_value(config[key])
        if value is None:
            unset.append(str(key))
        else:
            sets.append(f"--set {q(f'{key}={value}')}")
    if sets:
        parts.append(" ".join(sets))  # one line: the page wraps it, a shell reads it as one
    return {"text": " \\\n  ".join(parts), "unset": unset, "needs": _models_needed(record)}


def _models_needed(record: dict[str, Any]) -> list[str]:
    """The model folders a record's command needs but cannot name (a record keeps hashes, not paths)."""
    hashes = (record.get("provenance") or {}).get("model_hashes") or {}
    if not isinstance(hashes, dict):
        return []
    own = {"base": "--model", "external": "--external"} if record.get("profile") == "hf" else {}
    needs = [f"{flag} FOLDER (weights hash {hashes.get(name, 'not recorded')})" for name, flag in own.items()
             if name == "base" or name in hashes]
    needs += [f"--teacher {name}=FOLDER (weights hash {value})" for name, value in sorted(hashes.items())
              if name not in ("base", "external")]
    return needs


def git_commit(record: dict[str, Any]) -> str | None:
    """The record's `provenance.git_commit` (a string), or None."""
    commit = (record.get("provenance") or {}).get("git_commit")
    return commit if isinstance(commit, str) and commit else None


def commits(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The commits the records were made at, most records first: [{"commit": str or None, "records": n}]."""
    counts = Counter(git_commit(r) for r in records)
    order = sorted(counts.items(), key=lambda x: (x[0] is None, -x[1], x[0] or ""))
    return [{"commit": c, "records": n} for c, n in order]

