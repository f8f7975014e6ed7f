"""A bf16 policy's optimiser steps fp32 master weights: small learning rates move it as they move an
fp32 one, where stepped in bf16 nearly every weight would stay put; checkpoints keep them."""

from __future__ import annotations

import io

import torch

from bench import update
from bench.accounting.ledger import Ledger
from bench.losses import sft_loss
from bench.policy import Policy
from bench.world.models import TINY_SPECS, build_tiny

PROMPTS = ["12+7=", "r:abcd>", "305-9=", "c:a:abaca>"]
TARGETS = ["1+2=3#19", "dcba#dcba", "296", "3"]


def _policy(dtype: torch.dtype, master: bool | None = None) -> Policy:
    torch.manual_seed(0)
    model, tokenizer = build_tiny(TINY_SPECS["tiny-qwen2"])
    policy = Policy("student", model.to(dtype), tokenizer, ledger=Ledger())
    policy.master_weights = master
    return policy


def _steps(policy: Policy, count: int, lr: float) -> None:
    batch = update.supervised_batch(policy, PROMPTS, TARGETS)
    for _ in range(count):
        policy.step(sft_loss(policy.logprobs(batch.input_ids, batch.attention_mask), batch.completion_mask), lr)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def test_a_bf16_policy_moves_at_a_small_learning_rate_as_an_fp32_one_does():
    """Three steps at 1e-6: an fp32 policy's weights move; a bf16 one's fp32 master weights move the
    same way (cosine > 0.99 against the fp32 run's displacement: the same sign of nearly every
    gradient), the model holding them rounded to bf16. Stepped in bf16 itself, most weights would not
    move at all."""
    reference = _policy(torch.float32)
    start = _flat(reference._model.parameters())
    _steps(reference, 3, 1e-6)
    moved32 = _flat(reference._model.parameters()) - start
    assert reference._master is None and not reference.keeps_master_weights

    kept = _policy(torch.bfloat16)
    assert kept.keeps_master_weights
    start16 = _flat(kept._model.parameters())
    _steps(kept, 3, 1e-6)
    master = _flat(kept._master)
    assert all(m.dtype == torch.float32 for m in kept._master)
    assert torch.equal(_flat(kept._model.parameters()), _flat(m.to(torch.bfloat16) for m in kept._master))
    moved = master - start16
    assert float((moved != 0).float().mean()) > 0.95
    assert float(torch.nn.functional.cosine_similarity(moved, moved32, dim=0)) > 0.99

    rounded = _policy(torch.bfloat16, master=False)
    _steps(rounded, 3, 1e-6)
    assert rounded._master is None
    assert float((_flat(rounded._model.parameters()) != start16).float().mean()) < 0.1


def test_master_weights_survive_a_checkpoint_and_bump_the_weights_versions():
    """A bf16 policy's state carries its fp32 weights: saved and restored into a fresh policy, the next
    step is the one the original takes, exactly. Each step writes the model's weights with a bumped version
    counter, which is how the vLLM engine sees changed weights."""
    from bench.rollout.vllm_engine import _fingerprint

    original = _policy(torch.bfloat16)
    _steps(original, 2, 1e-5)
    saved = io.BytesIO()
    torch.save(original._state(), saved)  # as a checkpoint is written
    saved.seek(0)
    restored = _policy(torch.bfloat16)
    restored._load_state(torch.load(saved, weights_only=False))
    assert all(torch.equal(a, b) for a, b in zip(restored._master, original._master))
    before = _fingerprint(original._model)
    for policy in (original, restored):
        _steps(policy, 1, 1e-5)
    assert all(v1 > v0 for (_, v0), (_, v1) in zip(before, _fingerprint(original._model)))
    assert all(torch.equal(a, b) for a, b in zip(restored._master, original._master))
    assert all(torch.equal(a, b) for a, b in zip(restored._model.parameters(), original._model.parameters()))


def test_an_updates_buckets_are_summed_in_fp32():
    """An update of 150 rows runs as three length buckets, a backward each. A bf16 policy's step takes
    the three buckets' gradients, each rounded to bf16 by its own backward, summed in fp32: the norm
    it clips is exactly the norm of that sum, computed here bucket by bucket on an identical policy.
    Left to accumulate in the model's bf16 gradients, the sum would be rounded at each bucket."""
    prompts, targets = (PROMPTS + ["7+8=", "r:xy>"]) * 30, (TARGETS + ["15", "yx"]) * 30
    policy = _policy(torch.bfloat16)
    batch = update.supervised_batch(policy, prompts, targets)
    buckets = update.length_buckets(batch.attention_mask)
    assert len(buckets) == 3
    weights = update.bucket_weights(buckets, batch.completion_mask, "tokens")

    twin = _policy(torch.bfloat16)
    fp32_sum = [torch.zeros_like(p, dtype=torch.float32) for p in twin._model.parameters()]
    for (rows, width), weight in zip(buckets, weights):
        lp = twin.logprobs(batch.input_ids[rows, :width], batch.attention_mask[rows, :width])
        (sft_loss(lp, batch.completion_mask[rows, :width]) * weight).backward()
        for total, p in zip(fp32_sum, twin._model.parameters()):
            total.add_(p.grad)
            p.grad = None
    bf16_sum = [total.to(torch.bfloat16) for total in fp32_sum]  # at best, one rounding of the whole sum
    assert not all(torch.equal(a.float(), b) for a, b in zip(bf16_sum, fp32_sum))

    stats = update.run_update(policy, batch, lambda bucket: sft_loss(bucket.logprobs, bucket.mask), lr=1e-6,
                              weighting="tokens")
    assert stats["grad_norm"] == float(torch.nn.utils.get_total_norm(fp32_sum))
    assert all(p.grad is None for p in policy._model.parameters())
