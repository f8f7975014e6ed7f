"""The rollout engines by name (`bench run --rollout torch|vllm`).

Importing this module does not import vLLM: `VLLMRollout` imports it when it builds an engine.
"""

from __future__ import annotations

from bench.rollout.base import RolloutBackend
from bench.rollout.graphs import GraphRollout
from bench.rollout.torch_engine import TorchRollout
from bench.rollout.vllm_engine import VLLMRollout, vllm_missing

__all__ = ["ROLLOUT_BACKENDS", "GraphRollout", "RolloutBackend", "TorchRollout", "make_backend", "vllm_missing"]

ROLLOUT_BACKENDS = ("torch", "vllm")


def make_backend(name: str) -> RolloutBackend:
    """The named rollout engine (`bench run --rollout`); vLLM is imported only when it is asked for."""
    if name == "vllm":
        return VLLMRollout()
    if name != "torch":
        raise ValueError(f"unknown rollout backend {name!r}; known: {', '.join(ROLLOUT_BACKENDS)}")
    return GraphRollout()  # TorchRollout, with a static cache and CUDA-graph decode steps on CUDA


