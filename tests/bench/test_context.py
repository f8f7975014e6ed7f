"""Length-bucketed micro-batches give the same loss as the whole batch, for every normalisation."""

import pytest
import torch

from bench.context import _bucket_weights, length_buckets
from bench.losses import LOSS_TYPES, policy_gradient_loss


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("per_token", [False, True])
def test_bucketed_loss_equals_full_batch_loss(loss_type, per_token):
    g = torch.Generator().manual_seed(0)
    b, t = 37, 12
    lengths = torch.randint(3, t + 1, (b,), generator=g)
    cols = torch.arange(t)[None]
    attention = (cols < lengths[:, None]).long()
    mask = attention * (cols >= 2).long()
    logp = -torch.rand(b, t, generator=g)
    old = logp - 0.1 * torch.rand(b, t, generator=g)
    adv = torch.randn(b, t, generator=g) if per_token else torch.randn(b, generator=g)
    full, _ = policy_gradient_loss(logp, old, adv, mask, loss_type=loss_type, max_completion_tokens=t)
    buckets = length_buckets(attention, rows=8)
    assert sorted(torch.cat([r for r, _ in buckets]).tolist()) == list(range(b))
    assert all(int(lengths[r].max()) == w for r, w in buckets)
    total = 0.0
    for (rows, width), weight in zip(buckets, _bucket_weights(buckets, mask, loss_type)):
        a = adv[rows] if adv.dim() == 1 else adv[rows, :width]
        part, _ = policy_gradient_loss(
            logp[rows, :width], old[rows, :width], a, mask[rows, :width], loss_type=loss_type, max_completion_tokens=t
        )
        total += float(part) * weight
    assert total == pytest.approx(float(full), rel=1e-5)
