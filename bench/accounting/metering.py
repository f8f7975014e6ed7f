"""Metered models: forward hooks that charge every call of a model to the ledger (docs/design.md, FLOP accounting).

`meter(model, name, ledger)` installs hooks on a Hugging Face causal LM, so that any call to it,
through our helpers or a method's own `model(input_ids)`, is charged by input shape and cache length:

- a forward is charged when it runs: kind `update` when its logits carry gradients, otherwise the
  ambient kind (`rollout` inside the rollout engine) or `score`;
- its backward (2 x forward) is charged when gradients reach its logits, i.e. only if it happens.

Padding positions are real compute and are charged; bucket prompts by length to avoid paying for them.
Work done with a model's weights outside its forward (a vLLM engine, `bench.rollout.vllm_engine`) is charged
analytically through `charge_outside`, to the same ledger and model name.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger, current_category, current_kind, current_phase
from bench.hf_compat import cache_length, call_cache

_HANDLES_ATTR = "_opd_meter_handles"
_LEDGER_ATTR = "_opd_meter_ledger"


def _call_arguments(signature: inspect.Signature | None, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, positional ones included (GPT-2 takes `cache` second)."""
    if signature is not None:
        try:
            call = dict(signature.bind_partial(*args, **kwargs).arguments)
        except TypeError:
            pass
        else:
            for param in signature.parameters.values():  # **kwargs: deprecated aliases arrive there
                if param.kind is inspect.Parameter.VAR_KEYWORD:
                    call.update(call.pop(param.name, {}))
            return call
    return {"input_ids": args[0], **kwargs} if args else dict(kwargs)


def _input_shape(call: dict) -> tuple[int, int]:
    ids = call.get("input_ids")
    if ids is None:
        ids = call.get("inputs_embeds")
    if ids is None:
        raise TypeError("metered model called without input_ids or inputs_embeds")
    return int(ids.shape[0]), int(ids.shape[1])


def _past_length(call: dict) -> int:
    past = call_cache(call)
    return 0 if past is None else cache_length(past)


def _logit_tokens(call: dict, new_tokens: int) -> int:
    """Positions the LM head runs on, as transformers reads `logits_to_keep`: an int 0 keeps every
    position, k > 0 the last k, k < 0 all but the first -k (`slice(-k, None)`); a tensor indexes the
    positions (a 0-dim one picks one)."""
    keep = call.get("logits_to_keep", 0)
    if isinstance(keep, torch.Tensor):
        return int(keep.numel())
    keep = int(keep)
    return new_tokens if keep == 0 else min(keep, new_tokens) if keep > 0 else max(new_tokens + keep, 0)


def meter(model: torch.nn.Module, name: str, ledger: Ledger) -> torch.nn.Module:
    """Charge every forward (and backward) of `model` to `ledger` under the model name `name`.

    Returns the same module. Metering twice replaces the earlier hooks.
    """
    unmeter(model)
    spec = FlopSpec.from_config(model.config)
    try:
        signature: inspect.Signature | None = inspect.signature(model.forward)
    except (TypeError, ValueError):
        signature = None
    pending: list[tuple[int, int]] = []  # (flops, tokens) of calls whose forward is running

    def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        call = _call_arguments(signature, args, kwargs)
        batch, new_tokens = _input_shape(call)
        flops = spec.forward_flops(new_tokens, _past_length(call), _logit_tokens(call, new_tokens), batch=batch)
        pending.append((flops, batch * new_tokens))

    def post_hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        flops, tokens = pending.pop()
        logits = getattr(output, "logits", None)
        trains = logits is not None and logits.requires_grad
        kind = "update" if trains else current_kind("score")
        ledger.charge(model=name, flops=flops, tokens=tokens, kind=kind)
        if trains:
            # Captured now: backward may run outside the block that ran the forward.
            phase, category = current_phase(), current_category()

            def on_backward(grad: torch.Tensor) -> None:
                ledger.charge(
                    model=name, flops=2 * flops, tokens=0, kind="update", phase=phase, category=category
                )

            logits.register_hook(on_backward)

    handles = [
        model.register_forward_pre_hook(pre_hook, with_kwargs=True),
        model.register_forward_hook(post_hook, with_kwargs=True),
    ]
    setattr(model, _HANDLES_ATTR, handles)
    setattr(model, _LEDGER_ATTR, ledger)
    model.flop_spec = spec
    model.meter_name = name
    return model


def unmeter(model: torch.nn.Module) -> None:
    for handle in getattr(model, _HANDLES_ATTR, []):
        handle.remove()
    for attr in (_HANDLES_ATTR, _LEDGER_ATTR):
        if hasattr(model, attr):
            delattr(model, attr)


def is_metered(model: torch.nn.Module) -> bool:
    return bool(getattr(model, _HANDLES_ATTR, None))


def charge_outside(model: torch.nn.Module, *, flops: float, tokens: int, kind: str) -> None:
    """Charge work done with `model`'s weights but not through its forward to the ledger `meter` gave it.

    For engines that cannot be hooked (vLLM): the caller computes `flops` with the model's `FlopSpec`.
    An unmetered model is charged nothing, exactly as its own forward would not be.
    """
    ledger = getattr(model, _LEDGER_ATTR, None)
    if ledger is not None:
        ledger.charge(model=model.meter_name, flops=flops, tokens=tokens, kind=kind)
