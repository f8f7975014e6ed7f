"""The update engine: supervised steps through the buckets equal one padded batch; a method's own loss
gets the same buckets, logit cap and accounting as the policy-gradient step."""

from __future__ import annotations

import copy

import pytest
import torch

from bench import update
from bench.accounting.ledger import Ledger
from bench.losses import masked_mean, sft_loss
from bench.policy import Policy
from bench.world.models import TINY_SPECS, build_tiny

PROMPTS = ["12+7=", "r:abcd>", "305-9=", "c:a:abaca>", "4+4=", "s:qwzx>"]
TARGETS = ["19", "dcba", "296", "3", "8", "qwxz"]


def _policy() -> Policy:
    model, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    return Policy("student", model, tokenizer, ledger=Ledger())


def _capture_grads(policy: Policy) -> list:
    """Make `policy.step` record the gradients it would apply (and apply nothing)."""
    grads: list = []

    def step(loss, lr, warmup_updates=0, max_grad_norm=1.0):
        if loss is not None:
            loss.backward()
        grads.append(torch.cat([p.grad.flatten().clone() for p in policy._model.parameters()]))
        policy._model.zero_grad(set_to_none=True)
        return 0.0

    object.__setattr__(policy, "step", step)  # a stand-in for this test: a plain assignment is refused
    return grads


def _one_padded_batch(policy: Policy, prompts: list[str], targets: list[str], lr: float) -> float:
    """The supervised step as one padded batch: every position's logits, the loss over all targets."""
    batch = update.supervised_batch(policy, prompts, targets)
    with policy._clock("update"):
        loss = sft_loss(policy.logprobs(batch.input_ids, batch.attention_mask), batch.completion_mask)
        policy.step(loss, lr)
    return float(loss.detach())


def test_sft_step_in_one_bucket_is_one_padded_batch_exactly():
    ref, new = _policy(), _policy()
    want = _one_padded_batch(ref, PROMPTS, TARGETS, lr=1e-2)
    got = update.sft_step(new, PROMPTS, TARGETS, lr=1e-2)
    assert got == want
    for a, b in zip(ref._model.parameters(), new._model.parameters()):
        assert torch.equal(a, b)
    rows = lambda p: [{k: v for k, v in r.items() if k != "seconds"} for r in p._ledger.rows()]  # noqa: E731
    assert rows(new) == rows(ref)  # the same forward and backward charged


def test_sft_step_across_buckets_has_the_loss_and_gradients_of_one_batch(monkeypatch):
    prompts, targets = PROMPTS * 30, TARGETS * 30  # 180 rows: three buckets of at most 64
    ref, new = _policy(), _policy()
    ref_grads, new_grads = _capture_grads(ref), _capture_grads(new)
    want = _one_padded_batch(ref, prompts, targets, lr=1e-2)
    assert len(update.length_buckets(update.supervised_batch(new, prompts, targets).attention_mask)) == 3
    got = update.sft_step(new, prompts, targets, lr=1e-2)
    assert got == pytest.approx(want, rel=1e-6)
    assert torch.allclose(new_grads[0], ref_grads[0], rtol=1e-4, atol=1e-7)
    # The logit cap splits buckets too: with a tiny budget every row is its own bucket.
    monkeypatch.setattr(update, "LOGIT_BUDGET", 1)
    capped = _policy()
    capped_grads = _capture_grads(capped)
    assert update.sft_step(capped, PROMPTS, TARGETS, lr=1e-2) == pytest.approx(
        _one_padded_batch(_policy(), PROMPTS, TARGETS, lr=1e-2), rel=1e-6)
    ref_small = _policy()
    small_grads = _capture_grads(ref_small)
    _one_padded_batch(ref_small, PROMPTS, TARGETS, lr=1e-2)
    assert torch.allclose(capped_grads[0], small_grads[0], rtol=1e-4, atol=1e-7)


def _rollouts(policy: Policy, rows: int = 24, width: int = 14, prompt: int = 5):
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(prompt + 2, width + 1, (rows,), generator=g)
    cols = torch.arange(width)[None]
    attention = (cols < lengths[:, None]).long()
    batch = update.SupervisedBatch(
        input_ids=torch.randint(3, policy.vocab_size, (rows, width), generator=g) * attention,
        attention_mask=attention,
        completion_mask=attention * (cols >= prompt).long(),
    )
    return batch, torch.randn(rows, generator=g)


def test_a_methods_own_loss_gets_the_policy_gradient_steps_gradients():
    """REINFORCE written as a custom loss has the gradients of the `grpo` step at ratio 1."""
    pg, custom = _policy(), _policy()
    pg_grads, custom_grads = _capture_grads(pg), _capture_grads(custom)
    batch, advantages = _rollouts(pg)
    pg_stats = update.pg_update(pg, batch, advantages, lr=1e-3)

    def reinforce(bucket: update.Bucket):
        adv = bucket.take(advantages)  # [b]
        return masked_mean(-adv[:, None] * bucket.logprobs, bucket.mask, dim=1).mean(), {"rows": float(len(adv))}

    stats = update.run_update(custom, batch, reinforce, lr=1e-3)
    assert torch.allclose(custom_grads[0], pg_grads[0], rtol=1e-4, atol=1e-7)
    assert set(stats) == {"loss", "rows", "grad_norm"}
    assert set(pg_stats) == {"loss", "clip_frac", "clip_region", "grad_norm"}
    # the statistics are combined with the buckets' weights: here the mean bucket size
    buckets = update.length_buckets(batch.attention_mask, vocab=custom.vocab_size)
    sizes = [len(rows) for rows, _ in buckets]
    assert stats["rows"] == pytest.approx(sum(s * s for s in sizes) / sum(sizes))
    assert [r["kind"] for r in custom._ledger.rows()] == ["update"]


def test_update_rejects_unknown_weighting():
    policy = _policy()
    batch, _ = _rollouts(policy)
    with pytest.raises(ValueError, match="weighting"):
        update.run_update(policy, batch, lambda b: b.logprobs.sum(), lr=1e-3, weighting="tokens-ish")


def test_bucket_take_cuts_rows_and_width():
    rows = torch.tensor([2, 0])
    bucket = update.Bucket(rows, 3, 0, torch.zeros(2, 3), torch.ones(2, 3))
    x = torch.arange(20).view(4, 5)
    assert bucket.take(x).tolist() == [[10, 11, 12], [0, 1, 2]]
    assert bucket.take(torch.tensor([5, 6, 7, 8])).tolist() == [7, 5]
    assert copy.copy(bucket).width == 3


def test_the_clip_shares_are_shares_of_the_batchs_completion_tokens(monkeypatch):
    """Two epochs, every row its own bucket (rows of 2 to 9 completion tokens): `clip_frac` is the share
    of all completion tokens whose ratio left [0.8, 1.2] in the second epoch, each row weighing by its
    tokens, not by its share of rows as its `grpo` loss does."""
    monkeypatch.setattr(update, "LOGIT_BUDGET", 1)
    start = _policy()
    batch, advantages = _rollouts(start)
    after_one = copy.deepcopy(start)
    update.pg_update(after_one, batch, advantages, lr=3e-2)  # the first epoch's step alone
    stats = update.pg_update(copy.deepcopy(start), batch, advantages, lr=3e-2, epochs=2)
    with torch.no_grad():
        old = start.logprobs(batch.input_ids, batch.attention_mask)
        new = after_one.logprobs(batch.input_ids, batch.attention_mask)
    mask = batch.completion_mask.bool()
    ratio = torch.exp(new - old)[mask]
    outside = ((ratio < 0.8) | (ratio > 1.2)).float()
    assert 0 < float(outside.mean()) < 1
    assert stats["clip_frac"] == pytest.approx(float(outside.mean()), abs=1e-6)
