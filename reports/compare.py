"""Does a run reproduce a reference record? (`bench compare`; docs/records.md, "Comparing a run with a reference")

A record is matched to the reference of the same method, suite, difficulty, profile and seed, and the
two are read in three parts:

- **inputs**, what defines the experiment: the budget, the method's resolved config, the suite's
  content hash, the weights hashes of the base and the teachers, the world's version, the
  evaluation size, the rollout engine, the run's settings (token caps, evaluation schedule, kind
  of device) and how a method's independent phases drew their samples (`phase_streams`: one stream
  one after another, or one each side by side). Records whose inputs differ are another experiment,
  never a failed reproduction, and their outcomes are not compared.
- **environment**, what may change the last digits: package versions, the CPU or GPU, torch's
  thread count and the phase executor (whose effect on the numbers is `phase_streams`, an input).
  A CPU's float sums follow its kernels and thread count, and a changed digit changes the samples drawn after it, so across environments a run can
  differ in every number (docs/benchmarks.md). Shown where it differs; never a verdict by itself.
- **outcome**, everything else a record holds (ledger, curve, step trace, accuracies, FLOP totals,
  recovery, the method's own figures), compared value for value, exactly. Times are left out: the
  record's and the curve's `wall_s`, the ledger rows' `seconds` and the throughput figures; so is
  the run's name (`run_id`, which `--run-name` sets).

A key only one record has (`unshared`) is listed and never decides: a config option or a record
field added since the older record was made, a model hash taken once the model was built. Its
effect, if any, shows in the values both records have. A field the reference has and the run lacks
is a difference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reports.records import SOURCE_KEY

MATCH_KEY = ("method", "suite", "difficulty", "profile", "seed")
TIME_KEYS = frozenset({"wall_s", "seconds"})  # wall-clock fields, at any depth of the outcome
NOT_OUTCOME = frozenset({"provenance", "throughput", "run_id", SOURCE_KEY})  # run_id: a name (`--run-name`)
INPUT_FIELDS = ("budget_flops", "method_config", "suite_hash", "suite_version", "domains", "eval_size", "settings",
                "phase_streams")
INPUT_PROVENANCE = ("model_hashes", "world_version", "rollout")
ENVIRONMENT_PROVENANCE = ("packages", "hardware", "phase_executor")
ABSENT = "(absent)"


@dataclass(frozen=True)
class Difference:
    path: str  # `curve[3].accuracy`
    here: Any
    reference: Any


@dataclass
class Comparison:
    """One record against its reference: the differences of each part (inputs first)."""

    record: dict[str, Any]
    reference: dict[str, Any]
    inputs: list[Difference] = field(default_factory=list)
    environment: list[Difference] = field(default_factory=list)
    outcome: list[Difference] = field(default_factory=list)
    unshared: list[Difference] = field(default_factory=list)  # one side only: never decides

    @property
    def verdict(self) -> str:
        """`equal`, `differs` (same inputs, another outcome) or `other inputs` (another experiment)."""
        if self.inputs:
            return "other inputs"
        return "differs" if self.outcome else "equal"

    @property
    def label(self) -> str:
        return label(self.record)


def label(record: dict[str, Any]) -> str:
    """`opd-multi math_code-easy tiny s0`."""
    return f"{record['method']} {record['suite']}-{record['difficulty']} {record['profile']} s{record['seed']}"


def differences(here: Any, reference: Any, path: str = "") -> list[Difference]:
    """Every leaf where `here` and `reference` differ, in document order (exact equality)."""
    if isinstance(here, dict) and isinstance(reference, dict):
        found = []
        for key in [*here, *(k for k in reference if k not in here)]:
            sub = f"{path}.{key}" if path else str(key)
            found += differences(here.get(key, ABSENT), reference.get(key, ABSENT), sub)
        return found
    if isinstance(here, list) and isinstance(reference, list):
        found = []
        for i in range(max(len(here), len(reference))):
            a = here[i] if i < len(here) else ABSENT
            b = reference[i] if i < len(reference) else ABSENT
            found += differences(a, b, f"{path}[{i}]")
        return found
    # a bool is an int in Python (True == 1), which a record's types should not blur
    same = here == reference and isinstance(here, bool) == isinstance(reference, bool)
    return [] if same else [Difference(path, here, reference)]


def _drop_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_times(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [_drop_times(v) for v in value]
    return value


def outcome(record: dict[str, Any]) -> dict[str, Any]:
    """The record less its inputs, provenance and times; ledger rows in key order (processes that ran
    side by side may append them in either order)."""
    kept = {k: v for k, v in record.items() if k not in NOT_OUTCOME and k not in INPUT_FIELDS}
    if isinstance(kept.get("ledger"), list):
        kept["ledger"] = sorted(kept["ledger"], key=lambda r: tuple(str(r.get(k)) for k in
                                                                    ("category", "phase", "kind", "model")))
    return _drop_times(kept)


def inputs(record: dict[str, Any]) -> dict[str, Any]:
    """The record's inputs; a key it lacks is ABSENT (unshared where the other has it, never a difference)."""
    provenance = record.get("provenance") or {}
    return {**{k: record.get(k, ABSENT) for k in INPUT_FIELDS},
            "provenance": {k: provenance.get(k, ABSENT) for k in INPUT_PROVENANCE}}


def environment(record: dict[str, Any]) -> dict[str, Any]:
    provenance = record.get("provenance") or {}
    return {"provenance": {k: provenance.get(k) for k in ENVIRONMENT_PROVENANCE}}


def compare(record: dict[str, Any], reference: dict[str, Any]) -> Comparison:
    found = Comparison(record, reference, environment=differences(environment(record), environment(reference)))
    for d in differences(inputs(record), inputs(reference)):
        # an option added (or dropped) since, a model built by then: its effect shows in the outcome
        (found.unshared if _key_on_one_side(d, d.here, d.reference) else found.inputs).append(d)
    if not found.inputs:
        for d in differences(outcome(record), outcome(reference)):
            # a field the reference's code did not write yet; one it wrote and this run lacks differs
            (found.unshared if _key_on_one_side(d, d.reference) else found.outcome).append(d)
    return found


def _key_on_one_side(d: Difference, *sides: Any) -> bool:
    """A mapping's key that one of `sides` lacks (a list item that one side lacks is a difference:
    a longer curve, another domain)."""
    return not d.path.endswith("]") and ABSENT in sides


def match(records: list[dict[str, Any]], references: list[dict[str, Any]]
          ) -> tuple[list[Comparison], list[dict[str, Any]]]:
    """Each record against the reference of its method, suite, difficulty, profile and seed; returns
    the comparisons and the records that have no reference."""
    by_key = {tuple(r.get(k) for k in MATCH_KEY): r for r in references}
    found, unmatched = [], []
    for record in records:
        reference = by_key.get(tuple(record.get(k) for k in MATCH_KEY))
        if reference is None:
            unmatched.append(record)
        else:
            found.append(compare(record, reference))
    return found, unmatched


def short(value: Any, width: int = 60) -> str:
    """A value as one short line (configs and lists can be long)."""
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def summary_line(comparison: Comparison) -> str:
    """What one comparison found, in one line: its size where equal, else the first difference,
    how many there are, and the final accuracies."""
    r = comparison.record
    if comparison.verdict == "equal":
        return (f"ledger {len(r.get('ledger') or [])} rows, curve {len(r.get('curve') or [])} points, "
                f"{len(r.get('steps') or [])} steps")
    diffs = comparison.inputs or comparison.outcome
    first = diffs[0]
    text = f"{first.path}: {short(first.here)} here, {short(first.reference)} in the reference"
    if len(diffs) > 1:
        text += f" ({len(diffs)} values differ)"
    if comparison.verdict == "differs":
        ref = comparison.reference
        text += f"; final accuracy {100 * r['final_accuracy']:.2f}% here, {100 * ref['final_accuracy']:.2f}%"
    return text
