"""RLOO: REINFORCE with a leave-one-out baseline, as a third-party OPD-Bench method.

Follows Ahmadian et al. (2024), "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs", arXiv:2402.14740 (after Kool et al., 2019, "Buy 4 REINFORCE Samples,
Get a Baseline for Free"). Each prompt gets k samples; sample i's advantage is its reward minus the
mean reward of the other k - 1 samples of its prompt, and the whole completion is one action: the
loss is the advantage times the summed token log-probs, with no ratio clipping and no value model.

Departures from the paper:
- verifiable 0/1 rewards from the suite's verifiers instead of a learned reward model;
- no KL penalty by default (`kl_coef=0`); when set, the KL to a frozen copy of the starting
  student is a k3 loss term (`RunContext.pg_step`'s `ref`), not a per-sequence reward penalty;
- the summed log-probs are divided by a constant, batch x `max_new_tokens` (`loss_type="dr_grpo"`),
  which rescales the learning rate and leaves the sequence-level estimator unchanged;
- a linear learning-rate warm-up (a fresh AdamW on a converged warm-up model can collapse it).

This file imports nothing from OPD-Bench but `bench.api`: a plugin needs no other part of it.
It also loads as `bench run --method path/to/rloo.py:RLOO`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.api import LOSS_TYPES, RunContext


@dataclass(frozen=True)
class RLOOConfig:
    """RLOO settings; `bench run --set key=value` overrides are checked against these fields."""

    prompts_per_step: int = 32
    samples: int = 4  # k completions per prompt (the paper uses 2 and 4)
    lr: float = 2e-3
    temperature: float = 1.0
    warmup_updates: int = 5
    kl_coef: float = 0.0
    loss_type: str = "dr_grpo"  # dr_grpo: sequence-level REINFORCE; grpo / dapo: per-token means
    domains: tuple[str, ...] = ()  # train on these domains of the suite (empty: all)

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1:
            raise ValueError(f"prompts_per_step must be >= 1, got {self.prompts_per_step}")
        if self.samples < 2:
            raise ValueError(f"samples must be >= 2 (the leave-one-out baseline needs others), got {self.samples}")
        if not self.lr > 0 or not self.temperature > 0:
            raise ValueError("lr and temperature must be > 0")
        if self.warmup_updates < 0 or not self.kl_coef >= 0:
            raise ValueError("warmup_updates and kl_coef must be >= 0")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")


def leave_one_out_advantages(rewards: torch.Tensor, k: int) -> torch.Tensor:
    """Reward minus the mean reward of the other k - 1 samples of the same prompt.

    rewards [G * k], grouped consecutively (row i*k + j is sample j of prompt i) -> [G * k].
    """
    if k < 2 or rewards.numel() % k:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of k={k} >= 2")
    grouped = rewards.float().view(-1, k)  # [G, k]
    others = (grouped.sum(dim=1, keepdim=True) - grouped) / (k - 1)  # [G, k]
    return (grouped - others).view(-1)


class RLOO:
    """REINFORCE leave-one-out on every domain of the suite (or `domains`)."""

    name = "rloo"
    Config = RLOOConfig

    def __init__(self, config: RLOOConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        cfg = self.config
        unknown = sorted(set(cfg.domains) - set(ctx.domains))
        if unknown:
            raise ValueError(f"domains {unknown} are not in the suite; its domains: {', '.join(ctx.domains)}")
        sampler = ctx.sampler("train", list(cfg.domains) or None)
        # A frozen copy of the starting student; made (and checkpointed) only when the KL term is on.
        ref = ctx.snapshot(ctx.student, "reference") if cfg.kl_coef else None
        with ctx.phase("train"):
            while not ctx.should_stop():
                batch = ctx.rollout(ctx.student, sampler.next(cfg.prompts_per_step), n=cfg.samples,
                                    temperature=cfg.temperature)
                advantages = leave_one_out_advantages(batch.rewards, cfg.samples)  # [B]
                stats = ctx.pg_step(ctx.student, batch, advantages, lr=cfg.lr, loss_type=cfg.loss_type,
                                    ref=ref, kl_coef=cfg.kl_coef, warmup_updates=cfg.warmup_updates)
                ctx.step_done(reward=float(batch.rewards.mean()), **stats)
