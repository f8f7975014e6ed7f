"""The rollout engine on CUDA: `TorchRollout`'s plan and prefill, then decoding from a static KV cache
with each step captured once as a CUDA graph and replayed.

`GraphRollout` is what `bench run --rollout torch` uses. On a CPU, or for an architecture it does not
know, it is `TorchRollout` exactly. On CUDA, for Llama-style decoders (`GRAPH_TYPES`):

- prompts whose lengths differ by up to a key bucket (not `max_pad_tokens`) decode together: a step
  attends whole key buckets anyway, so the left padding costs at most one more bucket of keys, while
  every group decoded apart costs a whole decode step per token, and rows padded up to its own row
  bucket;
- a group is prefilled straight into the static cache, through the model's metered forward, the `n`
  samples of a prompt sharing its prefill; prompts whose lengths differ by at most `max_pad_tokens`
  share one forward, left-padded and masked (the padding is computed, so it is charged). One
  forward per distinct length, as `TorchRollout` prefills, leaves a GPU idle: a few small batches
  cost as much as the whole short rollout;
- the KV cache is one preallocated buffer per layer, [rows, kv heads, capacity, head dim], kept
  across calls; the rows decoding together are always its first A rows;
- a decode step (embedding, every layer, the LM head and sampling on the GPU) runs on static shapes:
  the running rows padded up to a row bucket (a power of two) and the keys attended up to a key
  bucket (a multiple of `key_bucket`), masked where they are padding or not written yet. Each
  (model, rows, keys) step runs eagerly on its first use, is captured as a CUDA graph then (a
  capture runs nothing) and is replayed after;
- finished rows are compacted (the last running rows move into their slots), so the batch shrinks
  into smaller row buckets without recompiling anything; sampling draws the same uniforms in the
  same order as `TorchRollout`, so the two engines sample the same tokens from the same logits.

A replayed graph runs no forward hook, so each replay is charged analytically, exactly what the
meter charges for the same step run eagerly: `FlopSpec.forward_flops(1, keys - 1, 1, batch=rows)`,
the bucket's rows and keys included (padding rows and masked keys are computed, so they are charged).
`graphs=False` runs the same static step eagerly (the CPU tests: tokens against `TorchRollout`, the
charge against the FLOP counter).
"""

from __future__ import annotations

import contextlib
import sys
import weakref

import torch

from bench.accounting.flops import FlopSpec
from bench.accounting.metering import charge_outside
from bench.hf_compat import cache_argument
from bench.rollout.kv import compaction, make_cache
from bench.rollout.torch_engine import TorchRollout, _Chunk, decode_loop, sample_next

GRAPH_TYPES = ("llama", "qwen2")  # Llama-style decoders whose layers `_static_step` runs as HF does


def graph_supported(model: torch.nn.Module) -> bool:
    """Whether `GraphRollout` can run `model`'s decode step itself (else it decodes as `TorchRollout`)."""
    config = model.config
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    # dynamic and long RoPE change their frequencies with the sequence length, on the host
    static_rope = not any(kind in str(rope.get("rope_type", "default")) for kind in ("dynamic", "longrope"))
    return (getattr(config, "model_type", None) in GRAPH_TYPES and not getattr(config, "use_sliding_window", False)
            and static_rope and hasattr(model, "lm_head"))


def _bucket(value: int, step: int) -> int:
    """`value` rounded up to a power of two (step 0) or to a multiple of `step`."""
    return 1 << (value - 1).bit_length() if step == 0 else -(-value // step) * step


class _Static:
    """The static tensors every captured step reads and writes: one set per engine, reused across calls."""

    def __init__(self, model: torch.nn.Module, rows: int, capacity: int) -> None:
        config, device, dtype = model.config, model.device, next(model.parameters()).dtype
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (rows, kv_heads, capacity, head_dim)
        # zeros, not empty: masked keys' values still enter the attention matmul (as 0 x value)
        self.keys = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.values = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_hidden_layers)]
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=device)  # keys a row attends
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)  # fed this step
        self.positions = torch.zeros(rows, dtype=torch.long, device=device)
        self.write = torch.zeros(1, dtype=torch.long, device=device)  # the cache column written this step
        self.uniform = torch.zeros(rows, 1, device=device)  # one draw per row, filled before a replay
        self.next_tokens = torch.zeros(rows, dtype=torch.long, device=device)  # outputs
        self.next_logprobs = torch.zeros(rows, device=device)
        self.rows, self.capacity, self.device, self.dtype = rows, capacity, device, dtype

    @staticmethod
    def layout(model: torch.nn.Module) -> tuple:
        """What the buffers' shapes and placement depend on, besides rows and capacity: the models
        that share it (a student and its experts) share one set of buffers."""
        config = model.config
        return (str(model.device), next(model.parameters()).dtype, config.num_hidden_layers,
                getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
                getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)

    def compact(self, holes: torch.Tensor, fillers: torch.Tensor) -> None:
        """Move rows `fillers` into rows `holes` (finished rows leave the running prefix)."""
        if holes.numel():
            for buffer in (*self.keys, *self.values, self.valid, self.positions):
                buffer[holes] = buffer[fillers]


class GraphRollout(TorchRollout):
    """`TorchRollout` with a static KV cache and CUDA-graph decode steps on CUDA (see the module docstring).

    `graphs`: None captures graphs on CUDA only; False runs the static step eagerly; `static`: None
    uses the static cache on CUDA only (True: on any device, for tests; False: never, i.e. `TorchRollout`).
    """

    def __init__(self, max_rows: int = 1024, max_pad_tokens: int = 16, *, key_bucket: int = 128,
                 static: bool | None = None, graphs: bool | None = None) -> None:
        super().__init__(max_rows=max_rows, max_pad_tokens=max_pad_tokens)
        if key_bucket < 1:
            raise ValueError(f"key_bucket must be >= 1, got {key_bucket}")
        self.key_bucket, self.static, self.graphs = key_bucket, static, graphs
        self._buffers: dict[tuple, _Static] = {}  # by `_Static.layout`: a teacher does not evict the student's
        self._captured: dict[tuple, tuple[torch.cuda.CUDAGraph, weakref.ref]] = {}

    def __getstate__(self) -> dict:
        """A pickled copy (a parallel phase's, a Ray task's) starts with no static caches or graphs:
        they hold this process's device memory, and CUDA graphs and weak references cannot be pickled."""
        return {**self.__dict__, "_buffers": {}, "_captured": {}}

    def _uses_static(self, model: torch.nn.Module) -> bool:
        wanted = self.static if self.static is not None else model.device.type == "cuda"
        return wanted and graph_supported(model)

    def _max_pad(self, model: torch.nn.Module) -> int:
        return max(self.max_pad_tokens, self.key_bucket) if self._uses_static(model) else self.max_pad_tokens

    def _decode(self, model, prompt_ids, group, width, max_new, stops, sampling) -> _Chunk:
        if not self._uses_static(model):
            return super()._decode(model, prompt_ids, group, width, max_new, stops, sampling)
        device, index = model.device, [i for unit in group for i in unit]
        plens = torch.tensor([len(prompt_ids[i]) for i in index], device=device).repeat_interleave(width)  # [R]
        longest, rows = int(plens.max()), len(index) * width
        static = self._static_for(model, _bucket(rows, 0), _bucket(longest + max_new, self.key_bucket))
        logits = self._prefill_into(static, model, prompt_ids, group, width, longest)
        pad = longest - plens  # [R]
        cols = torch.arange(static.capacity, device=device)[None, :]
        static.valid[:rows] = (cols >= pad[:, None]) & (cols < longest)
        outside = ~static.valid[:rows, None, :longest, None]  # padding, and columns no prompt reached
        for k, v in zip(static.keys, static.values):  # zeros there, whatever the padded forward left
            k[:rows, :, :longest].masked_fill_(outside, 0)
            v[:rows, :, :longest].masked_fill_(outside, 0)
        static.positions[:rows] = plens

        def drop(stop: torch.Tensor) -> torch.Tensor:
            holes, fillers, order = compaction(stop)  # as TorchRollout's finished rows leave
            static.compact(holes, fillers)
            return order

        def advance(tok: torch.Tensor, step: int) -> tuple[torch.Tensor, torch.Tensor]:
            return self._replay(model, static, tok, longest + step, sampling)

        first = sample_next(logits, **sampling)  # the first tokens, from the prefill's logits
        return _Chunk(index, *decode_loop(rows, max_new, stops, first, advance, drop, device))

    def _prefill_into(self, static: _Static, model: torch.nn.Module, prompt_ids: list[list[int]],
                      group: list[list[int]], width: int, longest: int) -> torch.Tensor:
        """Prefill `group`'s prompts into the static cache's first rows (each prompt's `width` samples
        in a row each, as `index` orders them), its keys ending at column `longest`; returns the last
        positions' logits [R, V]. Equal-length buckets whose lengths differ by at most
        `max_pad_tokens` share one forward, left-padded, the padding masked; `last_stats["pad_keys"]`
        counts the query-key pairs on padding, charged as compute, as `TorchRollout` counts its
        decode steps' padded keys."""
        device, logits, row = model.device, [], 0
        batches: list[list[int]] = []
        first = None
        for unit in group:  # shortest first
            length = len(prompt_ids[unit[0]])
            if first is None or length - first > self.max_pad_tokens:
                batches.append([])
                first = length
            batches[-1].extend(unit)
        for batch in batches:
            lengths = [len(prompt_ids[i]) for i in batch]
            span = max(lengths)
            ids = torch.tensor([[0] * (span - len(prompt_ids[i])) + prompt_ids[i] for i in batch], device=device)
            cache = make_cache(model, span)
            call = {"input_ids": ids, "use_cache": True, "logits_to_keep": 1, cache_argument(model): cache}
            if min(lengths) < span:  # left padding: masked, and each prompt's positions start at 0
                mask = (torch.arange(span, device=device)[None, :]
                        >= torch.tensor([span - n for n in lengths], device=device)[:, None]).long()
                call.update(attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0))
                # query-key pairs the meter charges (causal, over the span) that the mask leaves out
                self.last_stats["pad_keys"] += sum(span * (span + 1) // 2 - n * (n + 1) // 2 for n in lengths)
            logits.append(model(**call).logits[:, -1])
            end = row + len(batch) * width
            for layer, k, v in zip(cache.layers, static.keys, static.values):
                k[row:end, :, longest - span:longest] = layer.keys.repeat_interleave(width, dim=0)
                v[row:end, :, longest - span:longest] = layer.values.repeat_interleave(width, dim=0)
            self.last_stats["forwards"] += 1
            self.last_stats["prefill_tokens"] += ids.numel()
            row = end
        return torch.cat(logits).repeat_interleave(width, dim=0)

    def _static_for(self, model: torch.nn.Module, rows: int, capacity: int) -> _Static:
        """The static tensors of `model`'s layout, reallocated (and the graphs captured on them dropped)
        when a call needs more rows or keys than they hold."""
        layout = _Static.layout(model)
        static = self._buffers.get(layout)
        if static is None or rows > static.rows or capacity > static.capacity:
            if static is not None:
                rows, capacity = max(rows, static.rows), max(capacity, static.capacity)
                self._captured = {k: v for k, v in self._captured.items() if k[0] != layout}
                del self._buffers[layout]  # freed before the new ones are made
            static = self._buffers[layout] = _Static(model, rows, capacity)
        return static

    def _replay(self, model: torch.nn.Module, static: _Static, tok: torch.Tensor, column: int,
                sampling: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """Feed tok [A] (the running prefix) at cache column `column`; the next tokens and log-probs [A]."""
        alive = tok.shape[0]
        rows, keys = _bucket(alive, 0), min(_bucket(column + 1, self.key_bucket), static.capacity)
        static.tokens[:alive] = tok
        static.write.fill_(column)
        if not sampling["greedy"]:  # the draws TorchRollout makes, in its order: one per running row
            generator = sampling["generator"]
            static.uniform[:alive] = torch.rand(alive, 1, generator=generator,
                                                device=generator.device if generator else static.device)
        options = {k: sampling[k] for k in ("temperature", "top_p", "greedy")}
        if self.graphs if self.graphs is not None else static.device.type == "cuda":
            self._graphed_step(model, static, rows, keys, options)
        else:
            _static_step(model, static, rows, keys, options)
        spec = getattr(model, "flop_spec", None) or FlopSpec.from_config(model.config)
        charge_outside(model, flops=spec.forward_flops(1, keys - 1, 1, batch=rows), tokens=rows, kind="rollout")
        self.last_stats["forwards"] += 1
        self.last_stats["decode_tokens"] += alive
        static.positions[:alive] += 1
        return static.next_tokens[:alive].clone(), static.next_logprobs[:alive].clone()

    def _graphed_step(self, model: torch.nn.Module, static: _Static, rows: int, keys: int, options: dict) -> None:
        """One static step as a graph replay; on the first use of (model, rows, keys, sampling options),
        the step itself, run eagerly, then its capture for later calls (`_capture`)."""
        key = (_Static.layout(model), id(model), rows, keys, tuple(sorted(options.items())))
        found = self._captured.get(key)
        # Streams and captures are the current device's: on `cuda:1` a capture made on GPU 0's stream
        # would record nothing (an empty graph) and its replays would do nothing.
        with torch.cuda.device(model.device) if model.device.type == "cuda" else contextlib.nullcontext():
            if found is not None and found[1]() is model:
                found[0].replay()
            else:  # graphs of models since freed (snapshots, experts) go: they are never replayed again
                self._captured = {k: v for k, v in self._captured.items() if v[1]() is not None}
                self._captured[key] = (self._capture(lambda: _static_step(model, static, rows, keys, options)),
                                       weakref.ref(model))

    def _capture(self, step):
        """Run `step` once eagerly on a side stream, then record it as a CUDA graph; returns the graph.

        The eager run is the call's own step: its outputs are this step's, and it is the warm-up a
        capture needs (lazy initialisation, kernel choice). A capture records kernels without running
        them, so the first use of a graph computes the step once, as every later replay does: the
        engine computes nothing that the ledger's one charge per step does not count.

        cuBLAS keeps a workspace per stream, made by its first matmul there, and a graph bakes in the
        workspace its matmuls used. Kept from an earlier capture, that workspace may lie in a pool
        whose graphs were dropped, where clearing cuBLAS's workspaces (compiled code with CUDA graphs
        does, e.g. `generate` with a static cache) frees it back to the device under the graphs that
        still use it: their next replay fails with "unspecified launch failure". So the workspaces
        are cleared around each capture, as torch's own CUDA-graph trees do: a capture makes its
        workspace in its own pool, which lives as long as the graphs that use it.
        """
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        _clear_cublas_workspaces()
        with torch.cuda.graph(graph, pool=self._shared_pool()):
            step()
        _clear_cublas_workspaces()
        return graph

    def _shared_pool(self):
        """The memory pool the engine's graphs share, named by a graph that holds it; None (a new pool)
        when none is held. A pool whose graphs have all been dropped (buffers reallocated for a larger
        call, a model freed) cannot be captured into again: torch asserts that its use count is > 0."""
        return next((graph.pool() for graph, _ in self._captured.values()), None)


def _clear_cublas_workspaces() -> None:
    """Drop cuBLAS's per-stream workspaces (the next matmul on a stream makes a new one); see `_capture`."""
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # private, as torch's CUDA-graph trees use it
    if clear is not None:
        clear()


def _static_step(model: torch.nn.Module, static: _Static, rows: int, keys: int, options: dict) -> None:
    """One decode step on static shapes: the first `rows` rows, the first `keys` cache columns.

    Runs the model's own modules (embedding, norms, projections, rotary embedding, MLP, head) as its
    forward does, with attention over the static cache masked by `static.valid`; writes this step's
    keys and values at column `static.write` and the sampled tokens and log-probs into the outputs.
    No host synchronisation, no allocation that depends on data: the step can be captured.
    """
    body, config = model.model, model.config
    rotary = sys.modules[type(body.layers[0].self_attn).__module__].apply_rotary_pos_emb
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    valid = static.valid[:rows]
    valid.index_fill_(1, static.write, True)  # this step's key is attended from now on
    mask = valid[:, None, None, :keys]  # [R, 1, 1, C]
    hidden = body.embed_tokens(static.tokens[:rows, None])  # [R, 1, d]
    cos, sin = body.rotary_emb(hidden, static.positions[:rows, None])
    for layer, k_cache, v_cache in zip(body.layers, static.keys, static.values):
        attn, x = layer.self_attn, layer.input_layernorm(hidden)
        dim = attn.head_dim
        q = attn.q_proj(x).view(rows, 1, heads, dim).transpose(1, 2)  # [R, H, 1, D]
        k = attn.k_proj(x).view(rows, 1, kv_heads, dim).transpose(1, 2)  # [R, H_kv, 1, D]
        v = attn.v_proj(x).view(rows, 1, kv_heads, dim).transpose(1, 2)
        q, k = rotary(q, k, cos, sin)
        k_cache[:rows].index_copy_(2, static.write, k)
        v_cache[:rows].index_copy_(2, static.write, v)
        grouped = q.reshape(rows, kv_heads, heads // kv_heads, dim)  # [R, H_kv, H / H_kv, D]
        scores = torch.matmul(grouped, k_cache[:rows, :, :keys].transpose(-1, -2)) * attn.scaling  # [R, H_kv, g, C]
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(dim=-1, dtype=torch.float32).to(v_cache.dtype)  # fp32, as HF's eager attention
        out = torch.matmul(weights, v_cache[:rows, :, :keys])  # [R, H_kv, g, D]
        hidden = hidden + attn.o_proj(out.reshape(rows, 1, heads * dim))
        hidden = hidden + layer.mlp(layer.post_attention_layernorm(hidden))
    logits = model.lm_head(body.norm(hidden))[:, 0]  # [R, V]
    tokens, logprobs = sample_next(logits, uniform=static.uniform[:rows], **options)
    static.next_tokens[:rows], static.next_logprobs[:rows] = tokens, logprobs
