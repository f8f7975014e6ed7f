"""What a method cannot do to spend FLOPs outside the budget, whatever it imports: deliver a teacher,
book its work as anything but counted, or charge from a thread of its own (docs/design.md, FLOP
accounting). Each case is a method's call on a real context over the tiny models."""

from __future__ import annotations

import threading

import pytest
import torch

from bench.accounting.ledger import Ledger, evaluation, ledger_context
from bench.api import group_advantages
from bench.context import RunContext
from bench.policy import Policy
from bench.registry import get_suite
from bench.rollout.torch_engine import TorchRollout
from bench.world.models import TINY_SPECS, build_tiny


def tiny_policy(name: str, ledger: Ledger, trainable: bool = True) -> Policy:
    model, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    return Policy(name, model, tokenizer, ledger=ledger, trainable=trainable)


def context(ledger: Ledger, reads_heldout: str | None = None) -> RunContext:
    """A run's context whose teacher is loaded as the runner loads one: its training booked `external`;
    `reads_heldout`: the method's reason to read held-out accuracy, as the runner passes it."""

    def load_teacher(name: str) -> Policy:
        ledger.charge(model=name, flops=1e15, tokens=1, kind="update", phase="external", category="external")
        return tiny_policy(name, ledger, trainable=False)

    return RunContext(suite=get_suite("math_code", "easy", "tiny"), seed=3, budget_flops=1e12, ledger=ledger,
                      student=tiny_policy("student", ledger), backend=TorchRollout(), teacher_loader=load_teacher,
                      max_new_tokens=8, on_step=lambda stats: None, reads_heldout=reads_heldout)


def test_a_teacher_or_a_copy_of_one_is_never_the_deliverable():
    ledger = Ledger()
    ctx = context(ledger)
    with ledger.method_runs():
        teacher = ctx.teacher("external")
        copies = [teacher, ctx.clone(teacher, "warm"), ctx.snapshot(ctx.clone(teacher, "warm2"), "frozen")]
        for policy in copies:
            with pytest.raises(ValueError, match="is a teacher or made from one"):
                ctx.set_student(policy)
        assert ctx.student.name == "student"
        ctx.set_student(ctx.snapshot(ctx.clone(ctx.student, "alt"), "alt-frozen"))  # the student's own line
    assert ctx.student.name == "alt-frozen"
    assert ledger.total("external") == 1e15  # the teacher's preparation, booked by the engine as it loaded
    with pytest.raises(ValueError, match="a policy of this run"):
        ctx.clone(tiny_policy("stranger", ledger), "adopted")


def test_work_booked_outside_the_budget_is_refused_while_a_method_runs():
    ledger = Ledger()
    ctx = context(ledger)
    sampler = ctx.sampler("train")

    def rollout():
        return ctx.rollout(ctx.student, sampler.next(2), n=2)

    with ledger.method_runs():
        for category in ("shared", "external", "eval"):
            with ledger_context(category=category), pytest.raises(RuntimeError, match=f"booked '{category}'"):
                rollout()
        with evaluation(), pytest.raises(RuntimeError, match="booked 'eval' while the method runs"):
            rollout()  # an evaluation the method began itself
        assert not any(r["flops"] for r in ledger.rows())  # refused: no FLOPs booked anywhere
        batch = rollout()
        ctx.pg_step(ctx.student, batch, group_advantages(batch.rewards, 2), lr=1e-3)
        with ledger.engine_booking(), evaluation():  # the engine's evaluation: booked eval, as before
            ctx.rollout(ctx.student, sampler.next(2), n=1)
    assert {r["category"] for r in ledger.rows() if r["flops"]} == {"counted", "eval"}
    with ledger_context(category="shared"):  # outside a method's run: the world's preparation
        rollout()
    assert ledger.total("shared") > 0


def test_a_charge_from_a_thread_the_method_started_is_refused():
    ledger = Ledger()
    ctx = context(ledger)
    sampler = ctx.sampler("train")
    failures: list[BaseException] = []

    def work():
        try:
            ctx.rollout(ctx.student, sampler.next(2), n=2)
        except BaseException as exc:  # noqa: BLE001 (handed back to the test's thread)
            failures.append(exc)

    with ledger.method_runs(), ctx.phase("distill"):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    assert len(failures) == 1 and "from a thread the method started" in str(failures[0])
    assert not any(r["flops"] for r in ledger.rows())


def test_validation_checks_are_counted_in_the_phase_and_held_out_ones_are_not():
    ledger = Ledger()
    ctx = context(ledger, reads_heldout="a measurement")
    with ledger.method_runs(), ctx.phase("expert:math"):
        ctx.evaluate(ctx.student, split="validation", domains=["math"], size=4)
        counted = ledger.total("counted", phase_prefix="expert:math")
        assert counted > 0 and ledger.total("eval") == 0
        assert ledger.by_kind()["rollout"] == counted  # as rollouts, in the phase
        ctx.evaluate(ctx.student, split="heldout", domains=["math"], size=4)
    assert ledger.total("counted") == counted and ledger.total("eval") > 0
    assert ctx._checkpoint()["heldout_reads"] == 1  # the held-out read, not the validation check


def test_held_out_reads_are_refused_inside_map_phases_whatever_the_executor():
    """In order on the run's own context (this one), as in a child context: a method that reads held-out
    accuracy in a phase would pass `check-adapter` and stop under a parallel executor."""
    ledger = Ledger()
    ctx = context(ledger, reads_heldout="a measurement")

    def read(phase_ctx, domain):
        return phase_ctx.evaluate(phase_ctx.student, split="heldout", domains=[domain], size=4)

    with ledger.method_runs():
        with pytest.raises(ValueError, match="reads it outside ctx.map_phases"):
            ctx.map_phases(read, ["math"])
        assert ctx._checkpoint()["heldout_reads"] == 0
        read(ctx, "math")  # outside, as before
    assert ctx._checkpoint()["heldout_reads"] == 1


def test_only_a_method_that_says_why_reads_held_out_accuracy():
    ledger = Ledger()
    ctx = context(ledger)
    with ledger.method_runs(), pytest.raises(ValueError, match="reads the accuracy the run is scored on"):
        ctx.evaluate(ctx.student, split="heldout", domains=["math"], size=4)
    assert not any(r["flops"] for r in ledger.rows()) and ctx._checkpoint()["heldout_reads"] == 0


def test_a_negative_keep_is_refused():
    policy = tiny_policy("student", Ledger())
    ids = policy.encode_prompt("1+1=")
    batch = torch.tensor([ids])
    with pytest.raises(ValueError, match="keep is a number of positions"):
        policy.logprobs(batch, batch.ne(-1), keep=-1)


def test_a_frozen_policy_is_refused_by_every_update_before_any_work():
    ledger = Ledger()
    ctx = context(ledger)
    frozen = [ctx.snapshot(ctx.student, "frozen"), ctx.teacher("external")]
    spent = ledger.total("counted")
    for policy in frozen:
        batch = ctx.rollout(ctx.student, ctx.sampler("train").next(2), n=2)
        before = ledger.total("counted")
        for call in (lambda: ctx.pg_step(policy, batch, group_advantages(batch.rewards, 2), lr=1e-3),
                     lambda: ctx.update(policy, batch, lambda bucket: bucket.logprobs.sum(), lr=1e-3),
                     lambda: ctx.sft_step(policy, ["1+1="], ["2"], lr=1e-3)):
            with pytest.raises(ValueError, match=f"{policy.name!r} is frozen"):
                call()
        assert ledger.total("counted") == before  # refused before any forward
    assert ledger.total("counted") > spent
