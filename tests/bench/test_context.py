"""Length-bucketed micro-batches give the same loss as the whole batch, for every normalisation."""

import pytest
import torch

from bench.update import bucket_weights, completion_width, length_buckets
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
    for (rows, width), weight in zip(buckets, bucket_weights(buckets, mask, "tokens" if loss_type == "dapo" else "rows")):
        a = adv[rows] if adv.dim() == 1 else adv[rows, :width]
        part, _ = policy_gradient_loss(
            logp[rows, :width], old[rows, :width], a, mask[rows, :width], loss_type=loss_type, max_completion_tokens=t
        )
        total += float(part) * weight
    assert total == pytest.approx(float(full), rel=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_logprobs_on_the_completion_only_match_the_full_ones_and_cost_less(family):
    """`keep`: the same log-probs and gradients on the kept positions, a smaller LM-head charge."""
    import transformers

    from bench.accounting.ledger import Ledger
    from bench.world.models import build_tokenizer
    from bench.policy import Policy

    tok = build_tokenizer()
    ids = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    config = (transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, **ids)
              if family == "llama" else transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, **ids))
    torch.manual_seed(0)
    policy = Policy("student", transformers.AutoModelForCausalLM.from_config(config).eval(), tok, Ledger())  # no dropout
    input_ids = torch.randint(3, 200, (3, 10))
    attention = torch.ones_like(input_ids)
    completion = torch.zeros_like(input_ids)
    completion[:, 6:] = 1
    keep = completion_width(completion)
    assert keep == 4 and completion_width(torch.zeros(2, 5)) == 5

    full = policy.logprobs(input_ids, attention)
    charged_full = policy._ledger.counted_flops
    part = policy.logprobs(input_ids, attention, keep=keep)
    charged_part = policy._ledger.counted_flops - charged_full
    assert torch.allclose(part[:, 6:], full[:, 6:], atol=1e-5) and not part[:, :6].any()
    assert charged_part < charged_full

    grads = []
    for k in (None, keep):
        policy._model.zero_grad()
        (policy.logprobs(input_ids, attention, keep=k) * completion).sum().backward()
        grads.append(torch.cat([p.grad.flatten() for p in policy._model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5)
