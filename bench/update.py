"""The update engine: every training step of every method goes through `run_update`.

A batch [B, T] (prompt + completion, right-padded) is cut into length buckets: rows of similar
length, each bucket at its own padded width and below `LOGIT_BUDGET` logits. For each bucket the
policy's log-probs are computed with gradients, a loss function turns them into the bucket's loss,
and the bucket's loss, weighted so that the weighted sum is the whole batch's loss, is
backpropagated; one optimiser step follows each epoch. The whole update is clocked as kind `update`
on the policy's ledger (its FLOPs are charged by the policy's meter, whatever the loss).

Clients: `pg_update` (`RunContext.pg_step`: policy gradient with GRPO's normalisations), `sft_step`
(`RunContext.sft_step` and the warm-ups of `bench.world.prepare`), and any method's own loss through
`RunContext.update`.

    def loss_fn(bucket: Bucket) -> tuple[torch.Tensor, dict[str, float]]:
        adv = bucket.take(advantages)                                   # [b]
        per_row = masked_mean(bucket.logprobs, bucket.mask, dim=1)      # [b]
        return -(adv * per_row).mean(), {}

    stats = run_update(policy, rollouts, loss_fn, lr=1e-3)              # {"loss", "grad_norm", ...}
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from bench.losses import policy_gradient_loss, sft_loss
from bench.policy import Policy

# At most this many logits (rows x width x vocabulary) per micro-batch: the fp32 log-softmax of a
# 152k-token vocabulary over 64 rows of 200 tokens alone is 7.8 GB. Tiny models never reach it.
LOGIT_BUDGET = 2**29
BUCKET_ROWS = 64
WEIGHTINGS = ("rows", "tokens")


class TokenBatch(Protocol):
    """What an update trains on: right-padded [B, T] tensors (`Rollouts` is one)."""

    input_ids: torch.Tensor  # [B, T] int64
    attention_mask: torch.Tensor  # [B, T] 1 on real tokens
    completion_mask: torch.Tensor  # [B, T] 1 on the tokens the loss is about


@dataclass(frozen=True)
class SupervisedBatch:
    """Prompt + target rows for a supervised step; `completion_mask` marks the target tokens."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor


@dataclass
class Bucket:
    """One micro-batch of an update, as a loss function sees it.

    `logprobs` [b, width] are the policy's per-token log-probs of the bucket's rows, with gradients
    (0 before the completion's first column); `mask` [b, width] is their completion mask, on the
    policy's device. `take(x)` cuts a batch-sized tensor, x [B] or [B, T], to the bucket's rows (and
    width) and moves it to that device.
    """

    rows: torch.Tensor  # [b] int64: rows of the batch, in the bucket's order
    width: int
    epoch: int
    logprobs: torch.Tensor
    mask: torch.Tensor

    def take(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.logprobs.device)
        return x[self.rows] if x.dim() == 1 else x[self.rows, : self.width]


LossFn = Callable[[Bucket], "torch.Tensor | tuple[torch.Tensor, dict[str, float]]"]


def length_buckets(
    attention_mask: torch.Tensor, rows: int = BUCKET_ROWS, vocab: int = 1, keep_order: bool = False
) -> list[tuple[torch.Tensor, int]]:
    """Row index groups of similar length, each with its own padded width.

    Rows of a right-padded batch [B, T] are sorted by real length and cut into groups of at most
    `rows`, so that a mixed-domain batch does not pay every forward and backward at the longest row's
    width; with `vocab`, a group also stops before its logits would pass `LOGIT_BUDGET` (big vocabularies).
    A group lists its rows shortest first, or in batch order with `keep_order`.
    """
    lengths = attention_mask.sum(1).tolist()  # [B]
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    out, group = [], []

    def close() -> None:
        out.append((torch.tensor(sorted(group) if keep_order else group), max(lengths[j] for j in group)))

    for i in order:  # ascending length: the newest row sets the group's width
        if group and (len(group) == rows or (len(group) + 1) * lengths[i] * vocab > LOGIT_BUDGET):
            close()
            group = []
        group.append(i)
    if group:
        close()
    return out


def update_buckets(policy: Policy, attention_mask: torch.Tensor, keep_order: bool = False
                   ) -> list[tuple[torch.Tensor, int]]:
    """The micro-batches `run_update` cuts a batch into for `policy` (`length_buckets`): under
    `LOGIT_BUDGET` logits each, except where the head is fused, which holds one chunk of logits at a
    time whatever the bucket."""
    vocab = 1 if policy.fuses_head else policy.vocab_size
    return length_buckets(attention_mask, vocab=vocab, keep_order=keep_order)


def completion_width(completion_mask: torch.Tensor) -> int:
    """Columns from the earliest completion token of any row to the end: [B, T] -> int (T if none)."""
    columns = completion_mask.bool().any(0)  # [T]: does any row have a completion token there
    if not columns.any():
        return completion_mask.shape[1]
    return completion_mask.shape[1] - int(columns.int().argmax())


def bucket_weights(buckets: list[tuple[torch.Tensor, int]], mask: torch.Tensor, weighting: str) -> list[float]:
    """Weights that make the sum of per-bucket losses equal the whole batch's loss.

    `rows`: for a loss that is a mean over rows (each bucket's loss a mean over its rows); `tokens`:
    for a mean over completion tokens (each bucket's loss a mean over its tokens).
    """
    if weighting == "tokens":
        total = float(mask.sum().clamp(min=1))
        return [float(mask[rows].sum()) / total for rows, _ in buckets]
    return [len(rows) / mask.shape[0] for rows, _ in buckets]


def run_update(
    policy: Policy,
    batch: TokenBatch,
    loss_fn: LossFn,
    *,
    lr: float,
    epochs: int = 1,
    weighting: str = "rows",
    warmup_updates: int = 0,
    logits: str = "completion",
    order: str = "length",
) -> dict[str, float]:
    """`epochs` optimiser steps of `policy` on `batch`, each over all length buckets; returns the stats.

    `loss_fn(bucket)` returns the bucket's loss (a scalar tensor), or the loss and a dict of float
    statistics; statistics and loss are combined across buckets with the same weights (`weighting`:
    `rows` or `tokens`, see `bucket_weights`). Returns {"loss", <the loss function's stats>,
    "grad_norm"} of the last epoch. `logits`: `completion` computes LM-head logits from the
    completion's first column only (`Policy.logprobs`' `keep`), `all` on every position; `order`:
    `length` or `batch`, the order of rows inside a bucket (see `length_buckets`).
    """
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if logits not in ("completion", "all") or order not in ("length", "batch") or epochs < 1:
        raise ValueError(f"need logits in (completion, all), order in (length, batch) and epochs >= 1, "
                         f"got {logits!r}, {order!r}, {epochs!r}")
    mask = batch.completion_mask.to(policy.device)  # [B, T]
    buckets = update_buckets(policy, batch.attention_mask, keep_order=order == "batch")
    weights = bucket_weights(buckets, mask, weighting)
    stats: dict[str, float] = {}
    with policy._clock("update"):
        for epoch in range(epochs):
            total, sums = 0.0, {}
            for (rows, width), weight in zip(buckets, weights):
                keep = completion_width(batch.completion_mask[rows, :width]) if logits == "completion" else None
                logprobs = policy.logprobs(batch.input_ids[rows, :width], batch.attention_mask[rows, :width],
                                           keep=keep)  # [b, width]
                out = loss_fn(Bucket(rows, width, epoch, logprobs, mask[rows, :width]))
                loss, part = out if isinstance(out, tuple) else (out, {})
                (loss * weight).backward()
                policy.gather_gradients()  # where AdamW steps fp32 weights: the buckets summed in fp32
                total += float(loss.detach()) * weight
                for key, value in part.items():
                    sums[key] = sums.get(key, 0.0) + value * weight
            stats = {"loss": total, **sums, "grad_norm": policy.step(None, lr, warmup_updates)}
    return stats


def pg_update(
    policy: Policy,
    rollouts: TokenBatch,
    advantages: torch.Tensor,
    *,
    lr: float,
    loss_type: str = "grpo",
    epochs: int = 1,
    clip_eps: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    warmup_updates: int = 0,
    max_completion_tokens: int | None = None,
) -> dict[str, float]:
    """Policy-gradient update(s) on the rollouts; advantages [B] or per-token [B, T] (`RunContext.pg_step`).

    The first epoch's log-probs (detached) are the old policy: with one epoch the ratio is 1 and the
    loss is plain REINFORCE with group baselines; more epochs clip the ratio at `clip_eps`.
    `ref_logprobs` [B, T] (with `kl_coef`) add the k3 KL term to a reference. Returns
    {"loss", "clip_frac", "clip_region", "grad_norm"} (`policy_gradient_loss` defines the two clip shares).
    """
    device = policy.device
    advantages = advantages.to(device)
    ref = ref_logprobs.to(device) if ref_logprobs is not None else None
    old_logprobs = torch.zeros(rollouts.completion_mask.shape, device=device)  # [B, T], filled by the first epoch
    # the last epoch's clip counts over the batch's completion tokens: a bucket's share weighs by its
    # tokens, whatever weight its loss has (rows for grpo and dr_grpo)
    clipped = {"clip_frac": 0.0, "clip_region": 0.0}
    tokens = float(rollouts.completion_mask.sum()) or 1.0

    def loss_fn(bucket: Bucket) -> torch.Tensor:
        rows, width = bucket.rows, bucket.width
        if bucket.epoch == 0:
            old_logprobs[rows, :width] = bucket.logprobs.detach()
        adv = advantages[rows] if advantages.dim() == 1 else advantages[rows, :width]
        loss, part = policy_gradient_loss(
            bucket.logprobs,
            old_logprobs[rows, :width],
            adv,
            bucket.mask,
            loss_type=loss_type,
            clip_eps=clip_eps,
            ref_logprobs=None if ref is None else ref[rows, :width],
            kl_coef=kl_coef,
            max_completion_tokens=max_completion_tokens,
        )
        if bucket.epoch == epochs - 1:
            share = float(bucket.mask.sum()) / tokens
            for key in clipped:
                clipped[key] += part[key] * share
        return loss

    stats = run_update(policy, rollouts, loss_fn, lr=lr, epochs=epochs, warmup_updates=warmup_updates,
                       weighting="tokens" if loss_type == "dapo" else "rows")
    return {"loss": stats["loss"], **clipped, "grad_norm": stats["grad_norm"]}


def supervised_batch(policy: Policy, prompts: Sequence[str], targets: Sequence[str]) -> SupervisedBatch:
    """Prompt + target + `eos_id` rows (a chat turn's end, where the policy chats in a template that has
    one), right-padded; the target tokens (that token included) are the completion."""
    rows, masks = [], []
    for prompt, target in zip(prompts, targets):
        p, t = policy.encode_prompt(prompt), policy.encode(target) + [policy.eos_id]
        rows.append(p + t)
        masks.append([0] * len(p) + [1] * len(t))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), policy.pad_id, dtype=torch.long)  # [B, T]
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    target_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, m) in enumerate(zip(rows, masks)):
        input_ids[i, : len(r)] = torch.tensor(r)
        attention[i, : len(r)] = 1
        target_mask[i, : len(m)] = torch.tensor(m)
    return SupervisedBatch(input_ids, attention, target_mask)


def sft_step(policy: Policy, prompts: Sequence[str], targets: Sequence[str], *, lr: float) -> float:
    """One supervised step: maximise log p(target + EOS | prompt), mean over target tokens. Returns the loss.

    Buckets are token-weighted, so the step's loss and gradients are those of one padded batch (up to
    float summation order). Rows keep their batch order inside a bucket and logits are computed on
    every position, so a batch that fits one bucket (every warm-up batch of the tiny worlds) is
    computed exactly as one padded batch: the prepared base models' bytes do not depend on bucketing.
    """
    batch = supervised_batch(policy, prompts, targets)
    stats = run_update(policy, batch, lambda bucket: sft_loss(bucket.logprobs, bucket.mask), lr=lr,
                       weighting="tokens", logits="all", order="batch")
    return stats["loss"]
