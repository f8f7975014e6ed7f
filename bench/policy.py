"""Policies: metered models with their optimiser, the objects methods train and score with.

A `Policy` is a handle: a method gets log-probs, an optimiser step, encode/decode and a few facts
(name, device, vocabulary) through it, never the model or the optimiser. The model it wraps has the
ledger's hooks installed, so even code that reaches past the handle (`policy._model(input_ids)`) is
charged (docs/design.md, FLOP accounting). The engine uses the `_`-prefixed members.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
from typing import Any
from unittest import mock

import jinja2
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, PreTrainedModel
from transformers.utils import chat_template_utils

from bench.accounting.ledger import Ledger, current_category, current_phase
from bench.accounting.metering import meter
from bench.errors import RunError
from bench.losses import (distinct_symbols, head_recompute_flops, keep_budget, linear_token_logprobs,
                          token_logprobs)

# Architectures whose logits are exactly lm_head(final hidden state): no soft-capping or scaling, so
# the LM head can be fused with the log-softmax (`Policy.logprobs`).
FUSED_HEAD_TYPES = ("llama", "qwen2", "qwen3", "mistral")
# Logits alive at a time in the fused head (512 MiB in fp32). The backward's slices each cost a pass
# over the [tokens, hidden] gradient besides their matmuls: 28 slices at 16 x 1536 completion tokens
# of Qwen2-0.5B, a few percent of the head's backward (docs/gpu.md).
LOGIT_CHUNK = 2**27
# Logits the fused head keeps for its backward rather than recompute them there, off CUDA (4 GiB in
# bf16, less than the eager path holds at its micro-batches' cap of 2^29 logits, 10 bytes each at its
# peak): 16 x 1024 tokens of Qwen2-0.5B with a prompt quarter fit, 16 x 2048 do not. On CUDA, as many
# as the device's free memory holds (`bench.losses.keep_budget`, docs/gpu.md).
KEEP_LOGITS = 2**31
COMPILE_MIN_PARAMS = 10**8


def fused_head_supported(model: torch.nn.Module) -> bool:
    """Whether `model`'s logits are a bias-free linear map of its last hidden state (`FUSED_HEAD_TYPES`)."""
    config, head = model.config, model.get_output_embeddings()
    return (getattr(config, "model_type", None) in FUSED_HEAD_TYPES and isinstance(head, torch.nn.Linear)
            and head.bias is None and not getattr(config, "final_logit_softcapping", None)
            and not getattr(config, "logit_scale", None))


def right_padded(mask: torch.Tensor) -> bool:
    """Whether each row of an attention mask [B, T] is ones then zeros (padding on the right only)."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all())


@contextlib.contextmanager
def _swapped(module: torch.nn.Module, attr: str, replacement: torch.nn.Module):
    """`module.<attr>` replaced for the block; yields the original."""
    original = getattr(module, attr)
    setattr(module, attr, replacement)
    try:
        yield original
    finally:
        setattr(module, attr, original)


def rebuilt(config: Any, weights: dict[str, torch.Tensor], *, device: Any, dtype: torch.dtype) -> PreTrainedModel:
    """A new model of `config`'s architecture in `dtype` on `device`, holding `weights` (a state dict):
    built as `from_pretrained(dtype=...)` builds one, so its non-persistent buffers (RoPE's `inv_freq`)
    keep their own dtype, where a model cast with `.to(dtype=...)` has them rounded to bf16."""
    model = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    model.load_state_dict(weights)
    return model.to(device)


# The day a chat template that asks for today's date is given, so that a prompt's tokens do not change
# from one day to the next (a resumed run, a later `bench eval`): Llama 3.x's own fallback. Templates
# read it as `date_string` (Llama 3.x's) or call transformers' `strftime_now` (Mistral Small 3's),
# which `chat_day` makes read it too.
CHAT_DATE = "26 Jul 2024"


class _ChatDay(datetime.datetime):
    @classmethod
    def now(cls, tz: Any = None) -> datetime.datetime:
        return cls(2024, 7, 26, tzinfo=tz)  # CHAT_DATE


@contextlib.contextmanager
def chat_day():
    """Chat templates rendered in the block see `CHAT_DATE` as today through `strftime_now` (transformers
    turns a template's variables into plain data, so no function of ours can be passed as one)."""
    if not isinstance(getattr(chat_template_utils, "datetime", None), type):  # a transformers that has none
        yield
        return
    with mock.patch.object(chat_template_utils, "datetime", _ChatDay):
        yield


def end_of_turn(tokenizer: Any) -> int | None:
    """The special token a tokenizer's chat template puts right after an assistant's answer (Qwen's
    `<|im_end|>`, Llama 3's `<|eot_id|>`, Gemma's `<end_of_turn>`); None where it puts text there (or
    nothing), or there is no template. A model that chats ends its answer with it, and may never emit
    the tokenizer's EOS (Qwen's base models: `<|endoftext|>`)."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    mark = "ANSWER-7c1e"
    try:
        with chat_day():
            turns = [{"role": "user", "content": "Q"}, {"role": "assistant", "content": mark}]
            text = tokenizer.apply_chat_template(turns, tokenize=False, date_string=CHAT_DATE)
    except Exception:  # a template that cannot end on an answer: jinja's errors vary
        return None
    if not isinstance(text, str) or mark not in text:
        return None
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    for token in tokenizer(text.split(mark, 1)[1], add_special_tokens=False)["input_ids"]:
        if tokenizer.decode([token]).strip():  # whitespace before it (`content + "\n<|im_end|>"`) is passed over
            return int(token) if token in special else None
    return None


def stop_tokens(tokenizer: Any, chat: bool) -> tuple[int, ...]:
    """The tokens that end a completion, the one that ends an answer first: a chat template's end of turn
    where prompts are chat turns (`end_of_turn`), then the tokenizer's EOS (`Policy.stop_ids`)."""
    turn_end = end_of_turn(tokenizer) if chat else None
    return tuple(dict.fromkeys(int(t) for t in (turn_end, tokenizer.eos_token_id) if t is not None))


class Policy:
    """A named, metered causal LM, its tokenizer and (once it trains) its optimiser."""

    def __init__(self, name: str, model: torch.nn.Module, tokenizer: Any, ledger: Ledger, trainable: bool = True,
                 *, chat: bool = False) -> None:
        self.name = name
        self._model = model
        self._tokenizer = tokenizer
        self._ledger = ledger
        self._trainable = trainable
        self._optimizer: torch.optim.Optimizer | None = None
        self._updates = 0
        self._extra: dict = {}
        self._chat = chat  # prompts go through the tokenizer's chat template (hf profile)
        self._stops = stop_tokens(tokenizer, chat)
        # Log-probs with gradients: the LM head fused with the log-softmax (None: on CUDA where the
        # architecture allows it), the decoder under torch.compile (None: on CUDA for large models)
        # and the fused head's work after its matmuls too (None: where the decoder is), with this
        # backend. The optimiser: AdamW's fused kernel (None: on CUDA) or its multi-tensor one, on an
        # fp32 copy of the weights (None: where they are bf16 or fp16) or on the weights themselves.
        self.fused_head: bool | None = None
        self.compile_body: bool | None = None
        self.compile_head: bool | None = None
        self.compile_backend = "inductor"
        self.fused_optimizer: bool | None = None
        self.master_weights: bool | None = None
        self._master: list[torch.Tensor] | None = None  # the fp32 weights AdamW steps (`keeps_master_weights`)
        # A right-padded batch's log-probs without its attention mask (None: on CUDA; `drops_padding_mask`).
        self.drop_padding_mask: bool | None = None
        self.max_logits = LOGIT_CHUNK  # fp32 logits alive at a time in the fused head
        # the most logits the fused head keeps for its backward (None: `keep_budget`)
        self.keep_logits: int | None = None
        self.recomputed_head_rows = 0  # rows whose head the fused head's backward has recomputed
        self._compiled: tuple[torch.nn.Module, str, torch.nn.Module] | None = None  # (parent, attribute, compiled)
        meter(self._model, self.name, self._ledger)
        # Eval mode throughout, training included: no dropout, so the policy that samples is the one
        # that is scored and stepped (an on-policy ratio is exactly 1), and the ledger charges what runs
        # (on CPU, attention with dropout falls back to a kernel that also computes the masked half).
        self._model.eval()
        if not self._trainable:
            self._model.requires_grad_(False)

    def __setattr__(self, key: str, value: Any) -> None:
        """The engine's methods stay the engine's: a method that replaced, say, `decode` or
        `encode_prompt` on a policy would run its own code inside held-out evaluations (booked `eval`,
        uncounted) and could see the held-out prompts and choose the answers scored."""
        if callable(getattr(type(self), key, None)) or isinstance(getattr(type(self), key, None), property):
            raise AttributeError(f"{type(self).__name__}.{key} belongs to the engine; it cannot be replaced on a "
                                 "policy")
        object.__setattr__(self, key, value)

    def __repr__(self) -> str:
        return f"Policy({self.name!r}, {type(self._model).__name__}, trainable={self._trainable})"

    # -- what a method may read -----------------------------------------------------------------
    @property
    def trainable(self) -> bool:
        """False for teachers and snapshots: `step` refuses them."""
        return self._trainable

    @property
    def updates(self) -> int:
        """Optimiser steps taken so far (the learning-rate warm-up counts them)."""
        return self._updates

    @property
    def eos_id(self) -> int:
        """The token that ends an answer: the chat template's end of turn where prompts are chat turns
        and the template ends one with a special token (Qwen's `<|im_end|>`), else the tokenizer's EOS."""
        return self._stops[0]

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Every token that ends a completion: `eos_id`, and the tokenizer's EOS where that differs."""
        return self._stops

    @property
    def pad_id(self) -> int:
        return int(self._tokenizer.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self._model.parameters()).device

    @property
    def vocab_size(self) -> int:
        """Rows of the LM head (the logits' last dimension), which may exceed the tokenizer's size."""
        return int(self._model.config.vocab_size)

    def vocab(self) -> dict[str, int]:
        """The tokenizer's vocabulary, token -> id (two policies share token ids iff these are equal)."""
        return dict(self._tokenizer.get_vocab())

    def encode(self, text: str) -> list[int]:
        return self._tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_prompt(self, prompt: str) -> list[int]:
        """A task prompt as model input. Where the policy chats (hf profile): one user turn of the chat
        template, or, for a tokenizer without one (Llama 3's base models), the text with the tokenizer's
        own special tokens (their BOS); otherwise the text alone."""
        if not self._chat:
            return self.encode(prompt)
        if not getattr(self._tokenizer, "chat_template", None):
            return list(self._tokenizer(prompt)["input_ids"])
        try:
            with chat_day():
                ids = self._tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                          add_generation_prompt=True, tokenize=True,
                                                          date_string=CHAT_DATE)
        except jinja2.TemplateError as exc:
            raise RunError(f"the tokenizer's chat template cannot format one user turn ({exc}); give the model "
                           "folder a template that can, or remove it to prompt with plain text") from exc
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def decode(self, ids: list[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=True)

    def logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """Per-token log-probs [B, T] of the sequences under this model (with grad if enabled).

        With `keep`, only the last `keep` positions get theirs (the rest are 0): the LM head and the
        log-softmax then run on `keep` + 1 positions instead of T, which is most of the cost of a long
        prompt under a large vocabulary. Callers pass the completion's width. With gradients, the
        decoder may run compiled and the LM head fused with the log-softmax (`fuses_head`,
        `compiles_body`): the same log-probs and gradients, without [B, keep + 1, V] fp32 logits.
        """
        if keep is not None and keep < 0:
            raise ValueError(f"keep is a number of positions, 0 or more; got {keep}")
        # read where the caller's mask is (the update's are on the host: no wait for the device)
        causal_alone = self.drops_padding_mask and right_padded(attention_mask)
        input_ids = input_ids.to(self.device)
        width = input_ids.shape[1]
        kept = width if keep is None or keep + 1 >= width else keep + 1  # positions that get logits
        # without a mask, causal attention alone gives every real position the same keys
        call = dict(input_ids=input_ids, attention_mask=None if causal_alone else attention_mask.to(self.device),
                    use_cache=False)  # no KV cache to fill: nothing here decodes after it
        if kept < width:
            call["logits_to_keep"] = kept
        training = torch.is_grad_enabled()
        with contextlib.ExitStack() as stack:
            # a single row runs eagerly: dynamo fixes sizes of 1, and would compile it a graph of its own
            if training and self.compiles_body and input_ids.shape[0] > 1:
                stack.enter_context(_swapped(*self._compiled_body()))
                stack.enter_context(distinct_symbols())
            if not (training and self.fuses_head):
                logits = self._model(**call).logits  # [B, kept, V]
                picked = token_logprobs(logits, input_ids[:, width - kept:])  # [B, kept]
            else:
                head = stack.enter_context(_swapped(self._model, "lm_head", torch.nn.Identity()))
                hidden = self._model(**call).logits  # [B, kept, d]: the metered call, its head skipped
                picked = self._fused_logprobs(hidden, head.weight, input_ids[:, width - kept:])
        return picked if kept == width else F.pad(picked[:, 1:], (width - kept + 1, 0))

    @property
    def fuses_head(self) -> bool:
        if self.fused_head is not None:
            return self.fused_head
        return self.device.type == "cuda" and fused_head_supported(self._model)

    @property
    def compiles_body(self) -> bool:
        """Compiling pays back its first minute only on a large model: by default on CUDA from
        `COMPILE_MIN_PARAMS` parameters (a 0.5B model's update gained 1.2x on an H200; on a small model the
        first minute of compilation would be most of a short run)."""
        if self.compile_body is not None:
            return self.compile_body
        return self.device.type == "cuda" and sum(p.numel() for p in self._model.parameters()) >= COMPILE_MIN_PARAMS

    @property
    def drops_padding_mask(self) -> bool:
        """Whether `logprobs` runs a right-padded batch without its attention mask, by default on CUDA.
        Causal attention alone gives each real position the keys the mask gives it (padding only
        follows them), so the real positions' log-probs are the same up to the kernels' rounding.
        With a mask of any padding, sdpa gets the [B, 1, T, T] mask, cannot take its causal kernels
        and repeats the grouped keys and values for every query head (a decoder compiled whole builds
        that mask even when it is all ones). Padding's own positions then see each other, which
        nothing reads. That is in bf16 or fp16, where sdpa's flash kernel takes the grouped keys and
        values as they are. In fp32 (`gpu-small`) no fused kernel of sdpa takes grouped-query attention
        on CUDA, so without the mask it runs its math kernel, scores materialised; with the mask the
        memory-efficient kernel would run on repeated keys and values. Which is faster at that world's
        ~150-token rows, where attention is a few percent of a layer's FLOPs, is not measured. On the
        CPU the mask stays, and with it every reference result."""
        return self.drop_padding_mask if self.drop_padding_mask is not None else self.device.type == "cuda"

    @property
    def compiles_head(self) -> bool:
        """Whether the fused head's elementwise work and reductions run compiled: by default where the
        decoder does (a few seconds of compilation, paid back only by a large vocabulary's logits)."""
        return self.compile_head if self.compile_head is not None else self.compiles_body

    @property
    def fuses_optimizer(self) -> bool:
        """Whether AdamW runs as one fused kernel (`AdamW(fused=True)`), by default on CUDA: the
        multi-tensor one makes several passes over the parameters and their state. On the CPU the
        multi-tensor one stays, and with it every reference result."""
        return self.fused_optimizer if self.fused_optimizer is not None else self.device.type == "cuda"

    @property
    def keeps_master_weights(self) -> bool:
        """Whether AdamW steps an fp32 copy of the weights, each step's result rounded into the model's
        own, by default where they are bf16 or fp16 (the hf profile on CUDA). Stepped in bf16, an
        update smaller than half the spacing of bf16 values around a weight (2^-9 to 2^-8 of it) is
        rounded away: at a learning rate of 1e-6, AdamW's step is about 1e-6, and a weight of 0.02
        moves only by a step of more than 6.1e-5, so nearly every weight of a pretrained model would
        stay put (a test shows it). The model stays in its dtype for its forwards, backwards and
        rollouts; each backward's gradients are added into the fp32 copies' (`gather_gradients`), so
        an update's length buckets are summed in fp32, not rounded to bf16 at every bucket. On fp32
        weights (every CPU world) it is off."""
        if self.master_weights is not None:
            return self.master_weights
        return any(p.dtype in (torch.bfloat16, torch.float16) for p in self._model.parameters())

    def _new_optimizer(self, lr: float) -> torch.optim.Optimizer:
        params = list(self._model.parameters())
        if self.keeps_master_weights:
            params = self._master_weights()
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.0, fused=self.fuses_optimizer)

    def _master_weights(self) -> list[torch.Tensor]:
        """The fp32 copies of the weights that AdamW steps (`keeps_master_weights`), made from the
        model's at the first need: the first update's first backward, before any step."""
        if self._master is None:
            self._master = [p.detach().to(torch.float32, copy=True) for p in self._model.parameters()]
        return self._master

    def gather_gradients(self) -> None:
        """Where AdamW steps fp32 copies of the weights: the gradients of the backwards run since the
        last call, added into the copies' gradients in fp32 and dropped from the model's. The update
        engine calls it after each bucket's backward, so each bucket's gradient is rounded to the
        model's dtype once, as its backward computes it, and the buckets are summed in fp32; `step`
        calls it before stepping. Elsewhere it does nothing."""
        if not self.keeps_master_weights:
            return
        for weight, master in zip(self._model.parameters(), self._master_weights()):
            if weight.grad is None:
                continue
            if master.grad is None:
                master.grad = weight.grad.to(torch.float32)
            else:
                master.grad.add_(weight.grad)
            weight.grad = None

    def _compiled_body(self) -> tuple[torch.nn.Module, str, torch.nn.Module]:
        """The decoder under torch.compile, as (parent, attribute, compiled module) to swap in for an
        update; built once, its sizes symbolic from the first compilation, each a symbol of its own
        (`distinct_symbols`). An update's width is its longest row's, so nearly every batch has a
        shape of its own: compiled for its first shape alone (torch's default), the graph would be
        compiled again at the second, with symbolic sizes, and that one would serve the rest of the
        run. So a run compiles once, at its first update. A bucket of a single row, which dynamo would
        compile again with its size fixed to 1, runs eagerly (`logprobs`).

        Layer by layer where the decoder keeps its layers in a list (`layers`, as Llama and Qwen2 do):
        every layer runs the same code on parameters of the same shapes, so one graph serves them all,
        and compiling takes one layer's time, not the stack's (`benchmarks/bench_compile.py`: for 24
        layers of Qwen2-0.5B's width on a CPU, a first step of 32-34 s against 126-130 s). What lies
        between the layers (embedding, rotary angles, attention mask, final norm) runs eagerly, where
        a mask of all ones is skipped. Otherwise the whole decoder stack is one compiled module."""
        if self._compiled is None:
            body = getattr(self._model, self._model.base_model_prefix)
            compiled = lambda module: torch.compile(module, backend=self.compile_backend, dynamic=True)  # noqa: E731
            layers = getattr(body, "layers", None)
            if isinstance(layers, torch.nn.ModuleList):
                self._compiled = (body, "layers", torch.nn.ModuleList([compiled(layer) for layer in layers]))
            else:
                self._compiled = (self._model, self._model.base_model_prefix, compiled(body))
        return self._compiled

    def _fused_logprobs(self, hidden: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        """`token_logprobs` of ids [B, S] from hidden states [B, S, d] and the LM head's weight, fused.

        Every position gets its head row, the last one too (its target is a placeholder and its
        log-prob dropped), exactly the work the meter charged for the call. Beyond `keep_logits`
        logits the backward recomputes the head, one more LM-head forward, charged here as `update`.
        """
        batch, positions, dim = hidden.shape
        targets = F.pad(ids[:, 1:], (0, 1))  # [B, S]: position t predicts token t + 1
        phase, category = current_phase(), current_category()

        def charge(rows: int) -> None:
            self.recomputed_head_rows += rows
            self._ledger.charge(model=self.name, flops=head_recompute_flops(weight, rows), tokens=0, kind="update",
                                phase=phase, category=category)

        out = linear_token_logprobs(hidden.reshape(-1, dim), weight, targets.reshape(-1),
                                    max_logits=self.max_logits, keep_logits=self.keep_budget(weight, batch * positions),
                                    on_recompute=charge,
                                    compile_backend=self.compile_backend if self.compiles_head else None)
        return F.pad(out.view(batch, positions)[:, :-1], (1, 0))  # [B, S], as token_logprobs

    def keep_budget(self, weight: torch.Tensor, rows: int) -> int:
        """The most logits the fused head may keep for its backward over `rows` rows of the LM head
        `weight`: `keep_logits` where set; on CUDA, what the device's free memory holds at the head's
        forward, the activations of the decoder already in it (`bench.losses.keep_budget`); else
        `KEEP_LOGITS`."""
        if self.keep_logits is not None:
            return self.keep_logits
        if self.device.type != "cuda":
            return KEEP_LOGITS
        free, total = torch.cuda.mem_get_info(self.device)
        cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(self.device)
        return keep_budget(free + cached, total, rows, *weight.shape, weight.element_size(), self.max_logits)

    # -- training -------------------------------------------------------------------------------
    def step(
        self, loss: torch.Tensor | None, lr: float, warmup_updates: int = 0, max_grad_norm: float = 1.0
    ) -> float:
        """Backward (unless `loss` is None: gradients already accumulated), clip, one AdamW step with
        linear learning-rate warm-up; returns the gradient norm."""
        if not self._trainable:
            raise RuntimeError(f"policy {self.name!r} is frozen (a teacher) and cannot be updated")
        if self._optimizer is None:
            self._optimizer = self._new_optimizer(lr)
        scale = min(1.0, (self._updates + 1) / warmup_updates) if warmup_updates else 1.0
        for group in self._optimizer.param_groups:
            group["lr"] = lr * scale
        if loss is not None:
            loss.backward()
        weights = list(self._model.parameters())
        self.gather_gradients()  # where kept, into the fp32 weights, which AdamW steps
        norm = torch.nn.utils.clip_grad_norm_(self._master or weights, max_grad_norm)
        self._optimizer.step()
        if self._master is not None:
            with torch.no_grad():  # rounded into the model's weights, their version counters bumped
                for weight, master in zip(weights, self._master):
                    weight.copy_(master)
        elif any(group.get("fused") for group in self._optimizer.param_groups):  # as built or as loaded
            # the fused kernel writes the weights without bumping their version counters, through
            # which the vLLM engine sees changed weights (bench/rollout/vllm_engine.py)
            torch.autograd.graph.increment_version(weights)
        self._optimizer.zero_grad(set_to_none=True)
        self._updates += 1
        return float(norm)

    # -- engine side ----------------------------------------------------------------------------
    def _clock(self, kind: str) -> contextlib.AbstractContextManager:
        """The ledger's wall clock for this model's work of `kind`."""
        return self._ledger.clock(model=self.name, kind=kind, device=self.device)

    def _clone(self, name: str, trainable: bool = True) -> Policy:
        """An independent copy with fresh optimiser state, metered under `name` (`RunContext.clone`)."""
        # Rebuilt from config, not deep-copied: a deep copy would carry this model's meter hooks.
        model = rebuilt(self._model.config, self._model.state_dict(), device=self.device,
                        dtype=next(self._model.parameters()).dtype)
        return Policy(name, model, self._tokenizer, self._ledger, trainable, chat=self._chat)

    def _state(self) -> dict:
        """Weights, optimiser state and step count, for checkpoints and phase results."""
        return {
            "model": self._model.state_dict(),
            "optimizer": self._optimizer.state_dict() if self._optimizer is not None else None,
            "master": list(self._master) if self._master is not None else None,  # fp32 weights, where kept
            "updates": self._updates,
            "trainable": self._trainable,
            "extra": self._extra,
        }

    def _load_state(self, state: dict) -> None:
        self._model.load_state_dict(state["model"])
        self._updates = state["updates"]
        self._extra = state.get("extra", {})
        if state["optimizer"] is not None:
            self._optimizer = self._new_optimizer(1e-3)  # where kept, it makes the fp32 weights it steps
            self._optimizer.load_state_dict(state["optimizer"])
        if self._master is not None:  # the fp32 weights as saved (not rounded), else the loaded weights
            saved = state.get("master") or list(self._model.parameters())
            with torch.no_grad():
                for master, weight in zip(self._master, saved):
                    master.copy_(weight)
                    master.grad = None
