"""KV cache and attention pieces of the torch rollout engine (`bench.rollout.torch_engine`), tuned for tiny models.

- `KVBufferLayer`: a transformers cache layer preallocated to its final length and written in place.
  `DynamicCache` grows by `torch.cat`, which re-copies the whole cache every decode step: over half
  of decode time at our sizes.
- `drop_rows`: finished sequences leave the batch by moving the last running rows into their slots,
  where `batch_select_indices` copies the whole cache (a quarter of decode time when one row
  finishes per step, the common case).
- `decode_attention`: `sdpa`, but two small matmuls for one-query steps, 1.5-2.6x faster than CPU
  SDPA kernels at these sizes; installed only while a rollout runs (`fast_decode_attention`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from bench.errors import RunError, UnsupportedModelError


class KVBufferLayer(DynamicLayer):
    """A `DynamicLayer` whose keys/values live in a buffer preallocated to `capacity` positions.

    Appending writes in place; `keys` / `values` are views of the filled part, which is what
    attention reads and what `get_seq_length` (hence metering) reports.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        k, v = key_states, value_states  # [B, H_kv, S, D]
        shape = (*k.shape[:2], self.capacity)
        self._set(k.new_empty(*shape, k.shape[3]), v.new_empty(*shape, v.shape[3]), 0)

    def _set(self, k_buffer: torch.Tensor, v_buffer: torch.Tensor, length: int) -> None:
        self._k, self._v, self.length = k_buffer, v_buffer, length
        self.keys, self.values = k_buffer[:, :, :length], v_buffer[:, :, :length]
        self.device, self.is_initialized = k_buffer.device, True

    def load(self, parts: list[tuple[torch.Tensor, torch.Tensor]], repeats: int, length: int) -> None:
        """Fill with prefilled (keys, values) parts [b, H_kv, P, D], each row repeated `repeats` times
        and right-aligned to end at `length`; positions before a row's prompt are zeros (padding)."""
        k0, v0 = parts[0]
        rows = sum(k.shape[0] for k, _ in parts) * repeats
        k_buf = k0.new_zeros(rows, k0.shape[1], self.capacity, k0.shape[3])
        v_buf = v0.new_zeros(rows, v0.shape[1], self.capacity, v0.shape[3])
        row = 0
        for k, v in parts:
            end, start = row + k.shape[0] * repeats, length - k.shape[2]
            k_buf[row:end, :, start:length] = k.repeat_interleave(repeats, dim=0)
            v_buf[row:end, :, start:length] = v.repeat_interleave(repeats, dim=0)
            row = end
        self._set(k_buf, v_buf, length)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"KV buffer overflow: {end} > capacity {self.capacity}")
        self._k[:, :, self.length : end] = key_states
        self._v[:, :, self.length : end] = value_states
        self._set(self._k, self._v, end)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_max_length(self) -> int:
        return self.capacity

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._set(self._k.index_select(0, indices), self._v.index_select(0, indices), self.length)

    def compact(self, holes: torch.Tensor, fillers: torch.Tensor, rows: int) -> None:
        """Keep the first `rows` rows after moving rows `fillers` (>= rows) into `holes` (< rows).

        Copies only the moved rows, where `batch_select_indices` would copy the whole cache: with
        one sequence finishing per step, that copy cost a quarter of decode time.
        """
        if holes.numel():
            self._k[holes] = self._k[fillers]
            self._v[holes] = self._v[fillers]
        self._set(self._k[:rows], self._v[:rows], self.length)


def make_cache(model: torch.nn.Module, capacity: int) -> DynamicCache:
    """The model's own `DynamicCache` layout, every attention layer backed by a preallocated buffer.

    A sliding-window layer whose window covers `capacity` attends exactly like a full one.
    """
    cache = DynamicCache(config=model.config)
    layers = cache.layers or [DynamicLayer() for _ in range(model.config.num_hidden_layers)]
    for i, layer in enumerate(layers):
        window = getattr(layer, "sliding_window", None)
        if type(layer) not in (DynamicLayer, DynamicSlidingWindowLayer):
            raise UnsupportedModelError(f"TorchRollout needs full-attention KV caches; layer {i} of this model "
                                        f"caches as {type(layer).__name__}")
        if (window or capacity) < capacity:  # its attention would no longer be full: the ledger's charge
            raise RunError(f"layer {i} of this model attends a sliding window of {window} positions, fewer than "
                           f"the {capacity} a prompt and its new tokens take here; use a smaller --max-new-tokens "
                           "(or, for a prompt longer than the window, a model without one)")
    cache.layers, cache.layer_class_to_replicate = [KVBufferLayer(capacity) for _ in layers], None
    return cache


def decode_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' `sdpa`, except for one-query (decode) steps: two small matmuls.

    CPU SDPA kernels are built for long queries; with one query per row they were 1.5-2.6x slower
    than this at our sizes. query [B, H, 1, D], key/value [B, H_kv, T, D]; returns [B, 1, H, D].
    """
    if query.shape[2] != 1 or dropout or any(kwargs.get(k) is not None for k in ("softcap", "s_aux", "position_bias")):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    batch, heads, _, dim = query.shape
    grouped = query.view(batch, key.shape[1], heads // key.shape[1], dim)  # [B, H_kv, H / H_kv, D]
    scores = torch.matmul(grouped, key.transpose(-1, -2)) * (scaling or dim**-0.5)  # [B, H_kv, H / H_kv, T]
    if attention_mask is not None:  # sdpa_mask's [B, 1, 1, T]: True (or 0.0) where a key is attended
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        else:
            scores = scores + attention_mask
    return torch.matmul(scores.softmax(dim=-1), value).view(batch, 1, heads, dim), None


DECODE_ATTENTION = "opd_bench_decode_sdpa"
AttentionInterface.register(DECODE_ATTENTION, decode_attention)
AttentionMaskInterface.register(DECODE_ATTENTION, sdpa_mask)  # masks exactly as for sdpa


@contextlib.contextmanager
def fast_decode_attention(model: torch.nn.Module) -> Iterator[None]:
    """Run a model that uses `sdpa` with `decode_attention` inside the block; others are left alone."""
    attention = model.config._attn_implementation
    if attention == "sdpa":
        model.config._attn_implementation = DECODE_ATTENTION
    try:
        yield
    finally:
        model.config._attn_implementation = attention


def compaction(stop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """How rows where `stop` [A] is True leave a running batch: the last running rows move into their
    slots. Returns holes and fillers (move row fillers[i] into row holes[i], then keep the first A'
    rows) and order [A'] (int64): new row r is old row order[r]."""
    keep = ~stop
    rows = int(keep.sum())
    holes = stop[:rows].nonzero().squeeze(1)
    fillers = keep[rows:].nonzero().squeeze(1) + rows
    order = torch.arange(rows, device=stop.device)
    order[holes] = fillers
    return holes, fillers, order


def drop_rows(cache: DynamicCache, stop: torch.Tensor) -> torch.Tensor:
    """Remove the rows where `stop` [A] is True from every cache layer, filling holes from the end.

    Returns order [A'] (int64): new row r is old row order[r].
    """
    holes, fillers, order = compaction(stop)
    for layer in cache.layers:
        layer.compact(holes, fillers, order.numel())
    return order
