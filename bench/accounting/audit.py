"""The FLOP audit: the ledger's analytic charges checked against instrumented counts.

See docs/design.md, FLOP accounting.

`audit_model(model)` runs a forward, a forward+backward and a cached generation on random ids and puts,
for each, these numbers side by side (`bench flops MODEL` prints `flops_report` as a table):

- charged: what `bench.accounting.metering` books for the calls that ran (FlopSpec, causal
  convention: a call of S new tokens after P cached ones attends S*P + S(S+1)/2 keys).
- analytic: FlopSpec for the work as the attention kernel runs it. With SDPA that is the charge. Eager
  attention multiplies the whole S x (P+S) score matrix and masks it afterwards, so there the causal
  key count is swapped for S*(P+S) (FlopSpec's per-key cost times the keys multiplied): S(S-1)/2 more
  keys per call and sequence than the charge.
- instrumented: `torch.utils.flop_counter.FlopCounterMode` on the real passes, every dense SDPA
  kernel counted by the query-key pairs it attends (`bench.accounting.counting`); batched matmuls
  (eager attention) count the full matrices they multiply, which is what `analytic` expects for eager.
- fvcore (forward only): multiply-adds x 2, norms excluded (`bench.accounting.counting`).

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

from bench.accounting.counting import counter, fvcore_forward_flops, instrumented_flops
from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger, current_kind, ledger_context
from bench.accounting.metering import is_metered, meter, unmeter
from bench.hf_compat import cache_argument, output_cache

TOLERANCE = 0.02  # supported architectures must agree within 2% (docs/design.md, FLOP accounting)


# -- running the phases -------------------------------------------------------------------------
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
        out = model(input_ids=tokens[-1], use_cache=True, **{cache_kwarg: output_cache(out)})
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


def full_pass_generate_flops(spec: FlopSpec, prompt_tokens: int, new_tokens: int) -> int:
    """Generation counted as one forward over P+G tokens minus the LM head of P-1 prompt positions,
    per sequence: one token more than an engine runs, the last one, which is never fed back. The
    ledger charges P+G-1 (`FlopSpec.generate_flops`; docs/design.md, FLOP accounting)."""
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

    The model is metered into a private ledger for the audit (so the charge is what `bench.accounting.metering`
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
    full_pass = full_pass_generate_flops(spec, prompt, new)
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
        "generate_flops_full_pass": full_pass,
        "generate_full_pass_rel_diff": (full_pass - measured) / measured,
        "audit": [asdict(row) for row in rows],
        "within_tolerance": all(row.ok for row in rows),
    }


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
    mode = counter()
    with mode:
        yield result
    result.instrumented_flops = mode.get_total_flops()
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
