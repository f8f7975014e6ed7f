"""The shared loss pieces, each checked against a hand computation."""

import math

import pytest
import torch

from bench.losses import (
    distillation_advantages,
    group_advantages,
    masked_mean,
    policy_gradient_loss,
    sft_loss,
    token_logprobs,
)


def test_token_logprobs_matches_manual_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    out = token_logprobs(logits, ids)
    assert out.shape == (2, 5)
    assert torch.all(out[:, 0] == 0)
    expected = torch.log_softmax(logits[1, 2], -1)[ids[1, 3]]
    assert out[1, 3].item() == pytest.approx(expected.item(), abs=1e-6)


def test_group_advantages_centre_and_scale_per_group():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4)
    assert adv[:4].sum().item() == pytest.approx(0.0, abs=1e-6)
    assert adv[0].item() == pytest.approx(0.75 / math.sqrt(0.1875), rel=1e-3)  # the rewarded sample pushed up
    assert adv[1:4].tolist() == pytest.approx([-0.25 / math.sqrt(0.1875)] * 3, rel=1e-3)  # the others down
    assert torch.all(adv[4:] == 0)  # a solved group teaches nothing
    unscaled = group_advantages(rewards, 4, scale=False)
    assert unscaled[0].item() == pytest.approx(0.75)
    with pytest.raises(ValueError):
        group_advantages(rewards, 3)


def test_distillation_advantage_is_teacher_minus_student_and_detached():
    s = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    t = torch.tensor([[-0.5, -3.0]])
    adv = distillation_advantages(t, s)
    assert adv.tolist() == [[0.5, -1.0]]
    assert not adv.requires_grad


def test_policy_gradient_normalisations_differ_as_documented():
    logp = torch.zeros(2, 4, requires_grad=True)
    adv = torch.tensor([1.0, -1.0])
    mask = torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]])
    # per-token loss is -A (ratio 1): seq0 -> -1 on 3 tokens, seq1 -> +1 on 1 token
    grpo, _ = policy_gradient_loss(logp, logp.detach(), adv, mask, loss_type="grpo")
    assert grpo.item() == pytest.approx((-1 + 1) / 2)
    dapo, _ = policy_gradient_loss(logp, logp.detach(), adv, mask, loss_type="dapo")
    assert dapo.item() == pytest.approx((-3 + 1) / 4)
    dr, _ = policy_gradient_loss(logp, logp.detach(), adv, mask, loss_type="dr_grpo", max_completion_tokens=8)
    assert dr.item() == pytest.approx((-3 + 1) / (2 * 8))
    with pytest.raises(ValueError):
        policy_gradient_loss(logp, logp, adv, mask, loss_type="ppo")


def test_policy_gradient_clips_the_ratio():
    old = torch.zeros(1, 2)
    logp = torch.full((1, 2), math.log(2.0), requires_grad=True)  # ratio 2
    loss, stats = policy_gradient_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), clip_eps=0.2)
    assert loss.item() == pytest.approx(-1.2)
    assert stats["clip_frac"] == stats["clip_region"] == 1.0
    loss.backward()
    assert torch.all(logp.grad == 0)  # clipped: no gradient


def test_clip_region_counts_only_tokens_whose_gradient_the_clip_removed():
    """Outside the trust region on the side the advantage pushes away from, the unclipped term is the
    minimum and the gradient flows: `clip_frac` counts such a token (PPO's clipfrac), `clip_region`
    does not (TRL's `clip_ratio/region_mean`)."""
    old = torch.zeros(2, 2)
    logp = torch.tensor([[math.log(2.0), math.log(0.5)], [math.log(2.0), 0.0]], requires_grad=True)
    advantages = torch.tensor([-1.0, 1.0])  # row 0: ratios 2 and 0.5 pushed down; row 1: ratio 2 pushed up
    loss, stats = policy_gradient_loss(logp, old, advantages, torch.ones(2, 2), clip_eps=0.2)
    assert stats["clip_frac"] == pytest.approx(3 / 4)
    assert stats["clip_region"] == pytest.approx(2 / 4)  # row 0's ratio 0.5 and row 1's ratio 2
    loss.backward()
    assert logp.grad[0, 0] != 0 and logp.grad[1, 1] != 0  # the gradient flows where the clip is idle
    assert logp.grad[0, 1] == 0 and logp.grad[1, 0] == 0


def test_kl_penalty_is_zero_at_the_reference():
    logp = torch.zeros(1, 3, requires_grad=True)
    loss, stats = policy_gradient_loss(
        logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 3), ref_logprobs=torch.zeros(1, 3), kl_coef=0.1
    )
    assert stats["kl_ref"] == pytest.approx(0.0)
    assert loss.item() == pytest.approx(0.0)


def test_kl_penalty_away_from_the_reference_is_the_k3_estimate_over_completion_tokens():
    # ref - logp = 0.5 on the two completion tokens; the prompt token (mask 0) is far off and must not count
    logp = torch.tensor([[-2.0, -0.5, -0.5]], requires_grad=True)
    ref = torch.zeros(1, 3)
    mask = torch.tensor([[0, 1, 1]])
    loss, stats = policy_gradient_loss(logp, logp.detach(), torch.tensor([0.0]), mask, ref_logprobs=ref, kl_coef=0.1)
    k3 = math.exp(0.5) - 0.5 - 1
    assert stats["kl_ref"] == pytest.approx(k3, rel=1e-6)
    assert loss.item() == pytest.approx(0.1 * k3, rel=1e-6)  # zero advantage: the KL term alone
    loss.backward()
    # d/dlogp of 0.1 * (exp(ref - logp) - (ref - logp) - 1), averaged over the 2 completion tokens
    per_token = 0.1 * (1 - math.exp(0.5)) / 2
    assert logp.grad[0].tolist() == pytest.approx([0.0, per_token, per_token], rel=1e-6)


def test_sft_loss_and_masked_mean():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    mask = torch.tensor([[0, 1, 1]])
    assert sft_loss(logp, mask).item() == pytest.approx(2.5)
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


def test_length_buckets_cap_the_logits_of_big_vocabularies():
    from bench.update import LOGIT_BUDGET, length_buckets

    mask = torch.zeros(64, 300, dtype=torch.long)
    for i in range(64):
        mask[i, : 100 + 3 * i] = 1
    small = length_buckets(mask, vocab=300)
    assert len(small) == 1 and small[0][1] == 289  # a tiny vocabulary: one group of 64, as before
    big = length_buckets(mask, vocab=151936)
    assert sorted(torch.cat([rows for rows, _ in big]).tolist()) == list(range(64))  # every row once
    assert all(len(rows) * width * 151936 <= LOGIT_BUDGET for rows, width in big)
    assert all(width == int(mask[rows].sum(1).max()) for rows, width in big)


def test_group_std_is_a_choice_population_by_default_sample_as_trl():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0])
    population = group_advantages(rewards, 8)
    sample = group_advantages(rewards, 8, std="sample")
    centred = rewards - rewards.mean()
    assert torch.allclose(sample, centred / (rewards.std(unbiased=True) + 1e-4))  # TRL's scale
    assert torch.allclose(population, centred / (rewards.std(unbiased=False) + 1e-4))
    ratio = float(population[0] / sample[0])
    assert abs(ratio - (8 / 7) ** 0.5) < 1e-3  # 1.069x at 8 samples
    with pytest.raises(ValueError, match="std must be one of"):
        group_advantages(rewards, 8, std="biased")
