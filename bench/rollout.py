"""Rollout engines: sample `n` completions per prompt from a causal LM, with their log-probs.

`RolloutBackend` is the contract every engine meets (`bench.rollout_vllm` is the vLLM one);
`TorchRollout` is the CPU/PyTorch engine, built for tiny models and batches of 64-4096 sequences:

- prompts are prefilled in buckets of equal token length (no padding), with `logits_to_keep=1`;
- the `n` samples of a prompt share that one prefill: its KV cache is repeated n times;
- finished sequences leave the running batch, so they cost nothing more;
- the KV cache is preallocated and the decode attention is two matmuls (`bench.rollout_kv`);
- sampling is by inverse CDF (one uniform per row): `torch.multinomial` draws an exponential per
  vocabulary entry and cost ~10% of a decode step.

Every model call goes through the model's own `forward`, so a metered model (`bench.accounting.metering`) is
charged for exactly the work done, as kind `rollout`. Speed: `python benchmarks/bench_rollout.py`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch
from transformers import DynamicCache

from bench.accounting.ledger import ledger_context
from bench.hf_compat import cache_argument
from bench.rollout_kv import drop_rows, fast_decode_attention, make_cache


@dataclass
class RolloutBatch:
    """`n` completions for each of `len(prompt_ids)` prompts.

    completion_ids / logprobs / lengths / finished are grouped: index i*n + j is sample j of prompt i.
    `logprobs[k]` [lengths[k]] (float32) holds, for each sampled token y_t of completion k,
    log softmax(z_t)[y_t], where z_t are the model's raw logits after prompt + y_<t: the log-prob under
    the *unscaled* model distribution (temperature 1, no top-p truncation), whatever temperature and
    top_p were sampled with. That is the quantity policy gradients and distillation need; it is the
    sampling distribution's log-prob only when temperature == 1 and top_p == 1.
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
        eos_id: int,
        pad_id: int,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        """`n` completions per prompt (grouped), each at most `max_new_tokens`, stopping at `eos_id`.

        `greedy` takes the argmax at every step (evaluation); `generator` makes sampling reproducible.
        """
        ...


ROLLOUT_BACKENDS = ("torch", "vllm")


def make_backend(name: str) -> RolloutBackend:
    """The named rollout engine (`bench run --rollout`); vLLM is imported only when it is asked for."""
    if name == "vllm":
        from bench.rollout_vllm import VLLMRollout

        return VLLMRollout()
    if name != "torch":
        raise ValueError(f"unknown rollout backend {name!r}; known: {', '.join(ROLLOUT_BACKENDS)}")
    return TorchRollout()


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from `logits` [A, V]; returns tokens [A] (int64) and their log-probs [A].

    The log-probs are under log_softmax(logits) (temperature 1, no truncation), see `RolloutBatch`.
    Top-p keeps the smallest set of most likely tokens (of the tempered distribution) whose mass
    reaches top_p, always at least one.
    """
    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)  # [A, V]
    if greedy:
        tokens = logits.argmax(dim=-1)
    else:
        if temperature == 1.0:
            weights = logp.exp()  # [A, V]
        else:
            scaled = logits / temperature
            weights = torch.exp(scaled - scaled.amax(dim=-1, keepdim=True))  # unnormalised probs [A, V]
        order = None
        if top_p < 1.0:
            weights, order = torch.sort(weights, dim=-1, descending=True, stable=True)
            cdf = weights.cumsum(dim=-1)
            # keep token i iff the mass before it is < top_p of the total (the first one always)
            weights = weights.masked_fill(cdf - weights >= top_p * cdf[:, -1:], 0.0)
        cdf = weights.cumsum(dim=-1)  # [A, V]
        # drawn where the generator lives (a CPU generator can drive a CUDA model)
        uniform = torch.rand(cdf.shape[0], 1, generator=generator, device=generator.device if generator else cdf.device)
        draw = uniform.to(cdf.device) * cdf[:, -1:]
        # right=True skips zero-mass entries; cdf.argmax is the last one with mass, which a draw
        # rounded up to the total would otherwise overshoot
        tokens = torch.minimum(torch.searchsorted(cdf, draw, right=True).squeeze(1), cdf.argmax(dim=-1))
        if order is not None:
            tokens = order.gather(1, tokens[:, None]).squeeze(1)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


@dataclass
class _Chunk:
    """The decoded rows of one decode group: prompts `prompt_index`, `width` samples each."""

    prompt_index: list[int]
    tokens: torch.Tensor  # [R, G] int64, R = len(prompt_index) * width
    logprobs: torch.Tensor  # [R, G] float32
    lengths: torch.Tensor  # [R] int64
    finished: torch.Tensor  # [R] bool


class TorchRollout:
    """`RolloutBackend` on a Hugging Face causal LM with a KV cache, batched, in plain PyTorch.

    Prompts are prefilled in buckets of equal token length (never padded). For decoding, buckets
    whose lengths differ by at most `max_pad_tokens` share one batch: shorter prompts' caches are
    left-padded with masked zeros. Padding never enters the tokens fed (the matmuls), only the keys
    attended, and metering charges it: 4 x layers x heads x head_dim FLOPs per padded key per step
    (`last_stats["pad_keys"]` counts them; with prompts of 8-24 tokens that was 0.3-0.9% of the
    rollout FLOPs). `max_pad_tokens=0` decodes every length separately (exactly no padding; up to
    ~1.7x slower on mixed lengths, where batches get small). `max_rows` caps the sequences decoded
    together (KV memory), except that the n samples of one prompt always share a batch.
    `last_stats` also counts forwards and prefill / decode tokens of the latest call.
    """

    def __init__(self, max_rows: int = 1024, max_pad_tokens: int = 16) -> None:
        if max_rows < 1 or max_pad_tokens < 0:
            raise ValueError(f"need max_rows >= 1 and max_pad_tokens >= 0, got {max_rows}, {max_pad_tokens}")
        self.max_rows, self.max_pad_tokens = max_rows, max_pad_tokens
        self.last_stats: dict[str, int] = {}

    def generate(
        self,
        model: torch.nn.Module,
        prompts: Sequence[Sequence[int]],
        *,
        n: int,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        eos_id: int,
        pad_id: int,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        """See `RolloutBackend.generate`. Greedy decodes each prompt once and repeats it `n` times.

        `pad_id` is unused: no padding token is ever fed to the model.
        """
        prompt_ids = [[int(t) for t in p] for p in prompts]
        check_args(model, prompt_ids, n, max_new_tokens, temperature, top_p)
        width = 1 if greedy else n  # greedy samples are identical: decode once
        sampling = dict(temperature=temperature, top_p=top_p, greedy=greedy, generator=generator)
        self.last_stats = dict(forwards=0, prefill_tokens=0, decode_tokens=0, pad_keys=0)
        was_training = model.training
        model.eval()
        try:
            with ledger_context(kind="rollout"), torch.inference_mode(), fast_decode_attention(model):
                chunks = [
                    self._decode(model, prompt_ids, group, width, max_new_tokens, eos_id, sampling)
                    for group in self._plan(prompt_ids, width)
                ]
        finally:
            model.train(was_training)
        return _assemble(prompt_ids, chunks, n, width)

    def _plan(self, prompt_ids: list[list[int]], width: int) -> list[list[list[int]]]:
        """Decode groups: lists of equal-length prompt buckets (prompt indices), shortest first."""
        buckets: dict[int, list[int]] = {}
        for i, p in enumerate(prompt_ids):
            buckets.setdefault(len(p), []).append(i)
        per_chunk = max(1, self.max_rows // width)
        groups: list[list[list[int]]] = []
        rows, first_len = 0, 0
        for plen, members in sorted(buckets.items()):
            for start in range(0, len(members), per_chunk):
                unit = members[start : start + per_chunk]
                fits = groups and rows + len(unit) * width <= self.max_rows
                if fits and plen - first_len <= self.max_pad_tokens:
                    groups[-1].append(unit)
                    rows += len(unit) * width
                else:
                    groups.append([unit])
                    rows, first_len = len(unit) * width, plen
        return groups

    def _prefill(
        self, model: torch.nn.Module, prompt_ids: list[list[int]], group: list[list[int]], width: int, capacity: int
    ) -> tuple[DynamicCache, torch.Tensor]:
        """One forward per bucket (last logit only), merged into one cache; returns it and logits [R, V]."""
        parts, logits = [], []
        for unit in group:
            ids = torch.tensor([prompt_ids[i] for i in unit], dtype=torch.long, device=model.device)  # [b, P]
            part = make_cache(model, ids.shape[1])
            cached = {cache_argument(model): part}
            logits.append(model(input_ids=ids, **cached, use_cache=True, logits_to_keep=1).logits[:, -1])
            parts.append(part)
            self.last_stats["forwards"] += 1
            self.last_stats["prefill_tokens"] += ids.numel()
        longest = max(part.get_seq_length() for part in parts)
        cache = make_cache(model, capacity)
        for i, layer in enumerate(cache.layers):
            layer.load([(part.layers[i].keys, part.layers[i].values) for part in parts], width, longest)
        return cache, torch.cat(logits).repeat_interleave(width, dim=0)

    def _decode(
        self,
        model: torch.nn.Module,
        prompt_ids: list[list[int]],
        group: list[list[int]],
        width: int,
        max_new: int,
        eos_id: int,
        sampling: dict,
    ) -> _Chunk:
        """Prefill a group, then sample `width` completions per prompt until EOS or `max_new` tokens."""
        device, index = model.device, [i for unit in group for i in unit]
        plens = torch.tensor([len(prompt_ids[i]) for i in index], device=device).repeat_interleave(width)  # [R]
        longest = int(plens.max())
        cache, logits = self._prefill(model, prompt_ids, group, width, longest + max_new - 1)  # last token never fed
        rows, pad = logits.shape[0], longest - plens  # pad [R]: masked cache positions before each prompt
        cols = torch.arange(longest + max_new, device=device)[None, :]  # [1, P + G]
        mask = (cols >= pad[:, None]).long() if bool(pad.any()) else None  # [R, P + G], None: no padding
        tokens = torch.full((rows, max_new), -1, dtype=torch.long, device=device)
        logprobs = torch.zeros(rows, max_new, device=device)
        lengths = torch.full((rows,), max_new, dtype=torch.long, device=device)
        finished = torch.zeros(rows, dtype=torch.bool, device=device)
        alive = torch.arange(rows, device=device)  # original row of each running sequence
        for step in range(max_new):
            tok, lp = sample_next(logits, **sampling)  # [A], [A]
            tokens[alive, step], logprobs[alive, step] = tok, lp
            stop = tok == eos_id  # [A]
            if bool(stop.any()):
                lengths[alive[stop]], finished[alive[stop]] = step + 1, True
                if bool(stop.all()) or step + 1 == max_new:
                    break
                order = drop_rows(cache, stop)  # finished rows leave the running batch
                alive, tok, plens = alive[order], tok[order], plens[order]
                mask = mask[order] if mask is not None else None
            if step + 1 == max_new:
                break
            logits = self._step(model, cache, tok, plens + step, mask)
        return _Chunk(index, tokens, logprobs, lengths, finished)

    def _step(
        self,
        model: torch.nn.Module,
        cache: DynamicCache,
        tok: torch.Tensor,
        pos: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        """Feed tokens [A] at positions [A] after the cache; `mask` [A, >= cache + 1] marks real keys.

        Returns the next logits [A, V].
        """
        kwargs = {}
        if mask is not None:
            keys = cache.get_seq_length() + 1
            kwargs["attention_mask"] = mask[:, :keys]
            self.last_stats["pad_keys"] += tok.numel() * keys - int(mask[:, :keys].sum())
        self.last_stats["forwards"] += 1
        self.last_stats["decode_tokens"] += tok.numel()
        kwargs[cache_argument(model)] = cache
        out = model(input_ids=tok[:, None], use_cache=True, position_ids=pos[:, None], **kwargs)
        return out.logits[:, -1]


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


def _assemble(prompt_ids: list[list[int]], chunks: list[_Chunk], n: int, width: int) -> RolloutBatch:
    """Scatter decoded rows back to prompt order (row i*n + j), outside inference mode."""
    size = len(prompt_ids) * n
    completion_ids: list[list[int]] = [[] for _ in range(size)]
    logprobs: list[torch.Tensor] = [torch.zeros(0)] * size
    lengths, finished = [0] * size, [False] * size
    for chunk in chunks:
        tokens, chunk_lengths, chunk_finished = chunk.tokens.tolist(), chunk.lengths.tolist(), chunk.finished.tolist()
        for local, prompt in enumerate(chunk.prompt_index):
            for j in range(n):
                src, dst = local * width + (j if width > 1 else 0), prompt * n + j
                g = chunk_lengths[src]
                completion_ids[dst] = tokens[src][:g]
                logprobs[dst] = chunk.logprobs[src, :g].clone()  # a normal tensor, usable in autograd
                lengths[dst], finished[dst] = g, chunk_finished[src]
    return RolloutBatch(prompt_ids, completion_ids, logprobs, lengths, finished)
