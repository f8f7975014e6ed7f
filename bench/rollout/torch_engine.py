"""The PyTorch rollout engine: `n` completions per prompt from a causal LM, with their log-probs.

`TorchRollout` meets the contract of `bench.rollout.base` (`bench.rollout.vllm_engine` is the vLLM
engine). It is built for tiny models and batches of 64-4096 sequences:

- prompts are prefilled in buckets of equal token length (no padding), with `logits_to_keep=1`;
- the `n` samples of a prompt share that one prefill: its KV cache is repeated n times;
- finished sequences leave the running batch, so they cost nothing more;
- the KV cache is preallocated and the decode attention is two matmuls (`bench.rollout.kv`);
- sampling is by inverse CDF (one uniform per row): `torch.multinomial` draws an exponential per
  vocabulary entry and cost ~10% of a decode step.

Every model call goes through the model's own `forward`, so a metered model (`bench.accounting.metering`) is
charged for exactly the work done, as kind `rollout`. Speed: `python benchmarks/bench_rollout.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from bench.accounting.ledger import ledger_context
from bench.hf_compat import cache_argument
from bench.rollout.base import RolloutBatch, check_args, stop_ids
from bench.rollout.kv import drop_rows, fast_decode_attention, make_cache


def sample_next(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    uniform: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from `logits` [A, V]; returns tokens [A] (int64) and their log-probs [A].

    The log-probs are under log_softmax(logits) (temperature 1, no truncation), see `RolloutBatch`.
    Top-p keeps the smallest set of most likely tokens (of the tempered distribution) whose mass
    reaches top_p, always at least one. The draw is one uniform per row, from `generator`, or
    `uniform` [A, 1] where given (drawn beforehand, as a captured CUDA graph needs).
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
        if uniform is None:
            uniform = torch.rand(cdf.shape[0], 1, generator=generator,
                                 device=generator.device if generator else cdf.device)
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
        eos_id: int | Sequence[int],
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> RolloutBatch:
        """See `RolloutBackend.generate`. Greedy decodes each prompt once and repeats it `n` times."""
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
                    self._decode(model, prompt_ids, group, width, max_new_tokens, stop_ids(eos_id), sampling)
                    for group in self._plan(prompt_ids, width, self._max_pad(model))
                ]
        finally:
            model.train(was_training)
        return _assemble(prompt_ids, chunks, n, width)

    def _max_pad(self, model: torch.nn.Module) -> int:
        """How far apart prompt lengths may be and still decode together (`_plan`), for `model`."""
        return self.max_pad_tokens

    def _plan(self, prompt_ids: list[list[int]], width: int, max_pad: int) -> list[list[list[int]]]:
        """Decode groups: lists of equal-length prompt buckets (prompt indices), shortest first; the
        lengths in a group differ by at most `max_pad`."""
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
                if fits and plen - first_len <= max_pad:
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
        stops: tuple[int, ...],
        sampling: dict,
    ) -> _Chunk:
        """Prefill a group, then sample `width` completions per prompt until a stop token or `max_new` tokens."""
        device, index = model.device, [i for unit in group for i in unit]
        plens = torch.tensor([len(prompt_ids[i]) for i in index], device=device).repeat_interleave(width)  # [R]
        longest = int(plens.max())
        cache, logits = self._prefill(model, prompt_ids, group, width, longest + max_new - 1)  # last token never fed
        rows, pad = logits.shape[0], longest - plens  # pad [R]: masked cache positions before each prompt
        cols = torch.arange(longest + max_new, device=device)[None, :]  # [1, P + G]
        mask = (cols >= pad[:, None]).long() if bool(pad.any()) else None  # [R, P + G], None: no padding
        state = {"plens": plens, "mask": mask}

        def drop(stop: torch.Tensor) -> torch.Tensor:
            order = drop_rows(cache, stop)  # finished rows leave the running batch
            state["plens"] = state["plens"][order]
            state["mask"] = state["mask"][order] if state["mask"] is not None else None
            return order

        def advance(tok: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
            logits = self._step(model, cache, tok, state["plens"] + step, state["mask"])
            return sample_next(logits, **sampling)

        first = sample_next(logits, **sampling)  # [R], [R]
        return _Chunk(index, *decode_loop(rows, max_new, stops, first, advance, drop, device))

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


def decode_loop(rows: int, max_new: int, stops: tuple[int, ...], first: tuple[torch.Tensor, torch.Tensor],
                advance: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]],
                drop: Callable[[torch.Tensor], torch.Tensor], device: torch.device) -> tuple[torch.Tensor, ...]:
    """Decode a group of `rows` sequences until a token of `stops` or `max_new` tokens, the engine's work
    in callbacks.

    `first`: the first tokens and log-probs [R]; `advance(tok, step)` feeds the running rows' tokens
    [A] at `step` and returns the next ones; `drop(stop)` removes the rows where `stop` [A] is True
    from the running batch and returns order [A'] (new row r is old row order[r]). Returns tokens
    [R, G] (-1 after a row stops), log-probs [R, G], lengths [R] and finished [R].
    """
    tokens = torch.full((rows, max_new), -1, dtype=torch.long, device=device)
    logprobs = torch.zeros(rows, max_new, device=device)
    lengths = torch.full((rows,), max_new, dtype=torch.long, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    alive = torch.arange(rows, device=device)  # original row of each running sequence
    stop_tokens = torch.tensor(stops, dtype=torch.long, device=device)
    tok, lp = first
    for step in range(max_new):
        tokens[alive, step], logprobs[alive, step] = tok, lp
        stop = torch.isin(tok, stop_tokens)  # [A]
        if bool(stop.any()):
            lengths[alive[stop]], finished[alive[stop]] = step + 1, True
            if bool(stop.all()) or step + 1 == max_new:
                break
            order = drop(stop)
            alive, tok = alive[order], tok[order]
        if step + 1 == max_new:
            break
        tok, lp = advance(tok, step)
    return tokens, logprobs, lengths, finished


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
