"""The FLOP ledger: charging, categories, ambient context, and the append-only file (resume, corruption)."""

from __future__ import annotations

import json

import pytest

from bench.accounting.ledger import (
    CATEGORIES,
    KINDS,
    CorruptRunError,
    Ledger,
    current_category,
    current_kind,
    current_phase,
    evaluation,
    ledger_context,
    watch_evaluations,
)


def _fill(ledger: Ledger) -> None:
    ledger.charge(model="student", flops=100.0, tokens=10, kind="rollout")
    ledger.charge(model="student", flops=50.0, tokens=5, kind="rollout")
    with ledger_context(phase="expert:math"):
        ledger.charge(model="expert:math", flops=300.0, tokens=3, kind="update")
    with ledger_context(category="eval", phase="eval"):
        ledger.charge(model="student", flops=7.0, tokens=1, kind="score")


def test_charges_aggregate_by_key():
    ledger = Ledger()
    _fill(ledger)
    rows = ledger.rows()
    assert rows == sorted(rows, key=lambda r: (r["category"], r["phase"], r["kind"], r["model"]))
    by_key = {(r["category"], r["phase"], r["kind"], r["model"]): r for r in rows}
    assert by_key["counted", "train", "rollout", "student"] == {
        "category": "counted", "phase": "train", "kind": "rollout", "model": "student",
        "flops": 150.0, "tokens": 15, "calls": 2,
    }
    assert by_key["eval", "eval", "score", "student"]["flops"] == 7.0


def test_categories_and_totals():
    ledger = Ledger()
    _fill(ledger)
    ledger.charge(model="base", flops=1000.0, tokens=0, kind="update", category="shared", phase="warmup")
    assert ledger.by_category() == {"counted": 450.0, "shared": 1000.0, "external": 0.0, "eval": 7.0}
    assert ledger.counted_flops == ledger.total() == 450.0  # only `counted` is toward the budget
    assert ledger.total(phase_prefix="expert:") == 300.0
    assert ledger.total("eval") == 7.0
    assert set(ledger.by_category()) == set(CATEGORIES)
    assert ledger.by_kind() == {"rollout": 150.0, "score": 0.0, "update": 300.0}
    assert ledger.by_kind("eval") == {"rollout": 0.0, "score": 7.0, "update": 0.0}
    assert list(ledger.by_kind()) == list(KINDS)


def test_context_nesting_restores_outer_values():
    assert (current_phase(), current_category(), current_kind("score")) == ("train", "counted", "score")
    with ledger_context(phase="distill", kind="rollout"):
        with ledger_context(category="eval"):
            assert (current_phase(), current_category(), current_kind("score")) == ("distill", "eval", "rollout")
            with ledger_context(phase="inner"):
                assert current_phase() == "inner"
            assert current_phase() == "distill"
        assert current_category() == "counted"
        with pytest.raises(RuntimeError), ledger_context(phase="boom"):
            raise RuntimeError("a failing block")
        assert current_phase() == "distill"  # reset even when the block raised
    assert (current_phase(), current_kind("score")) == ("train", "score")


def test_watchers_see_each_outermost_evaluation_begin_and_end():
    seen: list = []

    def refuse_the_second(entering: bool) -> None:
        seen.append((entering, current_category()))
        if entering and len(seen) > 2:
            raise RuntimeError("refused")

    with watch_evaluations(refuse_the_second):
        with evaluation():
            with evaluation():  # nested: one evaluation, watched once
                assert current_category() == "eval"
        with pytest.raises(RuntimeError, match="refused"), evaluation():
            raise AssertionError("a refused evaluation runs nothing")
        assert current_category() == "counted"
    with evaluation():  # no longer watched
        pass
    assert seen == [(True, "counted"), (False, "counted"), (True, "counted")]  # around the booking


def test_unknown_kind_and_category_are_errors():
    ledger = Ledger()
    with pytest.raises(ValueError, match="unknown ledger kind 'forward'; allowed: rollout, score, update"):
        ledger.charge(model="m", flops=1.0, tokens=1, kind="forward")
    with pytest.raises(ValueError, match="unknown ledger category 'free'"):
        ledger_context(category="free").__enter__()
    with pytest.raises(ValueError, match="unknown ledger kind"):
        ledger_context(kind="backward").__enter__()
    assert ledger.rows() == [] and KINDS == ("rollout", "score", "update")


def test_flush_appends_and_reload_restores(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    _fill(ledger)
    assert ledger.flush() == 3
    assert ledger.flush() == 3  # nothing pending: nothing written
    ledger.charge(model="student", flops=25.0, tokens=2, kind="rollout")
    with ledger_context(phase="expert:math"):
        ledger.add_audit(model="expert:math", kind="update", audit_flops=301.0)
    assert ledger.flush() == 5  # rows for keys already on disk are appended, not rewritten
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line) for line in lines)

    reloaded = Ledger(path)
    assert reloaded.rows() == ledger.rows()
    assert reloaded.rows_written == 5
    expert = [r for r in reloaded.rows() if r["model"] == "expert:math"][0]
    assert expert["flops"] == 300.0 and expert["audit_flops"] == 301.0
    reloaded.charge(model="student", flops=1.0, tokens=1, kind="score")
    assert reloaded.flush() == 6 and Ledger(path).counted_flops == 476.0


def test_resume_cuts_the_ledger_back_to_a_checkpoint_row_count(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    _fill(ledger)
    checkpoint_rows = ledger.flush()
    at_checkpoint = ledger.rows()
    ledger.charge(model="student", flops=1e6, tokens=9, kind="rollout")  # work after the checkpoint
    ledger.charge(model="teacher", flops=2e6, tokens=9, kind="score")
    ledger.flush()
    ledger = Ledger(path, keep_rows=checkpoint_rows)
    assert ledger.rows() == at_checkpoint and ledger.rows_written == checkpoint_rows
    assert len(path.read_text().splitlines()) == checkpoint_rows
    ledger.charge(model="student", flops=1.0, tokens=1, kind="rollout")  # resume appends after it
    assert ledger.flush() == checkpoint_rows + 1
    assert Ledger(path).counted_flops == 451.0


def test_in_memory_ledger(tmp_path):
    ledger = Ledger()
    _fill(ledger)
    assert ledger.flush() == 0 and ledger.counted_flops == 450.0


@pytest.mark.parametrize(
    "bad",
    ['{"category": "counted", "phase": "train"', '{"category": "counted"}', '{"category": "counted", '
     '"phase": "train", "kind": "score", "model": "m", "flops": "lots", "tokens": 1}', "[1, 2]"],
)
def test_corrupt_line_names_its_number(tmp_path, bad):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    _fill(ledger)
    ledger.flush()
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(bad + "\n")
    with pytest.raises(CorruptRunError, match=r"line 4 is not a ledger row"):
        Ledger(path)


def test_resume_drops_a_torn_tail_after_the_checkpoint(tmp_path):
    path = tmp_path / "ledger.jsonl"
    ledger = Ledger(path)
    ledger.charge(model="m", flops=10.0, tokens=1, kind="update")
    rows = ledger.flush()
    ledger.charge(model="m", flops=5.0, tokens=1, kind="update")
    ledger.flush()
    with open(path, "a") as fh:
        fh.write('{"category": "coun')  # killed mid-write
    with pytest.raises(CorruptRunError):
        Ledger(path)
    resumed = Ledger(path, keep_rows=rows)
    assert resumed.counted_flops == 10.0
    assert resumed.rows_written == rows


def test_clock_books_wall_time_beside_the_flops_and_survives_a_reload(tmp_path):
    import time

    ledger = Ledger(tmp_path / "ledger.jsonl")
    with ledger_context(phase="expert:math"), ledger.clock(model="student", kind="update"):
        ledger.charge(model="student", flops=4e9, tokens=10, kind="update")
        time.sleep(0.05)
    ledger.charge(model="student", flops=1e9, tokens=5, kind="rollout")  # never clocked
    (row,) = [r for r in ledger.rows() if r["kind"] == "update"]
    assert row["phase"] == "expert:math" and 0.05 <= row["seconds"] < 5
    rates = ledger.throughput()
    assert set(rates) == {"update"}  # unclocked work has no rate, rather than an infinite one
    assert rates["update"]["flop_per_s"] == pytest.approx(4e9 / row["seconds"], rel=1e-4)  # rows round to µs
    ledger.flush()
    reloaded = Ledger(tmp_path / "ledger.jsonl").throughput()
    assert reloaded["update"]["flop_per_s"] == pytest.approx(rates["update"]["flop_per_s"], rel=1e-4)
