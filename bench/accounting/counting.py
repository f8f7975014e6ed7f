"""Instrumented FLOP counts: torch's `FlopCounterMode` with causal-aware SDPA formulas, and fvcore.

What the counter adds to torch's own formulas (the convention the audit compares the ledger with):
every dense SDPA kernel (CPU flash; CUDA flash, efficient, cuDNN; forward and backward) is counted by
the query-key pairs the call attends: S_q*S_k, the top-left causal triangle of torch's `is_causal`,
or the pairs an explicit mask allows (so padding keys are not counted, while the ledger charges
padding as compute). Torch itself counts CPU SDPA as zero and the CUDA kernels as non-causal.
Batched matmuls (eager attention; the math fallback CPU SDPA takes under dropout) count the full
matrices they multiply.

fvcore (forward only) is the second opinion: `fvcore.nn.FlopCountAnalysis` multiply-adds x 2, norms
excluded, plus an SDPA handle of ours (fvcore has none) that counts causal pairs.

"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

_aten = torch.ops.aten
_SDPA_FORWARD = (
    _aten._scaled_dot_product_flash_attention_for_cpu,
    _aten._scaled_dot_product_flash_attention,
    _aten._scaled_dot_product_efficient_attention,
    _aten._scaled_dot_product_cudnn_attention,
)
_SDPA_BACKWARD = (
    _aten._scaled_dot_product_flash_attention_for_cpu_backward,
    _aten._scaled_dot_product_flash_attention_backward,
    _aten._scaled_dot_product_efficient_attention_backward,
    _aten._scaled_dot_product_cudnn_attention_backward,
)
_ATTENTION_OPS = frozenset((*_SDPA_FORWARD, *_SDPA_BACKWARD, _aten.bmm, _aten.baddbmm))


# -- counting query-key pairs -------------------------------------------------------------------
def _causal_pairs(q_len: int, k_len: int) -> int:
    """Pairs under torch's `is_causal` mask (top-left aligned: query i sees keys 0..i), one head."""
    if q_len <= k_len:
        return q_len * (q_len + 1) // 2
    return k_len * (k_len + 1) // 2 + (q_len - k_len) * k_len


def _score_pairs(shape_q: tuple, shape_k: tuple, is_causal: bool, mask: Any = None) -> int:
    """Query-key pairs one attention call multiplies, summed over batch and heads."""
    b, h, q_len, k_len = shape_q[0], shape_q[1], shape_q[-2], shape_k[-2]
    if isinstance(mask, torch.Tensor):
        try:
            allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min
            return int(allowed[..., :q_len, :k_len].expand(b, h, q_len, k_len).sum())
        except Exception:  # fake or meta tensors have no values, odd shapes do not broadcast: count all
            return b * h * q_len * k_len
    if is_causal:
        return b * h * _causal_pairs(q_len, k_len)
    return b * h * q_len * k_len


def _sdpa_formula(packet: Any, backward: bool) -> Callable[..., int]:
    """A raw FlopCounterMode formula for one SDPA op: 2 x pairs x (d_qk + d_v), backward 2x that."""
    names = [arg.name for arg in packet.default._schema.arguments]
    fallback = flop_counter.flop_registry.get(packet)

    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        bound = {**dict(zip(names, args)), **kwargs}
        q, k, v = bound["query"], bound["key"], bound["value"]
        if q.dim() != 4:  # nested / varlen inputs: leave them to torch's own formula
            return fallback(*args, out_val=out_val, **kwargs) if fallback else 0
        mask = bound.get("attn_mask", bound.get("attn_bias"))
        pairs = _score_pairs(tuple(q.shape), tuple(k.shape), bool(bound.get("is_causal", False)), mask)
        flops = 2 * pairs * (q.shape[-1] + v.shape[-1])  # QK^T and AV
        return 2 * flops if backward else flops

    formula._get_raw = True  # FlopCounterMode passes tensors, not shapes, to raw formulas
    return formula


_CAUSAL_SDPA = {
    **{op: _sdpa_formula(op, backward=False) for op in _SDPA_FORWARD},
    **{op: _sdpa_formula(op, backward=True) for op in _SDPA_BACKWARD},
}


# -- instrumented counts ------------------------------------------------------------------------
@dataclass(frozen=True)
class FlopSplit:
    """A count split into weight matmuls and attention (SDPA kernels and batched matmuls)."""

    matmul: int
    attention: int

    @property
    def total(self) -> int:
        return self.matmul + self.attention


def counter() -> FlopCounterMode:
    """A FlopCounterMode with the causal SDPA formulas (module docstring)."""
    return FlopCounterMode(display=False, custom_mapping=_CAUSAL_SDPA)


def _split(counter: FlopCounterMode) -> FlopSplit:
    counts = counter.get_flop_counts().get("Global", {})
    attention = sum(n for op, n in counts.items() if op in _ATTENTION_OPS)
    return FlopSplit(matmul=sum(counts.values()) - attention, attention=attention)


def counted_so_far(counter: FlopCounterMode) -> int:
    """What `counter` has counted up to now (it may still be counting)."""
    return sum(counter.get_flop_counts().get("Global", {}).values())


def count_flops(fn: Callable[[], Any]) -> FlopSplit:
    """Run `fn()` under the audit's FlopCounterMode and return its count, split."""
    mode = counter()
    with mode:
        fn()
    return _split(mode)


def instrumented_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of everything `fn()` runs, SDPA counted by the query-key pairs it attends (module doc)."""
    return count_flops(fn).total


class _LogitsOnly(torch.nn.Module):
    """input_ids -> logits, so that torch.jit.trace (fvcore) sees tensors only."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, use_cache=False).logits


def _fvcore_sdpa(inputs: list, outputs: list) -> int:
    """Multiply-adds of aten::scaled_dot_product_attention in a trace (fvcore has no handle for it).

    Under tracing, transformers materialises the causal mask instead of passing `is_causal`; the traced
    `_LogitsOnly` call has no padding, so a mask there is the causal one.
    """
    from fvcore.nn.jit_handles import get_shape

    q, k, v = (get_shape(x) for x in inputs[:3])
    has_mask = inputs[3].type().kind() != "NoneType"
    is_causal = len(inputs) > 5 and bool(inputs[5].toIValue())  # a constant in the trace
    return _score_pairs(q, k, is_causal or has_mask) * (q[-1] + v[-1])


_FVCORE_ATTENTION = {"scaled_dot_product_attention", "matmul", "bmm", "baddbmm", "einsum"}
_FVCORE_NORMS = ("aten::layer_norm", "aten::group_norm", "aten::batch_norm", "aten::instance_norm")


def fvcore_forward_flops(model: torch.nn.Module, input_ids: torch.Tensor) -> FlopSplit:
    """fvcore's count of one forward of `model(input_ids)`: multiply-adds x 2, norms excluded.

    Attention is SDPA (our handle) plus batched matmuls (eager attention); the rest is the matmul term.
    """
    from fvcore.nn import FlopCountAnalysis

    analysis = FlopCountAnalysis(_LogitsOnly(model), (input_ids,))
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    analysis.set_op_handle("aten::scaled_dot_product_attention", _fvcore_sdpa)
    for op in _FVCORE_NORMS:  # set_op_handle(op, None) does not drop a default handle
        analysis.set_op_handle(op, lambda inputs, outputs: 0)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # tracer warnings from data-dependent branches in HF code
        by_op = analysis.by_operator()
    attention = 2 * sum(n for op, n in by_op.items() if op in _FVCORE_ATTENTION)
    return FlopSplit(matmul=2 * sum(by_op.values()) - attention, attention=attention)
