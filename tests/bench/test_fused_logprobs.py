"""The fused LM head + log-softmax and the compiled decoder of `Policy.logprobs`: the same log-probs and
gradients as the eager path (fp32 on the CPU), every FLOP still charged, and few recompilations."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench import update
from bench.accounting.audit import audited
from bench.accounting.ledger import Ledger
from bench.losses import linear_token_logprobs, sft_loss, token_logprobs
from bench.policy import Policy, fused_head_supported
from bench.world.models import TINY_SPECS, build_tiny

PROMPTS = ["12+7=", "r:abcd>", "305-9=", "c:a:abaca>", "4+4=", "s:qwzx>"]
TARGETS = ["1+2=3#19", "dcba#dcba", "296", "3", "8+0=8#8", "qwxz"]


def _policy(family: str = "tiny-llama") -> Policy:
    torch.manual_seed(0)
    model, tokenizer = build_tiny(TINY_SPECS[family])
    return Policy("student", model, tokenizer, ledger=Ledger())


# 14 rows, 11 columns: the forward takes 1, 3 and all rows at a time, the backward 1, 2 and all columns
# (recomputed) or 1, 3 and all rows (kept)
@pytest.mark.parametrize("keep_logits", [0, 14 * 11 - 1, 14 * 11])
@pytest.mark.parametrize("max_logits", [1, 33, 1000])
def test_the_fused_head_gives_token_logprobs_values_and_gradients(max_logits, keep_logits):
    torch.manual_seed(1)
    hidden = torch.randn(2, 7, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 16, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 11, (2, 7))
    upstream = torch.randn(2, 7, dtype=torch.float64)

    eager = token_logprobs(hidden @ weight.T, ids)  # [2, 7]: the unfused reference
    (eager * upstream).sum().backward()
    want = eager.detach(), hidden.grad.clone(), weight.grad.clone()
    hidden.grad, weight.grad = None, None

    rows = []
    targets = torch.nn.functional.pad(ids[:, 1:], (0, 1)).reshape(-1)
    out = linear_token_logprobs(hidden.reshape(-1, 16), weight, targets, max_logits=max_logits,
                                keep_logits=keep_logits, on_recompute=rows.append)
    fused = torch.nn.functional.pad(out.view(2, 7)[:, :-1], (1, 0))
    (fused * upstream.float()).sum().backward()
    assert out.dtype == torch.float32
    torch.testing.assert_close(fused, want[0].float(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(hidden.grad, want[1], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(weight.grad, want[2], rtol=1e-6, atol=1e-6)
    # the backward recomputed the head once over every row, or kept all 14 x 11 logits
    assert rows == ([] if keep_logits >= 14 * 11 else [14])


def test_a_second_backward_through_kept_logits_recomputes_them():
    """The kept logits become their gradient in the first backward: a second one through the same graph
    recomputes them, gets the same gradients, and says so to be charged."""
    torch.manual_seed(1)
    hidden = torch.randn(9, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 16, dtype=torch.float64, requires_grad=True)
    rows = []
    out = linear_token_logprobs(hidden, weight, torch.randint(0, 11, (9,)), max_logits=1000, keep_logits=1000,
                                on_recompute=rows.append)
    grads = []
    for _ in range(2):
        hidden.grad = weight.grad = None
        out.sum().backward(retain_graph=True)
        grads.append((hidden.grad.clone(), weight.grad.clone()))
    assert rows == [9]
    for first, second in zip(*grads):
        torch.testing.assert_close(second, first, rtol=1e-6, atol=1e-9)


def _eager_and_fused(dtype: torch.dtype, keep: int | None = None, max_logits: int | None = None,
                     keep_logits: int | None = None) -> list[tuple[torch.Tensor, dict]]:
    """The metered policy's log-probs and parameter gradients (as fp32), eager head then fused head."""
    batch = update.supervised_batch(_policy(), PROMPTS, TARGETS)
    results = []
    for fused in (False, True):
        policy = _policy()
        assert fused_head_supported(policy._model) and policy._model.config.tie_word_embeddings
        policy._model.to(dtype)
        policy.fused_head = fused
        policy.max_logits = max_logits or policy.max_logits
        policy.keep_logits = policy.keep_logits if keep_logits is None else keep_logits
        lp = policy.logprobs(batch.input_ids, batch.attention_mask, keep=keep)
        sft_loss(lp, batch.completion_mask).backward()
        results.append((lp.detach(), {n: p.grad.float() for n, p in policy._model.named_parameters()}))
    return results


@pytest.mark.parametrize("keep_logits", [None, 0])
@pytest.mark.parametrize("keep", [None, 4])
def test_policy_logprobs_fused_equal_eager_in_fp32(keep, keep_logits):
    """The metered policy's log-probs and parameter gradients, fused head or not (tied embeddings: the
    head's gradient lands on the embedding), its logits kept for the backward (`Policy`'s budget) or
    recomputed there."""
    (lp_eager, g_eager), (lp_fused, g_fused) = _eager_and_fused(torch.float32, keep, keep_logits=keep_logits)
    torch.testing.assert_close(lp_fused, lp_eager, rtol=1e-5, atol=1e-6)
    assert g_eager.keys() == g_fused.keys()
    for name in g_eager:
        torch.testing.assert_close(g_fused[name], g_eager[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("keep_logits", [None, 0])
@pytest.mark.parametrize("max_logits", [None, 4096, 256])
def test_policy_logprobs_fused_equal_eager_in_bf16(max_logits, keep_logits):
    """The GPU's dtype, on the CPU: bf16 weights and hidden states, the head's logits in fp32 against
    the eager bf16 logits cast to fp32, within torch.testing's bf16 tolerance. At `Policy`'s budget the
    tiny vocabulary fits one slice; at 4,096 logits the forward takes at most 15 rows at a time and
    the backward 7 slices of the vocabulary when it recomputes them (15 rows at a time when it keeps
    them); at 256, one row and 132 slices (one row)."""
    (lp_eager, g_eager), (lp_fused, g_fused) = _eager_and_fused(torch.bfloat16, max_logits=max_logits,
                                                                keep_logits=keep_logits)
    assert lp_fused.dtype == torch.float32
    torch.testing.assert_close(lp_fused, lp_eager, rtol=1.6e-2, atol=1e-5)
    for name in g_eager:
        assert float(g_eager[name].norm()) > 0, name  # every parameter gets a gradient to compare
        assert float((g_fused[name] - g_eager[name]).norm()) <= 1.6e-2 * float(g_eager[name].norm()), name


@pytest.mark.parametrize("keep_logits", [None, 0])
def test_a_fused_update_is_charged_every_flop_it_runs(keep_logits):
    """FlopCounterMode over a whole update: where the fused head's backward recomputes the head, one
    more LM-head forward over every position, that is exactly what the ledger charges beyond the eager
    update (itself within the audit's tolerance of its instrumented count); where it keeps the logits,
    the fused update runs and is charged the eager update's FLOPs."""
    charged, counted = {}, {}
    for fused in (False, True):
        policy = _policy("tiny-qwen2")
        policy.fused_head = fused
        policy.keep_logits = policy.keep_logits if keep_logits is None else keep_logits
        with audited(policy._ledger, "student") as result:
            update.sft_step(policy, PROMPTS, TARGETS, lr=1e-3)
        assert abs(result.rel_diff) < 0.02
        charged[fused], counted[fused] = result.charged_flops, result.instrumented_flops
    batch = update.supervised_batch(policy, PROMPTS, TARGETS)
    recompute = 2 * policy._model.config.vocab_size * policy._model.config.hidden_size * batch.input_ids.numel()
    recompute *= keep_logits == 0
    assert counted[True] - counted[False] == recompute
    assert charged[True] - charged[False] == recompute
    assert policy.recomputed_head_rows == batch.input_ids.numel() * (keep_logits == 0)  # the fused policy's


def test_on_cuda_the_fused_head_keeps_what_free_memory_holds():
    """Qwen2-0.5B's head in bf16 at 16 x 2048 tokens (24,592 rows with logits, 3.7e9 logits, 7.5 GB) on
    an 80 GiB device: kept with 15 GB free at the head's forward (the logits, the head's working set of
    1.9 GB and a margin of 5 GiB), recomputed with 14.5 GB; more memory keeps more logits, none free
    keeps none. Off CUDA a policy keeps up to `KEEP_LOGITS`, whatever the host's memory."""
    from bench.losses import keep_budget, keeps_logits
    from bench.policy import KEEP_LOGITS

    rows, vocab, dim, total = 24_592, 151_936, 896, 80 * 2**30

    def kept(spare: float) -> bool:
        return keeps_logits(rows, vocab, keep_budget(int(spare), total, rows, vocab, dim, 2, 2**27))

    assert kept(15e9) and not kept(14.5e9)
    budgets = [keep_budget(int(spare), total, rows, vocab, dim, 2, 2**27) for spare in (0, 10e9, 20e9, 40e9)]
    assert budgets[0] == 0 and budgets == sorted(budgets) and len(set(budgets)) == 4
    policy = _policy("tiny-qwen2")
    assert policy.keep_logits is None and policy.keep_budget(policy._model.lm_head.weight, 10**6) == KEEP_LOGITS


def test_updates_of_one_shape_compile_the_decoder_once():
    """A policy's compiled decoder is traced once, at the first update, not again at the second (a
    recompilation there would land inside a benchmark's timed steps, and costs a minute on a 0.5B
    model): the model stays in eval mode throughout, so no switch of mode retraces it."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    policy = _policy()  # built for training: build_tiny leaves it in train mode, which the policy ends
    assert not policy._model.training
    policy.compile_body, policy.compile_backend = True, "eager"
    batch = update.supervised_batch(policy, PROMPTS, TARGETS)
    for _ in range(3):
        policy.step(sft_loss(policy.logprobs(batch.input_ids, batch.attention_mask), batch.completion_mask), 1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_the_compiled_decoder_gives_the_same_logprobs_and_compiles_once_for_every_shape():
    """Batches of six shapes through the compiled decoder (the `eager` backend: dynamo's tracing and
    guards without code generation): eager log-probs, and one graph, its shapes symbolic from the
    first batch on, serves them all; the last, a single row, runs eagerly rather than compile a graph
    with its size fixed to 1."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager, compiled = _policy(), _policy()
    compiled.compile_body, compiled.compile_backend = True, "eager"
    shapes = [(2, TARGETS), (3, TARGETS), (6, TARGETS), (4, [t * 2 for t in TARGETS]), (5, TARGETS), (1, TARGETS)]
    for rows, targets in shapes:
        batch = update.supervised_batch(eager, PROMPTS[:rows], targets[:rows])
        want = eager.logprobs(batch.input_ids, batch.attention_mask)
        got = compiled.logprobs(batch.input_ids, batch.attention_mask)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert compiled._compiled is not None
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    # outside the update the decoder runs uncompiled, and the model's own module tree is untouched
    body = getattr(compiled._model, compiled._model.base_model_prefix)
    assert all(type(m).__name__ != "OptimizedModule" for m in (body, *body.layers))


def test_a_first_batch_as_wide_as_the_head_size_is_not_fixed_to_it():
    """By default dynamo gives sizes of equal value one symbol: a first batch as wide as the model's
    head size (32 here) would share that size's symbol, be fixed to it when attention's shapes meet
    the head's, and compile again at the next width. The compiled decoder gives every size a symbol
    of its own: widths and row counts equal to the model's sizes, then others, share one graph."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    policy = _policy("tiny-qwen2")
    policy.compile_body, policy.compile_backend = True, "eager"
    config = policy._model.config
    head = config.hidden_size // config.num_attention_heads
    for rows, width in ((config.num_key_value_heads, head), (3, head + 13), (head, 20)):
        ids = torch.randint(3, config.vocab_size, (rows, width), generator=torch.Generator().manual_seed(width))
        mask = torch.ones_like(ids)
        policy.step(sft_loss(policy.logprobs(ids, mask), mask), 1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1


def test_a_decoder_without_a_layer_list_compiles_whole():
    """GPT-2 keeps its blocks in `transformer.h`, not `layers`: its whole decoder stack is compiled
    instead, with the eager log-probs."""
    import torch._dynamo
    from transformers import GPT2Config, GPT2LMHeadModel

    torch._dynamo.reset()
    _, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    eager, compiled = (Policy(name, model, tokenizer, ledger=Ledger()) for name in ("eager", "compiled"))
    compiled.compile_body, compiled.compile_backend = True, "eager"
    batch = update.supervised_batch(eager, PROMPTS, TARGETS)
    torch.testing.assert_close(compiled.logprobs(batch.input_ids, batch.attention_mask),
                               eager.logprobs(batch.input_ids, batch.attention_mask), rtol=1e-5, atol=1e-6)
    parent, attribute, module = compiled._compiled
    assert parent is model and attribute == "transformer" and type(module).__name__ == "OptimizedModule"


def _head_grads(compile_backend: str | None, dtype: torch.dtype, max_logits: int, rows: int, keep_logits: int):
    """linear_token_logprobs' values and gradients on a fixed batch, the backward run in a thread of its
    own as autograd runs a CUDA backward."""
    import threading

    torch.manual_seed(2)
    hidden = (torch.randn(rows, 24) * 0.5).to(dtype).requires_grad_()
    weight = (torch.randn(97, 24) * 0.3).to(dtype).requires_grad_()
    targets, upstream = torch.randint(0, 97, (rows,)), torch.randn(rows)
    out = linear_token_logprobs(hidden, weight, targets, max_logits=max_logits, keep_logits=keep_logits,
                                compile_backend=compile_backend)
    backward = threading.Thread(target=lambda: (out * upstream).sum().backward())
    backward.start()
    backward.join()
    return out.detach(), hidden.grad, weight.grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_compiled_fused_head_gives_the_eager_values_and_recompiles_rarely(dtype):
    """The fused head's work after its matmuls under inductor (on this CPU its C++ code; on CUDA
    Triton's): the eager function's log-probs and gradients, in fp32 within 1e-6 and in bf16 within
    bf16's tolerance, with the backward in another thread. Four batches of rows and four logit
    budgets make forward chunks of 5 to 50 rows and vocabulary slices of 19 to 97 columns, the
    logits kept for the backward at two of them (chunks of 24 and 6 rows, every column) and
    recomputed at the others: each function compiles once, for every shape, though the first chunk
    has as many rows as the hidden states have columns (24), which would otherwise share one symbol
    and fix the rows to 24."""
    import torch._dynamo

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    for rows, max_logits, kept in ((24, 97 * 24, True), (50, 97 * 50, False), (37, 97 * 9, False),
                                   (29, 97 * 6, True)):
        keep_logits = rows * 97 if kept else 0
        want = _head_grads(None, dtype, max_logits, rows, keep_logits)
        got = _head_grads("inductor", dtype, max_logits, rows, keep_logits)
        tolerance = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-5)
        torch.testing.assert_close(got[0], want[0], **tolerance)
        for g, w in zip(got[1:], want[1:]):
            assert float((g.float() - w.float()).norm()) <= tolerance["rtol"] * float(w.float().norm())
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_two_forms_of_a_backward_block_are_equal(dtype):
    """The backward's block compiled (the target's column by comparison) and run eagerly (by scatter,
    in place), both run eagerly here: the same values, exactly, with targets before, inside and after
    the block."""
    from bench.losses import _head_grad, _head_grad_pointwise

    torch.manual_seed(3)
    logits = (torch.randn(40, 16) @ torch.randn(30, 16).T).to(dtype)
    lse, grad, local = torch.randn(40) + 5, torch.randn(40), torch.randint(-20, 50, (40,))
    assert ((local >= 0) & (local < 30)).any() and (local < 0).any() and (local >= 30).any()
    assert torch.equal(_head_grad_pointwise(logits, lse, grad, local), _head_grad(logits.clone(), lse, grad, local))


def test_a_policy_with_a_fused_optimizer_bumps_its_weights_versions():
    """AdamW's fused kernel writes the weights without bumping their version counters, the vLLM
    engine's sign of changed weights: `step` bumps them itself. The step equals the multi-tensor
    one's within fp32 rounding, and a checkpoint's optimiser comes back fused."""
    from bench.rollout.vllm_engine import _fingerprint

    batch = update.supervised_batch(_policy(), PROMPTS, TARGETS)
    weights = []
    for fused in (False, True):
        policy = _policy()
        policy.fused_optimizer = fused
        before = _fingerprint(policy._model)
        policy.step(sft_loss(policy.logprobs(batch.input_ids, batch.attention_mask), batch.completion_mask), 1e-3)
        after = _fingerprint(policy._model)
        assert all(v1 > v0 for (_, v0), (_, v1) in zip(before, after))
        assert all(g.get("fused") is fused for g in policy._optimizer.param_groups)
        weights.append([p.detach().clone() for p in policy._model.parameters()])
    for a, b in zip(*weights):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    restored = _policy()
    restored._load_state(policy._state())
    assert all(g.get("fused") for g in restored._optimizer.param_groups)


def test_right_padded_masks():
    from bench.policy import right_padded

    assert right_padded(torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [0, 0, 0]]))
    assert not right_padded(torch.tensor([[1, 1, 1], [0, 1, 1]]))  # left padding
    assert not right_padded(torch.tensor([[1, 0, 1]]))  # a hole


def test_a_right_padded_batch_without_its_mask_gives_the_same_logprobs_gradients_and_charge():
    """On CUDA `logprobs` drops a right-padded batch's attention mask (`drops_padding_mask`): here on
    the CPU, in fp32, the real positions' log-probs and the masked loss's gradients equal the masked
    run's and the ledger charges the same. The counter, which counts the pairs a mask allows, now
    also counts the pairs among each row's p padding positions, p (p + 1) / 2 of them, forward and
    backward: the ledger charged them already, as padding is computed. A left-padded batch keeps its
    mask: its log-probs are the masked run's exactly."""
    from bench.policy import right_padded

    batch = update.supervised_batch(_policy(), PROMPTS, TARGETS)
    mask = batch.attention_mask
    assert right_padded(mask) and not bool(mask.all())  # rows of several lengths
    real = mask.bool()
    left = torch.stack([row.roll(int((~m.bool()).sum())) for row, m in zip(batch.input_ids, mask)])
    left_mask = torch.stack([m.roll(int((~m.bool()).sum())) for m in mask])
    assert not right_padded(left_mask)
    results = {}
    for drop in (False, True):
        policy = _policy("tiny-qwen2")
        policy.drop_padding_mask = drop
        with audited(policy._ledger, "student") as result:
            lp = policy.logprobs(batch.input_ids, mask)
            sft_loss(lp, batch.completion_mask).backward()
        grads = {n: p.grad.clone() for n, p in policy._model.named_parameters()}
        with torch.no_grad():
            lp_left = policy.logprobs(left, left_mask)
        results[drop] = (lp.detach(), grads, result.charged_flops, result.instrumented_flops, lp_left)
    (lp0, g0, charged0, counted0, left0), (lp1, g1, charged1, counted1, left1) = results[False], results[True]
    torch.testing.assert_close(lp1[real], lp0[real], rtol=1e-5, atol=1e-6)
    for name in g0:
        torch.testing.assert_close(g1[name], g0[name], rtol=1e-4, atol=1e-6, msg=name)
    pads = (~mask.bool()).sum(1)
    padding_pairs = int((pads * (pads + 1) // 2).sum())
    assert charged1 == charged0 and counted1 - counted0 == 3 * policy._model.flop_spec.pair_flops * padding_pairs
    assert torch.equal(left1, left0)


def test_the_compiled_decoder_takes_causal_attention_for_a_right_padded_batch():
    """What dropping the mask is for: traced by torch.compile, the attention of a padded batch gets
    an explicit [B, 1, T, T] mask and no grouped-query attention when the mask is passed, and the
    causal flag with grouped-query attention when it is not."""
    import torch._dynamo

    seen = []

    def backend(gm, inputs):
        seen.extend(dict(node.kwargs) for node in gm.graph.nodes if node.target is F.scaled_dot_product_attention)
        return gm.forward

    batch = update.supervised_batch(_policy(), PROMPTS, TARGETS)
    for drop in (False, True):
        torch._dynamo.reset()
        seen.clear()
        policy = _policy("tiny-qwen2")
        policy.compile_body, policy.compile_backend, policy.drop_padding_mask = True, backend, drop
        policy.logprobs(batch.input_ids, batch.attention_mask).sum().backward()
        assert seen and all(k["is_causal"] is drop and (k.get("attn_mask") is None) is drop for k in seen)
        assert all(bool(k.get("enable_gqa")) is drop for k in seen)
        # compiled layer by layer: one graph of one layer's attention serves both layers
        assert len(policy._model.model.layers) == 2 and len(seen) == 1
