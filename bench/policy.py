"""Policies (metered models with their optimiser) and rollouts: the objects methods hold.

A `Policy` never exposes an unmetered model: its `model` has the ledger's hooks installed, so a
method that calls `policy.model(input_ids)` itself is still charged (DESIGN section 2).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from bench.accounting.ledger import Ledger
from bench.losses import token_logprobs
from bench.accounting.metering import meter


@dataclass
class Rollouts:
    """`n` samples for each of `len(problems)` prompts, grouped: row i*n + j is sample j of prompt i.

    Tensors are prompt + completion, right-padded: input_ids / attention_mask / completion_mask
    [B, T] with B = len(problems) * n; rewards and lengths [B]. `logprobs` [B, T], when the rollout
    engine supplies them, are the sampling policy's per-token log-probs (unscaled by temperature,
    0 off completions): on-policy methods use them instead of paying for another forward pass.
    """

    problems: list[Any]
    n: int
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    completions: list[str]
    rewards: torch.Tensor
    lengths: torch.Tensor
    logprobs: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def domains(self) -> list[str]:
        """Domain of each row (each problem's domain repeated n times)."""
        return [p.domain for p in self.problems for _ in range(self.n)]


@dataclass
class Policy:
    """A named, metered causal LM, its tokenizer and (once it trains) its optimiser."""

    name: str
    model: torch.nn.Module
    tokenizer: Any
    ledger: Ledger
    trainable: bool = True
    optimizer: torch.optim.Optimizer | None = None
    updates: int = 0
    extra: dict = field(default_factory=dict)
    chat: bool = False  # prompts go through the tokenizer's chat template (hf profile)

    def __post_init__(self) -> None:
        meter(self.model, self.name, self.ledger)
        if not self.trainable:
            self.model.requires_grad_(False)
            self.model.eval()

    # -- model access ---------------------------------------------------------------------------
    @property
    def eos_id(self) -> int:
        return int(self.tokenizer.eos_token_id)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def _clock(self, kind: str) -> contextlib.AbstractContextManager:
        """The ledger's wall clock for this model's work of `kind` (engine side)."""
        return self.ledger.clock(model=self.name, kind=kind, device=self.device)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_prompt(self, prompt: str) -> list[int]:
        """A task prompt as model input: one user turn of the chat template where the policy chats."""
        if self.chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return self.encode(prompt)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def vocab_size(self) -> int:
        """Rows of the LM head (the logits' last dimension), which may exceed the tokenizer's size."""
        return int(self.model.config.vocab_size)

    def logprobs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: int | None = None) -> torch.Tensor:
        """Per-token log-probs [B, T] of the sequences under this model (with grad if enabled).

        With `keep`, only the last `keep` positions get theirs (the rest are 0): the LM head and the
        log-softmax then run on `keep` + 1 positions instead of T, which is most of the cost of a long
        prompt under a large vocabulary. Callers pass the completion's width.
        """
        device = self.device
        input_ids = input_ids.to(device)
        width = input_ids.shape[1]
        if keep is None or keep + 1 >= width:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask.to(device)).logits
            return token_logprobs(logits, input_ids)
        mask = attention_mask.to(device)
        logits = self.model(input_ids=input_ids, attention_mask=mask, logits_to_keep=keep + 1).logits  # [B, keep+1, V]
        return F.pad(token_logprobs(logits, input_ids[:, -(keep + 1):])[:, 1:], (width - keep, 0))

    # -- training -------------------------------------------------------------------------------
    def step(
        self, loss: torch.Tensor | None, lr: float, warmup_updates: int = 0, max_grad_norm: float = 1.0
    ) -> float:
        """Backward (unless `loss` is None: gradients already accumulated), clip, one AdamW step with
        linear learning-rate warm-up; returns the gradient norm."""
        if not self.trainable:
            raise RuntimeError(f"policy {self.name!r} is frozen (a teacher) and cannot be updated")
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        scale = min(1.0, (self.updates + 1) / warmup_updates) if warmup_updates else 1.0
        for group in self.optimizer.param_groups:
            group["lr"] = lr * scale
        self.model.train()
        if loss is not None:
            loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        return float(norm)

    def clone(self, name: str, trainable: bool = True) -> Policy:
        """An independent copy with fresh optimiser state, metered under `name`."""
        # Rebuilt from config, not deep-copied: a deep copy would carry this model's meter hooks.
        model = type(self.model)(copy.deepcopy(self.model.config))
        model.load_state_dict(self.model.state_dict())
        model.to(device=self.device, dtype=next(self.model.parameters()).dtype)
        return Policy(name=name, model=model, tokenizer=self.tokenizer, ledger=self.ledger, trainable=trainable,
                      chat=self.chat)

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict() if self.optimizer is not None else None,
            "updates": self.updates,
            "trainable": self.trainable,
            "extra": self.extra,
        }

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.updates = state["updates"]
        self.extra = state.get("extra", {})
        if state["optimizer"] is not None:
            self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, weight_decay=0.0)
            self.optimizer.load_state_dict(state["optimizer"])
