"""The FLOP ledger: every FLOP a run spends, by category, phase, kind and model (docs/design.md, FLOP accounting).

Charges come from metered models (`bench.accounting.metering`), never from methods' own bookkeeping. Which
phase and category a charge belongs to is ambient state set with context managers, so that the runner
can mark an evaluation as `eval` and a method can mark its expert training as `expert:math` without
either having to thread arguments through the model call:

    with ledger_context(phase="expert:math"):
        loss = policy(...)          # charged to counted / expert:math / update / student

The ledger is append-only on disk (JSON lines, one aggregated row per key per flush) and can be
truncated back to a checkpoint's row count on resume.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import math
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import store
from bench.errors import CorruptRunError

KINDS = ("rollout", "score", "update")
CATEGORIES = ("counted", "shared", "external", "eval")

_phase: contextvars.ContextVar[str] = contextvars.ContextVar("phase", default="train")
_category: contextvars.ContextVar[str] = contextvars.ContextVar("category", default="counted")
_kind: contextvars.ContextVar[str | None] = contextvars.ContextVar("kind", default=None)
_evaluation: contextvars.ContextVar[bool] = contextvars.ContextVar("evaluation", default=False)


@contextlib.contextmanager
def ledger_context(
    *, phase: str | None = None, category: str | None = None, kind: str | None = None
) -> Iterator[None]:
    """Set the phase, category and/or kind that charges inside the block are booked to."""
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"unknown ledger category {category!r}; allowed: {', '.join(CATEGORIES)}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown ledger kind {kind!r}; allowed: {', '.join(KINDS)}")
    tokens = []
    for var, value in ((_phase, phase), (_category, category), (_kind, kind)):
        if value is not None:
            tokens.append((var, var.set(value)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


_watchers: list[Callable[[bool], None]] = []  # `watch_evaluations`


@contextlib.contextmanager
def evaluation() -> Iterator[None]:
    """Book the block as a held-out evaluation (`eval`), and tally it in `Ledger.evaluation_flops`:
    the one kind of uncounted work `bench check-adapter` accepts during a run."""
    watchers = [] if _evaluation.get() else list(_watchers)
    token = _evaluation.set(True)
    try:
        for watcher in watchers:
            watcher(True)
        try:
            with ledger_context(category="eval", phase="eval"):
                yield
        finally:
            for watcher in watchers:
                watcher(False)
    finally:
        _evaluation.reset(token)


@contextlib.contextmanager
def watch_evaluations(watcher: Callable[[bool], None]) -> Iterator[None]:
    """Call `watcher(True)` as each outermost `evaluation()` begins and `watcher(False)` as it ends,
    inside the block (`bench check-adapter` splits its instrumented count there, and sees who began
    each evaluation). A watcher that raises on entering stops the evaluation before any work."""
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)


def current_phase() -> str:
    return _phase.get()


def current_category() -> str:
    return _category.get()


def current_kind(default: str) -> str:
    return _kind.get() or default


@dataclass(frozen=True)
class Key:
    category: str
    phase: str
    kind: str
    model: str


@dataclass
class Entry:
    flops: float = 0.0
    tokens: int = 0
    calls: int = 0
    audit_flops: float = 0.0  # instrumented count, where an audit ran over this work
    seconds: float = 0.0  # wall time of the work (`Ledger.clock`): achieved FLOP/s = flops / seconds


def _row(key: Key, entry: Entry) -> dict:
    row = {**vars(key), "flops": entry.flops, "tokens": entry.tokens, "calls": entry.calls}
    if entry.audit_flops:
        row["audit_flops"] = entry.audit_flops
    if entry.seconds:
        row["seconds"] = round(entry.seconds, 6)
    return row


def _sorted_rows(table: dict[Key, Entry]) -> list[dict]:
    return [_row(k, e) for k, e in sorted(table.items(), key=lambda kv: tuple(vars(kv[0]).values()))]


def _add(entry: Entry, row: dict) -> None:
    entry.flops += float(row["flops"])
    entry.tokens += int(row["tokens"])
    entry.calls += int(row.get("calls", 1))
    entry.audit_flops += float(row.get("audit_flops", 0.0))
    entry.seconds += float(row.get("seconds", 0.0))


class Ledger:
    """Aggregated FLOP charges, optionally mirrored to an append-only JSONL file."""

    def __init__(self, path: Path | None = None, keep_rows: int | None = None) -> None:
        """`keep_rows`: resume from a checkpoint that had flushed that many rows; rows after it,
        a torn last line from a kill during a flush included, are dropped before reading."""
        self.path = Path(path) if path is not None else None
        self._totals: dict[Key, Entry] = defaultdict(Entry)
        self._pending: dict[Key, Entry] = defaultdict(Entry)
        self.rows_written = 0
        self.evaluation_flops = 0.0  # charged inside `evaluation()` by this process (not saved)
        self._method_thread: int | None = None  # while a method runs (`method_runs`): the thread it runs in
        self._engine_depth = 0  # inside `engine_booking`
        if self.path is not None and self.path.exists():
            if keep_rows is not None:
                self._cut(keep_rows)
            self._load()

    # -- charging -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def method_runs(self) -> Iterator[None]:
        """While a method runs (the runner's `run` and each parallel phase's), the ledger refuses what
        would spend FLOPs outside the budget: a charge booked `shared`, `external` or `eval` outside
        the engine's own work (`engine_booking`), and a charge from a thread other than the method's,
        which would not be in the method's phase (context variables stay in their thread). Backward
        passes name the phase and category of their forward, and may run elsewhere."""
        previous, self._method_thread = self._method_thread, threading.get_ident()
        try:
            yield
        finally:
            self._method_thread = previous

    @contextlib.contextmanager
    def engine_booking(self) -> Iterator[None]:
        """The engine's own uncounted work while a method runs: its held-out evaluations (the
        runner's and `ctx.evaluate`'s) and the loading of a teacher, whose training is booked
        `external`. It is this ledger's, which a method reaches through no public name."""
        self._engine_depth += 1
        try:
            yield
        finally:
            self._engine_depth -= 1

    def _refuse_outside_budget(self, key: Key, ambient: bool) -> None:
        if ambient and threading.get_ident() != self._method_thread:
            raise RuntimeError(f"{key.kind} of {key.model!r} charged from a thread the method started: its phase "
                               "and category are not the method's; run a method's work in the method's own thread")
        if key.category != "counted" and not self._engine_depth:
            raise RuntimeError(f"{key.kind} of {key.model!r} booked {key.category!r} while the method runs: a "
                               "method's work is counted; only the engine's evaluations (ctx.evaluate) and a "
                               "teacher's preparation are booked otherwise")

    def charge(
        self,
        *,
        model: str,
        flops: float,
        tokens: int,
        kind: str,
        phase: str | None = None,
        category: str | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown ledger kind {kind!r}; allowed: {', '.join(KINDS)}")
        if not (0 <= flops < math.inf and tokens >= 0):
            raise ValueError(f"a ledger charge is a finite, non-negative count; got {flops!r} FLOPs, {tokens!r} tokens")
        key = Key(category or current_category(), phase or current_phase(), kind, model)
        if self._method_thread is not None:
            self._refuse_outside_budget(key, ambient=phase is None)
        if _evaluation.get():
            if kind == "update":  # an evaluation trains nothing: a step here would escape the budget
                raise RuntimeError(f"a training update of {model!r} inside a held-out evaluation; "
                                   "train outside `evaluate`, where its FLOPs are counted")
            self.evaluation_flops += flops
        for table in (self._totals, self._pending):
            entry = table[key]
            entry.flops += flops
            entry.tokens += tokens
            entry.calls += 1

    def add_audit(self, *, model: str, kind: str, audit_flops: float, phase: str | None = None) -> None:
        """Record an instrumented count next to the analytic charge for the same work."""
        key = Key(current_category(), phase or current_phase(), kind, model)
        for table in (self._totals, self._pending):
            table[key].audit_flops += audit_flops

    @contextlib.contextmanager
    def clock(self, *, model: str, kind: str, device: object = None) -> Iterator[None]:
        """Add the block's wall time to (current category, current phase, `kind`, `model`).

        On CUDA the block is bracketed by synchronisations, so that queued kernels count where they
        were launched; the cost is one sync per call site (a rollout, a score, an update), not per
        forward. Nested clocks on the same key would double count: clock the outermost block only.
        """
        cuda = getattr(device, "type", str(device)) == "cuda"
        if cuda:
            import torch

            torch.cuda.synchronize(device)
        start = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                torch.cuda.synchronize(device)
            elapsed = time.perf_counter() - start
            key = Key(current_category(), current_phase(), kind, model)
            for table in (self._totals, self._pending):
                table[key].seconds += elapsed

    def throughput(self, category: str = "counted") -> dict[str, dict[str, float]]:
        """{kind: {flops, seconds, flop_per_s}} over the clocked rows of `category`."""
        out: dict[str, dict[str, float]] = {}
        for k, e in self._totals.items():
            if k.category != category or not e.seconds:
                continue
            row = out.setdefault(k.kind, {"flops": 0.0, "seconds": 0.0})
            row["flops"] += e.flops
            row["seconds"] += e.seconds
        for row in out.values():
            row["flop_per_s"] = row["flops"] / row["seconds"] if row["seconds"] else 0.0
        return out

    # -- queries --------------------------------------------------------------------------------
    def total(self, category: str = "counted", phase_prefix: str | None = None) -> float:
        return sum(
            e.flops
            for k, e in self._totals.items()
            if k.category == category and (phase_prefix is None or k.phase.startswith(phase_prefix))
        )

    def by_phase(self, category: str = "counted") -> dict[str, float]:
        """FLOPs of `category` per phase, phases in sorted order."""
        out: dict[str, float] = {}
        for k, e in sorted(self._totals.items(), key=lambda kv: kv[0].phase):
            if k.category == category:
                out[k.phase] = out.get(k.phase, 0.0) + e.flops
        return out

    def by_kind(self, category: str = "counted") -> dict[str, float]:
        """FLOPs of `category` per kind (rollout, score, update), every kind present."""
        out = dict.fromkeys(KINDS, 0.0)
        for k, e in self._totals.items():
            if k.category == category:
                out[k.kind] += e.flops
        return out

    @property
    def counted_flops(self) -> float:
        return self.total("counted")

    def rows(self) -> list[dict]:
        """One dict per (category, phase, kind, model), sorted, for records and reports."""
        return _sorted_rows(self._totals)

    def merge(self, rows: Iterable[dict]) -> None:
        """Add aggregated rows (another ledger's `rows()`, e.g. a Ray task's) as if charged here."""
        for row in rows:
            key = Key(row["category"], row["phase"], row["kind"], row["model"])
            for table in (self._totals, self._pending):
                _add(table[key], row)

    def pending_rows(self) -> list[dict]:
        """The charges since the last `flush`, one row per key (what a child ledger hands back)."""
        return _sorted_rows(self._pending)

    def by_category(self) -> dict[str, float]:
        out = {c: 0.0 for c in CATEGORIES}
        for k, e in self._totals.items():
            out[k.category] += e.flops
        return out

    # -- persistence ----------------------------------------------------------------------------
    def flush(self) -> int:
        """Append pending charges to the file; returns the number of rows the file now has."""
        if self.path is None or not self._pending:
            self._pending.clear()
            return self.rows_written
        lines = [json.dumps(_row(k, e)) + "\n" for k, e in self._pending.items()]
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())
        self.rows_written += len(lines)
        self._pending.clear()
        return self.rows_written

    def _cut(self, rows: int) -> None:
        assert self.path is not None
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[:rows]
        store.write_text(self.path, "".join(lines))

    def _load(self) -> None:
        assert self.path is not None
        n = 0
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                row = json.loads(line)
                _add(self._totals[Key(row["category"], row["phase"], row["kind"], row["model"])], row)
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptRunError(f"{self.path}: line {n} is not a ledger row ({exc})") from exc
        self.rows_written = n
