"""The FLOP audit: the ledger's analytic charges checked against instrumented counts (DESIGN section 2).

`audit_model(model)` runs a forward, a forward+backward and a cached generation on random ids and puts,
for each, these numbers side by side (`bench flops MODEL` prints them via `flops_report`/`format_audit`):

- charged: what `bench.metering` books for the calls that ran (FlopSpec, causal convention: a call of
  S new tokens after P cached ones attends S*P + S(S+1)/2 keys).
- analytic: FlopSpec for the work as the attention kernel runs it. With SDPA that is the charge. Eager
  attention multiplies the whole S x (P+S) score matrix and masks it afterwards, so there the causal
  key count is swapped for S*(P+S) (FlopSpec's per-key cost times the keys multiplied): S(S-1)/2 more
  keys per call and sequence than the charge.
- instrumented: `torch.utils.flop_counter.FlopCounterMode` on the real passes, with our formulas for
  every dense SDPA kernel (CPU flash; CUDA flash, efficient, cuDNN; forward and backward) that count
  the query-key pairs the call attends: S_q*S_k, the top-left causal triangle of torch's `is_causal`,
  or the pairs an explicit mask allows (so padding keys are not counted, while the ledger charges
  padding as compute). Torch itself counts CPU SDPA as zero and the CUDA kernels as non-causal.
  Batched matmuls (eager attention; the math fallback CPU SDPA takes under dropout) count the full
  matrices they multiply, which is what `analytic` expects for eager.
- fvcore (forward only): `fvcore.nn.FlopCountAnalysis` multiply-adds x 2, norms excluded, plus an SDPA
  handle of ours (fvcore has none) that counts causal pairs.

`audited(ledger, name)` counts any block of real work the same way and records the count in the
ledger next to its charges. The audit runs the model in eval mode (on CPU, SDPA with attention dropout
falls back to the math kernel). Generation runs as an inference engine does: prefill with
`logits_to_keep=1`, then one cached step per generated token but the last, which is never fed back.
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch.utils import flop_counter
from torch.utils.flop_counter import FlopCounterMode

from bench.flops import FlopSpec
from bench.ledger import Ledger, current_kind, ledger_context
from bench.metering import is_metered, meter, unmeter
from bench.rollout_kv import cache_argument

TOLERANCE = 0.02  # supported architectures must agree within 2% (DESIGN section 2)

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


def _register_cpu_sdpa() -> None:
    """Give a plain FlopCounterMode a count for CPU SDPA (torch counts it as zero); idempotent.

    Globally we keep torch's convention for the CUDA kernels (not causal), so that a plain counter
    means the same on CPU and CUDA; the audit's own counter overrides all of them (`_CAUSAL_SDPA`).
    """
    def forward(q, k, v, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_flop_count(q, k, v)

    def backward(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:
        return flop_counter.sdpa_backward_flop_count(grad, q, k, v)

    formulas = {
        _aten._scaled_dot_product_flash_attention_for_cpu: forward,
        _aten._scaled_dot_product_flash_attention_for_cpu_backward: backward,
    }
    for op, formula in formulas.items():
        if op not in flop_counter.flop_registry:
            flop_counter.register_flop_formula(op)(formula)


_register_cpu_sdpa()


# -- instrumented counts ------------------------------------------------------------------------
@dataclass(frozen=True)
class FlopSplit:
    """A count split into weight matmuls and attention (SDPA kernels and batched matmuls)."""

    matmul: int
    attention: int

    @property
    def total(self) -> int:
        return self.matmul + self.attention


def _counter() -> FlopCounterMode:
    return FlopCounterMode(display=False, custom_mapping=_CAUSAL_SDPA)


def _split(counter: FlopCounterMode) -> FlopSplit:
    counts = counter.get_flop_counts().get("Global", {})
    attention = sum(n for op, n in counts.items() if op in _ATTENTION_OPS)
    return FlopSplit(matmul=sum(counts.values()) - attention, attention=attention)


def count_flops(fn: Callable[[], Any]) -> FlopSplit:
    """Run `fn()` under the audit's FlopCounterMode and return its count, split."""
    counter = _counter()
    with counter:
        fn()
    return _split(counter)


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


# -- running the phases -------------------------------------------------------------------------
def _cache_of(output: Any) -> Any:
    cache = getattr(output, "cache", None)  # transformers >= 5.x renamed past_key_values to cache
    return cache if cache is not None else output.past_key_values


@torch.no_grad()
def greedy_generate(model: torch.nn.Module, prompt_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """Greedy decoding as an inference engine runs it; prompt [B, P] -> generated ids [B, new_tokens].

    Prefill with logits for the last position only, then one cached single-token step per generated
    token but the last, which is never fed back.
    """
    cache_kwarg = cache_argument(model)
    out = model(input_ids=prompt_ids, use_cache=True, logits_to_keep=1)
    tokens = [out.logits[:, -1].argmax(-1, keepdim=True)]  # [B, 1] each
    for _ in range(1, new_tokens):
        out = model(input_ids=tokens[-1], use_cache=True, **{cache_kwarg: _cache_of(out)})
        tokens.append(out.logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(tokens, dim=1)


def _forward(model: torch.nn.Module, ids: torch.Tensor) -> None:
    with torch.no_grad():
        model(input_ids=ids, use_cache=False)


def _train_step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    logits = model(input_ids=ids, use_cache=False).logits  # [B, S, V]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    loss.backward()


# -- the audit ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditRow:
    """One phase of `audit_model`: see the module docstring for what each number is."""

    phase: str  # "forward", "forward+backward" or "generate"
    analytic_flops: int  # FlopSpec for the work as the kernels run it
    instrumented_flops: int  # FlopCounterMode, SDPA counted by the pairs it attends
    fvcore_flops: int | None = None  # fvcore x 2, forward only; None where not run or tracing failed
    rel_diff: float = 0.0  # (instrumented - analytic) / analytic
    charged_flops: int = 0  # what the metered ledger charged (causal convention)
    attention: str = "causal"  # "causal", or "full" for eager attention

    @property
    def ok(self) -> bool:
        return abs(self.rel_diff) <= TOLERANCE


def _full_attention_extra(spec: FlopSpec, new_tokens: int, batch: int) -> int:
    """Eager attention's cost above the causal charge: S(S-1)/2 more keys per call and sequence."""
    return batch * spec.attention_flops(1) * (new_tokens * (new_tokens - 1) // 2)


def design_generate_flops(spec: FlopSpec, prompt_tokens: int, new_tokens: int) -> int:
    """DESIGN section 2's generation convention, per sequence: a forward over P+G tokens minus the
    LM head of P-1 prompt positions. It counts one token more than an engine runs (the last one)."""
    return spec.forward_flops(prompt_tokens + new_tokens) - 2 * spec.head_params * (prompt_tokens - 1)


def _measure(phase: str, fn: Callable[[], Any], ledger: Ledger, analytic: int, **fields: Any) -> AuditRow:
    before = sum(_charges(ledger).values())
    instrumented = instrumented_flops(fn)
    charged = int(sum(_charges(ledger).values()) - before)
    rel_diff = (instrumented - analytic) / analytic
    return AuditRow(phase, analytic, instrumented, rel_diff=rel_diff, charged_flops=charged, **fields)


def _try_fvcore(model: torch.nn.Module, ids: torch.Tensor) -> int | None:
    try:
        return fvcore_forward_flops(model, ids).total
    except Exception as exc:  # tracing fails in many model-specific ways; the audit goes on without it
        warnings.warn(f"fvcore could not trace {type(model).__name__}: {exc}", stacklevel=3)
        return None


def _analytic(spec: FlopSpec, eager: bool, batch: int, seq_len: int, prompt: int, new: int) -> list[int]:
    """Forward, forward+backward and generation as the kernels run them (module docstring)."""
    forward = spec.forward_flops(seq_len, batch=batch)
    generate = batch * spec.generate_flops(prompt, new)
    if eager:  # decode steps have one query, so only full passes and the prefill attend more
        forward += _full_attention_extra(spec, seq_len, batch)
        generate += _full_attention_extra(spec, prompt, batch)
    return [forward, 3 * forward, generate]


def audit_model(
    model: torch.nn.Module,
    *,
    batch: int = 2,
    seq_len: int = 32,
    gen_prompt: int = 8,
    gen_tokens: int = 8,
    fvcore: bool = True,
    seed: int = 0,
) -> list[AuditRow]:
    """Audit a Hugging Face causal LM: forward, forward+backward and cached generation.

    The model is metered into a private ledger for the audit (so the charge is what `bench.metering`
    really books), run in eval mode, and left as it was (mode, hooks, gradients). A model metered by
    a run is refused: its audit passes would be charged to the run.
    """
    if is_metered(model):
        raise ValueError("audit_model needs an unmetered model; use audited() to audit metered work")
    spec = FlopSpec.from_config(model.config)
    eager = getattr(model.config, "_attn_implementation", None) == "eager"
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, spec.vocab, (batch, seq_len), generator=generator)  # [B, S]
    ids = ids.to(next(model.parameters()).device)
    phases = {
        "forward": lambda: _forward(model, ids),
        "forward+backward": lambda: _train_step(model, ids),
        "generate": lambda: greedy_generate(model, ids[:, :gen_prompt], gen_tokens),
    }
    analytic = _analytic(spec, eager, batch, seq_len, gen_prompt, gen_tokens)
    was_training, grads = model.training, [p.grad for p in model.parameters()]
    model.eval()
    try:
        fv = _try_fvcore(model, ids) if fvcore else None
        ledger = Ledger()
        meter(model, "audit", ledger)
        attention = "full" if eager else "causal"
        return [
            _measure(phase, fn, ledger, flops, attention=attention, fvcore_flops=fv if i == 0 else None)
            for i, ((phase, fn), flops) in enumerate(zip(phases.items(), analytic))
        ]
    finally:
        unmeter(model)
        model.train(was_training)
        for param, grad in zip(model.parameters(), grads):
            param.grad = grad


def flops_report(model: torch.nn.Module, *, context: int = 128, **audit_kwargs: Any) -> dict:
    """Per-token costs from FlopSpec and the audit rows, for `bench flops MODEL`.

    `forward_flops_per_token` is one cached decode step with `context` tokens visible; the `_mean`
    ones average over a full causal pass of `context` tokens. The generation numbers are per sequence.
    """
    spec = FlopSpec.from_config(model.config)
    rows = audit_model(model, **audit_kwargs)
    defaults = inspect.signature(audit_model).parameters
    batch, prompt, new = (audit_kwargs.get(k, defaults[k].default) for k in ("batch", "gen_prompt", "gen_tokens"))
    measured = rows[-1].instrumented_flops / batch
    design = design_generate_flops(spec, prompt, new)
    return {
        "model_type": spec.model_type,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "matmul_params": spec.matmul_params,
        "context_tokens": context,
        "forward_flops_per_token": spec.forward_flops(1, past_tokens=context - 1),
        "forward_flops_per_token_mean": spec.forward_flops(context) / context,
        "train_flops_per_token_mean": spec.train_flops(context) / context,
        "generate_flops_measured": measured,
        "generate_flops_engine": spec.generate_flops(prompt, new),
        "generate_flops_design_convention": design,
        "generate_design_rel_diff": (design - measured) / measured,
        "audit": [asdict(row) for row in rows],
        "within_tolerance": all(row.ok for row in rows),
    }


def format_audit(audit: list[AuditRow] | dict) -> Any:
    """A rich Table of audit rows, or of a `flops_report` (per-token costs then go in the caption)."""
    from rich import box
    from rich.table import Table  # lazily: only the CLI renders tables

    report = audit if isinstance(audit, dict) else None
    rows = [AuditRow(**r) for r in report["audit"]] if report else audit
    attention = ", ".join(sorted({row.attention for row in rows}))
    table = Table(title=f"FLOP audit ({attention} attention, tolerance {TOLERANCE:.0%})", box=box.SIMPLE)
    for name in ("phase", "charged", "analytic", "instrumented", "diff", "fvcore diff"):
        phase = name == "phase"
        table.add_column(name, justify="left" if phase else "right", min_width=16 if phase else len(name))
    for row in rows:
        fv = row.fvcore_flops
        table.add_row(
            row.phase,
            *(f"{n:.4g}" for n in (row.charged_flops, row.analytic_flops, row.instrumented_flops)),
            f"{row.rel_diff:+.2%}",
            "-" if fv is None else f"{(fv - row.analytic_flops) / row.analytic_flops:+.2%}",
            style=None if row.ok else "bold red",
        )
    if report:
        table.caption = (
            f"{report['model_type']}, {report['matmul_params']:,} matmul params. Per token at context "
            f"{report['context_tokens']}: forward {report['forward_flops_per_token']:.4g}, train "
            f"{report['train_flops_per_token_mean']:.4g} (mean over a full pass)."
        )
    return table


# -- auditing real work -------------------------------------------------------------------------
@dataclass
class AuditResult:
    """Filled in when an `audited` block ends."""

    instrumented_flops: int = 0
    charged_flops: float = 0.0

    @property
    def rel_diff(self) -> float:
        if not self.charged_flops:
            return float("inf") if self.instrumented_flops else 0.0
        return (self.instrumented_flops - self.charged_flops) / self.charged_flops


def _charges(ledger: Ledger) -> dict[tuple, float]:
    return {(r["category"], r["phase"], r["kind"], r["model"]): r["flops"] for r in ledger.rows()}


@contextlib.contextmanager
def audited(ledger: Ledger, model_name: str) -> Iterator[AuditResult]:
    """Count the block's FLOPs with the instrumented counter and record them next to its charges.

    The count is shared among the ledger keys that `model_name` was charged to inside the block, in
    proportion to their charges. If nothing was charged, the count is booked as audit FLOPs against
    `model_name` under the current phase and kind: compute that ran but was never charged shows up.
    The block must run only this model (the count cannot be split between models).
    """
    result = AuditResult()
    before = _charges(ledger)
    counter = _counter()
    with counter:
        yield result
    result.instrumented_flops = counter.get_total_flops()
    delta = {k: v - before.get(k, 0.0) for k, v in _charges(ledger).items() if v > before.get(k, 0.0)}
    others = sorted({key[3] for key in delta} - {model_name})
    if others:
        raise ValueError(f"audited({model_name!r}) block also charged {others}; audit one model per block")
    result.charged_flops = sum(delta.values())
    if not delta:
        ledger.add_audit(model=model_name, kind=current_kind("score"), audit_flops=result.instrumented_flops)
        return
    for (category, phase, kind, model), flops in delta.items():
        with ledger_context(category=category):
            share = result.instrumented_flops * flops / result.charged_flops
            ledger.add_audit(model=model, kind=kind, phase=phase, audit_flops=share)
