"""The rollout contract: what a rollout engine returns (`RolloutBatch`), what it must do
(`RolloutBackend`), the helpers that turn a batch into training tensors, and the scored, padded
batch that methods get (`Rollouts`, from `RunContext.rollout`).

Engines: `bench.rollout.torch_engine` (PyTorch, any device) and `bench.rollout.vllm_engine` (vLLM);
`bench.rollout.engines.make_backend` picks one by name. Every forward pass an engine makes must be
charged to the model's ledger, by its meter or analytically (docs/design.md, FLOP accounting).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from bench.errors import RunError


@dataclass
class RolloutBatch:
    """`n` completions for each of `len(prompt_ids)` prompts.

    completion_ids / logprobs / lengths / finished are grouped: index i*n + j is sample j of prompt i.
    `logprobs[k]` [lengths[k]] (float32) holds, for each sampled token y_t of completion k,
    log softmax(z_t)[y_t], where z_t are the model's raw logits after prompt + y_<t: the log-prob under
    the *unscaled* model distribution (temperature 1, no top-p truncation), whatever temperature and
    top_p were sampled with: the model's own log-prob, which a policy-gradient or distillation step
    trains, and the sampling distribution's only when temperature == 1 and top_p == 1 (every
    built-in method's default; TRL instead divides the logits by the temperature before its loss).
    `lengths[k]` counts generated tokens, EOS included when emitted; `finished[k]` is True iff the
    completion ended with EOS (False when it hit max_new_tokens).
    """

    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    logprobs: list[torch.Tensor]
    lengths: list[int]
    finished: list[bool]

    @property
    def n(self) -> int:
        """Samples per prompt."""
        return len(self.completion_ids) // max(1, len(self.prompt_ids))

    @property
    def total_tokens(self) -> int:
        return sum(self.lengths)


def _row_layout(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Prompt lengths [B], prompt + completion lengths [B], and the padded width T."""
    n = batch.n
    prompt_lens = torch.tensor([len(batch.prompt_ids[k // n]) for k in range(len(batch.completion_ids))])
    total_lens = prompt_lens + torch.tensor(batch.lengths, dtype=torch.long)
    return prompt_lens, total_lens, int(total_lens.max()) if len(total_lens) else 0


def to_padded(batch: RolloutBatch, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pack prompt + completion of every sample into right-padded tensors for training.

    Returns input_ids [B, T] (pad_id after each sequence), attention_mask [B, T] (1 on real
    tokens) and completion_mask [B, T] (1 on completion tokens), all int64, B = len(completion_ids).
    """
    n = batch.n
    seqs = [torch.tensor(batch.prompt_ids[k // n] + c, dtype=torch.long) for k, c in enumerate(batch.completion_ids)]
    if not seqs:
        empty = torch.zeros(0, 0, dtype=torch.long)
        return empty, empty.clone(), empty.clone()
    input_ids = torch.nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=pad_id)  # [B, T]
    prompt_lens, total_lens, width = _row_layout(batch)
    cols = torch.arange(width)[None, :]  # [1, T]
    attention_mask = (cols < total_lens[:, None]).long()  # [B, T]
    completion_mask = attention_mask * (cols >= prompt_lens[:, None]).long()  # [B, T]
    return input_ids, attention_mask, completion_mask


def padded_logprobs(batch: RolloutBatch) -> torch.Tensor:
    """The rollout log-probs in `to_padded`'s layout: [B, T], entry t is the log-prob of token t, 0 off completions."""
    prompt_lens, _, width = _row_layout(batch)
    out = torch.zeros(len(batch.completion_ids), width)  # [B, T]
    for k, lp in enumerate(batch.logprobs):
        start = int(prompt_lens[k])
        out[k, start : start + lp.numel()] = lp
    return out


@runtime_checkable
class RolloutBackend(Protocol):
    """Samples completions; every forward pass it makes must be charged to the model's ledger."""

    def generate(
        self,
        model: torch.nn.Module,
        prompts: Sequence[Sequence[int]],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        eos_id: int | Sequence[int],
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        """`n` completions per prompt (grouped), each at most `max_new_tokens`, stopping at `eos_id` (a
        token id, or several: a policy's `stop_ids`; a negative id stops nothing).

        `greedy` takes the argmax at every step (evaluation); `generator` makes sampling reproducible.
        """
        ...


def stop_ids(eos_id: int | Sequence[int]) -> tuple[int, ...]:
    """The token ids that end a completion, from `generate`'s `eos_id`: one id or several, negatives dropped."""
    ids = (eos_id,) if isinstance(eos_id, int) else tuple(eos_id)
    return tuple(dict.fromkeys(int(i) for i in ids if int(i) >= 0))


def check_args(
    model: torch.nn.Module, prompt_ids: list[list[int]], n: int, max_new: int, temperature: float, top_p: float
) -> None:
    """Reject arguments that would crash deep inside the model or sample from nothing, with one clear line."""
    if n < 1 or max_new < 1:
        raise ValueError(f"n and max_new_tokens must be >= 1, got n={n}, max_new_tokens={max_new}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy=True for argmax), got {temperature}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    vocab = model.config.vocab_size
    for i, p in enumerate(prompt_ids):
        if not p:
            raise ValueError(f"prompt {i} is empty; every prompt needs at least one token")
        if min(p) < 0 or max(p) >= vocab:
            raise ValueError(f"prompt {i} has token ids outside [0, {vocab}): {min(p)}..{max(p)}")
    table, longest = position_table(model), max(map(len, prompt_ids))
    if table is not None and longest + max_new - 1 > table:  # the last new token is never fed back
        fix = (f"use --max-new-tokens {table - longest + 1} or less, or a model with more positions"
               if longest < table else "the prompt alone does not fit: use a model with more positions")
        raise RunError(f"a prompt of {longest} tokens and up to {max_new} new tokens need {longest + max_new - 1} "
                       f"positions, more than the model's table of {table} learned positions; {fix}")


def position_table(model: torch.nn.Module) -> int | None:
    """How many positions a model with a learned table of absolute positions (GPT-2's `wpe`, OPT's
    `embed_positions`) can embed; None where positions are computed (rotary), and nothing fails past
    `max_position_embeddings`."""
    positions = getattr(model.config, "max_position_embeddings", None)
    tokens = model.get_input_embeddings()
    if positions and any(isinstance(m, torch.nn.Embedding) and m is not tokens
                         and m.num_embeddings in (positions, positions + 2) for m in model.modules()):  # OPT: +2
        return positions
    return None


@dataclass
class Rollouts:
    """`n` samples for each of `len(problems)` prompts, grouped: row i*n + j is sample j of prompt i.

    Tensors are prompt + completion, right-padded: input_ids / attention_mask / completion_mask
    [B, T] with B = len(problems) * n; rewards and lengths [B]. `logprobs` [B, T], when the rollout
    engine supplies them, are the sampling policy's per-token log-probs (unscaled by temperature,
    0 off completions): on-policy methods use them instead of paying for another forward pass.
    """

    problems: list[Any]
    n: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    completions: list[str]
    rewards: torch.Tensor
    lengths: torch.Tensor
    logprobs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def domains(self) -> list[str]:
        """Domain of each row (each problem's domain repeated n times)."""
        return [p.domain for p in self.problems for _ in range(self.n)]
