"""Loss pieces shared by every method: one function each, unit-tested once, never copied.

Shapes: B sequences, T positions (prompt + completion, right-padded). `mask` marks completion tokens.
Log-probs at position t are of token t given tokens < t (targets already shifted by `token_logprobs`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F

# The policy-gradient normalisations (`policy_gradient_loss`): the one list every config checks against.
LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-prob of each token under the logits of the position before it.

    logits [B, T, V], input_ids [B, T] -> [B, T]; position 0 (no predecessor) gets 0.
    """
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)  # [B, T-1, V]
    picked = logp.gather(-1, input_ids[:, 1:, None]).squeeze(-1)  # [B, T-1]
    return F.pad(picked, (1, 0))


def _head_rows(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of the fused head's forward from their logits (the head's matmul, in its dtype): log
    softmax(logits)[targets] and each row's log-sum-exp. logits [c, V], targets [c] -> [c], [c] fp32."""
    logits = logits.float()
    lse = torch.logsumexp(logits, dim=-1)
    return logits.gather(1, targets[:, None]).squeeze(1) - lse, lse


def _head_grad(logits: torch.Tensor, lse: torch.Tensor, grad: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """The fused head's backward over a block of logits: the gradient of the rows' log-probs (weighted
    by `grad`) with respect to their logits, g (onehot(target) - softmax). logits [N, c] (the head's
    matmul over a slice of the vocabulary's columns, in its dtype), lse and grad [N] fp32, local [N]
    (each target's column in the block; outside it where the target is not in the block) -> [N, c]
    in the logits' dtype. Eager: in place, one buffer of fp32 logits (fp32 logits themselves)."""
    dlogits = logits.float().sub_(lse[:, None]).exp_().mul_(-grad[:, None])  # -g softmax
    inside = (local >= 0) & (local < logits.shape[1])
    dlogits.scatter_add_(1, local.clamp(0, logits.shape[1] - 1)[:, None], (grad * inside)[:, None])
    return dlogits.to(logits.dtype)


def _head_grad_pointwise(logits: torch.Tensor, lse: torch.Tensor, grad: torch.Tensor,
                         local: torch.Tensor) -> torch.Tensor:
    """`_head_grad` with the target's column picked by a comparison instead of a scatter, the same
    values: compiled, it is one kernel (a scatter would split it in three and keep the fp32 logits in
    memory between them); run eagerly, each op is a pass."""
    scaled = torch.exp(logits.float() - lse[:, None]) * grad[:, None]  # g softmax
    hit = torch.arange(logits.shape[1], device=logits.device)[None, :] == local[:, None]
    return torch.where(hit, grad[:, None] - scaled, -scaled).to(logits.dtype)


def distinct_symbols() -> contextlib.AbstractContextManager:
    """For code traced by `torch.compile` with symbolic sizes in the block: a symbol of its own for
    every size. By default dynamo gives sizes of equal value one symbol, so a first chunk of as many
    rows as the model's hidden size, or a batch as wide as its head size, would be fixed to that size
    when the two meet in a matmul or a broadcast, and compiled again at the next size."""
    import torch.fx.experimental._config

    return torch.fx.experimental._config.patch(use_duck_shape=False)


def _symbolic(fn: Callable, backend: str) -> Callable:
    """`fn` under `torch.compile` with `backend`, every size symbolic and a symbol of its own."""
    compiled = torch.compile(fn, backend=backend, dynamic=True)

    def call(*args):
        with distinct_symbols():
            return compiled(*args)

    return call


# `torch.compile`d forward and backward functions, one pair per backend (`linear_token_logprobs`'s
# `compile_backend`): each fuses its elementwise work and reductions over the [rows, vocabulary]
# logits into a kernel or two after the matmul, where eagerly each op is one more pass over them.
_COMPILED: dict[str, tuple[Callable, Callable]] = {}


def _head_functions(backend: str | None) -> tuple[Callable, Callable]:
    if backend is None:
        return _head_rows, _head_grad
    if backend not in _COMPILED:
        _COMPILED[backend] = tuple(_symbolic(fn, backend) for fn in (_head_rows, _head_grad_pointwise))
    return _COMPILED[backend]


class _LinearTokenLogprobs(torch.autograd.Function):
    """log_softmax(hidden @ weight^T)[target] per row, at most `max_logits` fp32 logits alive at a time,
    the head's logits kept for the backward where there are at most `keep_logits` of them (see
    `linear_token_logprobs`)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, max_logits, keep_logits, on_recompute, backend):
        # [N, d], [V, d], [N] -> [N]
        rows_fn, _ = _head_functions(backend)
        out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(out)
        kept = keeps_logits(hidden.shape[0], weight.shape[0], keep_logits)
        logits = hidden.detach() @ weight.detach().T if kept else None  # [N, V]: one matmul, kept
        # rows at a time, every vocabulary column each; views detached, so that a compiled function
        # sees plain tensors (it would guard on a view's base, and recompile when that changes)
        for rows in row_parts(hidden.shape[0], weight.shape[0], max_logits):
            block = logits[rows] if kept else hidden[rows].detach() @ weight.detach().T
            out[rows], lse[rows] = rows_fn(block.detach(), targets[rows].detach())
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.logits, ctx.max_logits, ctx.on_recompute, ctx.backend = logits, max_logits, on_recompute, backend
        return out

    @staticmethod
    def backward(ctx, grad):  # grad [N] -> [N, d], [V, d]
        hidden, weight, targets, lse = ctx.saved_tensors
        _, grad_fn = _head_functions(ctx.backend)
        want_hidden, want_weight = ctx.needs_input_grad[:2]
        grad = grad.float()
        if ctx.logits is not None:
            # the kept logits become their gradient in place, rows at a time, then the eager path's
            # two matmuls: nothing recomputed, no more memory
            dlogits, ctx.logits = ctx.logits, None
            for rows in row_parts(hidden.shape[0], weight.shape[0], ctx.max_logits):
                block = dlogits[rows]
                got = grad_fn(block.detach(), lse[rows].detach(), grad[rows].detach(), targets[rows].detach())
                if got.data_ptr() != block.data_ptr():
                    block.copy_(got)
            grad_hidden = dlogits @ weight.detach() if want_hidden else None
            grad_weight = dlogits.T @ hidden.detach() if want_weight else None
            return grad_hidden, grad_weight, None, None, None, None, None
        grad_weight = torch.empty_like(weight) if want_weight else None
        # Recomputed a slice of vocabulary columns at a time, every row each: each slice's rows of the
        # weight's gradient are one matmul over all N rows, written once. Slicing rows instead would
        # add a [V, d] partial into the weight's gradient per slice, 4 passes over V x d whatever the
        # slice's size (docs/gpu.md). The hidden states' gradient is summed over the slices in fp32;
        # with one slice it is the eager path's one matmul.
        slices = vocab_slices(hidden.shape[0], weight.shape[0], ctx.max_logits)
        sliced = len(slices) > 1
        grad_hidden = None
        if want_hidden and sliced:
            accumulate = torch.promote_types(hidden.dtype, torch.float32)
            grad_hidden = torch.zeros(hidden.shape, dtype=accumulate, device=hidden.device)
        for columns in slices:
            part = weight[columns].detach()  # [c, d]
            dlogits = grad_fn(hidden.detach() @ part.T, lse, grad, targets - columns.start)  # [N, c]
            if want_hidden and sliced:
                grad_hidden.add_(_mm_accumulating(dlogits, part))  # each slice's part in fp32, not rounded
            elif want_hidden:
                grad_hidden = dlogits @ part
            if want_weight:
                grad_weight[columns] = dlogits.T @ hidden
        if ctx.on_recompute is not None:
            ctx.on_recompute(hidden.shape[0])
        grad_hidden = None if grad_hidden is None else grad_hidden.to(hidden.dtype)
        return grad_hidden, grad_weight, None, None, None, None, None


def keeps_logits(rows: int, vocab: int, keep_logits: int) -> bool:
    """Whether `linear_token_logprobs` keeps the head's logits of `rows` rows for its backward (at most
    `keep_logits` of them) instead of recomputing them there."""
    return rows * vocab <= keep_logits


# Device memory the fused head leaves free when it keeps its logits, for the rest of the update (the
# loss, a tied embedding's second gradient) and the allocator's fragmentation: 1/16 of the device's.
KEEP_MARGIN = 1 / 16


def keep_budget(spare: int, total: int, rows: int, vocab: int, dim: int, itemsize: int, max_logits: int) -> int:
    """The most logits `linear_token_logprobs` may keep for its backward over `rows` rows of a [vocab,
    dim] head with `spare` bytes of a `total`-byte device's memory free at its forward: what is left,
    at `itemsize` bytes a logit, after the head's own working set besides them and `KEEP_MARGIN`. The
    working set: its fp32 temporaries over a part of at most `max_logits` logits (up to three alive
    at once: the forward's cast and its log-sum-exp's, the backward's cast), and the gradients of
    the hidden states and of the head's weight in the model's dtype. The forward runs after the
    decoder's, so `spare` already leaves out its activations; and the backward frees the logits
    before the decoder's backward begins."""
    working = 3 * 4 * min(max_logits, rows * vocab) + (rows + vocab) * dim * itemsize
    return max(0, int(spare - working - KEEP_MARGIN * total) // itemsize)


def vocab_slices(rows: int, vocab: int, max_logits: int) -> list[slice]:
    """The slices of the vocabulary `linear_token_logprobs`'s backward takes, one at a time, over `rows` rows."""
    return _even_parts(vocab, max(1, max_logits // rows))


def row_parts(rows: int, vocab: int, max_logits: int) -> list[slice]:
    """The slices of rows `linear_token_logprobs` takes one at a time, every vocabulary column each: its
    forward, and its backward where it kept the logits."""
    return _even_parts(rows, max(1, max_logits // vocab))


def _even_parts(total: int, most: int) -> list[slice]:
    """0..total in the fewest parts of at most `most` each, their sizes within one of each other: no
    tail of a few rows or columns, which would be one more shape for a compiled function."""
    count = -(-total // most)
    size, extra = divmod(total, count)
    bounds = [0]
    for i in range(count):
        bounds.append(bounds[-1] + size + (i < extra))
    return [slice(a, b) for a, b in zip(bounds, bounds[1:])]


def _mm_accumulating(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b with a result of at least fp32: a bf16 or fp16 product is not rounded to its inputs' dtype
    (on CUDA cuBLAS's GEMM with an fp32 output, elsewhere an fp32 matmul of the same values)."""
    if a.dtype in (torch.bfloat16, torch.float16):
        return torch.mm(a, b, out_dtype=torch.float32) if a.is_cuda else a.float() @ b.float()
    return a @ b


def head_recompute_flops(weight: torch.Tensor, rows: int) -> int:
    """FLOPs of `linear_token_logprobs`'s recomputation in its backward over `rows` rows: one more
    LM-head forward, 2 x the head's weight per row (what `on_recompute(rows)` is to charge)."""
    return 2 * weight.numel() * rows


def linear_token_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *, max_logits: int,
                          keep_logits: int = 0, on_recompute: Callable[[int], None] | None = None,
                          compile_backend: str | None = None) -> torch.Tensor:
    """log softmax(hidden @ weight^T)[targets] without materialising every logit in fp32: the LM head
    and the log-softmax fused, in fp32 as `token_logprobs` computes them, at most `max_logits` fp32
    logits alive at a time (the forward takes slices of rows, the backward slices of rows or of the
    vocabulary).

    hidden [N, d] (model dtype), weight [V, d] (the LM head), targets [N] int64 -> [N] float32, with
    gradients to hidden and weight. The backward needs the logits again. Where there are at most
    `keep_logits` of them (N x V), the forward keeps the head's output, in the model's dtype (2 bytes
    a logit in bf16; the eager path keeps its fp32 log-softmax, 4, and holds 10 at its forward's
    peak), and the backward turns it into its gradient in place: the eager path's three head
    matmuls. Otherwise the backward recomputes them, a slice at a time (one more LM-head forward
    over the N rows, which `on_recompute(N)` is told of so that it can be charged), rather than keep
    N x V logits alive: 7.8 GB in fp32 for 64 rows of 200 tokens under a 152k vocabulary.

    With `compile_backend`, the work after each matmul runs under `torch.compile` with that backend
    (shapes dynamic: one graph per direction for every size); otherwise eagerly, as several passes
    over their logits.
    """
    return _LinearTokenLogprobs.apply(hidden, weight, targets, max_logits, keep_logits, on_recompute,
                                      compile_backend)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


GROUP_STDS = ("population", "sample")


def group_advantages(rewards: torch.Tensor, group_size: int, scale: bool = True,
                     std: str = "population") -> torch.Tensor:
    """GRPO advantages: reward minus its group's mean, divided by the group's std when `scale`.

    rewards [G * n] grouped consecutively (n = group_size) -> [G * n]. Dr. GRPO uses scale=False.
    `std`: "population" divides the squared deviations by n, "sample" by n - 1 as TRL does; at n = 8
    population-scaled advantages are sqrt(8/7) = 1.069x TRL's.
    """
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if std not in GROUP_STDS:
        raise ValueError(f"std must be one of {', '.join(GROUP_STDS)}, got {std!r}")
    grouped = rewards.float().view(-1, group_size)  # [G, n]
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale:
        centred = centred / (grouped.std(dim=1, keepdim=True, unbiased=std == "sample") + 1e-4)
    return centred.view(-1)


def distillation_advantages(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor) -> torch.Tensor:
    """On-policy distillation: per-token advantage log p_teacher(x_t) - log p_student(x_t), detached.

    Maximising it with a policy gradient on the student's own samples minimises the reverse KL
    KL(student || teacher) one sampled token at a time. [B, T] -> [B, T].
    """
    return (teacher_logprobs - student_logprobs).detach()


def reverse_kl_estimate(teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, mask: torch.Tensor) -> float:
    """Per-token reverse KL, estimated on the student's samples: mean of log p_s - log p_t."""
    return float(masked_mean(student_logprobs - teacher_logprobs, mask))


def policy_gradient_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    clip_eps: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_completion_tokens: int | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped-ratio policy-gradient loss with TRL's normalisations.

    logprobs / old_logprobs / ref_logprobs / mask: [B, T]; advantages [B] (one per sequence) or
    [B, T] (per token, as in distillation). Normalisation of the summed per-token loss:
    `grpo` mean per sequence then over sequences; `dr_grpo` divide by B x max_completion_tokens;
    `dapo` divide by the number of completion tokens in the batch. KL to a reference uses the k3
    estimator exp(ref - logp) - (ref - logp) - 1.

    Statistics, as shares of the completion tokens: `clip_frac`, those whose ratio lies outside
    [1 - clip_eps, 1 + clip_eps] (PPO's clipfrac as OpenAI Baselines logs it); `clip_region`, those
    whose gradient the clip removed, outside on the side the advantage pushes towards (TRL's
    `clip_ratio/region_mean`). With one epoch the ratio is 1 and both are 0.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; allowed: {', '.join(LOSS_TYPES)}")
    mask = mask.to(logprobs.dtype)
    adv = advantages if advantages.dim() == 2 else advantages[:, None]  # [B, T] or [B, 1]
    ratio = torch.exp(logprobs - old_logprobs)
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps)
    per_token = -torch.minimum(ratio * adv, clipped * adv)  # [B, T]
    stats: dict[str, float] = {}
    if ref_logprobs is not None and kl_coef:
        delta = ref_logprobs - logprobs
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + kl_coef * kl
        stats["kl_ref"] = float(masked_mean(kl.detach(), mask))
    if loss_type == "grpo":
        loss = masked_mean(per_token, mask, dim=1).mean()
    elif loss_type == "dr_grpo":
        width = max_completion_tokens or int(mask.sum(1).max().item())
        loss = (per_token * mask).sum() / (mask.shape[0] * max(width, 1))
    else:
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
    outside = (ratio - clipped).abs() > 0
    active = ((ratio > 1 + clip_eps) & (adv > 0)) | ((ratio < 1 - clip_eps) & (adv < 0))
    stats["clip_frac"] = float(masked_mean(outside.float().detach(), mask))
    stats["clip_region"] = float(masked_mean(active.float().detach(), mask))
    return loss, stats


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of the masked (target) tokens, mean per token. [B, T] -> scalar."""
    return -masked_mean(logprobs, mask)
