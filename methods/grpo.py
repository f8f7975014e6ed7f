"""GRPO with verifiable 0/1 rewards: `grpo` (one domain) and `grpo-joint` (every domain of the suite).

Follows DeepSeekMath (Shao et al., 2024, arXiv:2402.03300) with TRL's loss normalisations.
Departures from the paper:
- no KL penalty to a reference by default (`kl_coef=0`), as in Dr. GRPO and DAPO;
- one gradient step per batch by default (`epochs=1`), so the clipped ratio is 1 and the loss is
  REINFORCE with group-mean baselines; `epochs>1` turns clipping on;
- a linear learning-rate warm-up (a fresh AdamW on a converged warm-up model can collapse it).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.api import Policy, RunContext, Sampler, group_advantages


@dataclass(frozen=True)
class GRPOStepConfig:
    """The settings of one GRPO step; every GRPO-based method's config includes these fields."""

    prompts_per_step: int = 32
    group_size: int = 8
    lr: float = 5e-4  # 2e-3 collapses the warm-up base (greedy 21% -> 4% in 30 steps; issue #4)
    loss_type: str = "grpo"  # grpo | dr_grpo | dapo
    epochs: int = 1
    clip_eps: float = 0.2
    temperature: float = 1.0
    warmup_updates: int = 5

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.group_size < 2:
            raise ValueError("prompts_per_step must be >= 1 and group_size >= 2")
        if self.loss_type not in ("grpo", "dr_grpo", "dapo"):
            raise ValueError(f"loss_type must be grpo, dr_grpo or dapo, got {self.loss_type!r}")
        if not self.lr > 0 or self.epochs < 1 or not self.temperature > 0 or self.warmup_updates < 0:
            raise ValueError("lr and temperature must be > 0, epochs >= 1 and warmup_updates >= 0")


@dataclass(frozen=True)
class GRPOConfig(GRPOStepConfig):
    domain: str = ""  # `grpo` only: the domain to train on (default: the suite's first)


def grpo_step(ctx: RunContext, policy: Policy, sampler: Sampler, config: GRPOStepConfig) -> dict[str, float]:
    """Sample groups, score them, one policy-gradient update; shared by every GRPO-based method."""
    batch = ctx.rollout(policy, sampler.next(config.prompts_per_step), n=config.group_size,
                        temperature=config.temperature)
    advantages = group_advantages(batch.rewards, config.group_size, scale=config.loss_type != "dr_grpo")
    stats = ctx.pg_step(policy, batch, advantages, lr=config.lr, loss_type=config.loss_type,
                        epochs=config.epochs, clip_eps=config.clip_eps, warmup_updates=config.warmup_updates)
    stats["reward"] = float(batch.rewards.mean())
    return stats


class GRPOJoint:
    """GRPO on all domains of the suite at once (the reference method)."""

    name = "grpo-joint"
    Config = GRPOConfig

    def __init__(self, config: GRPOConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        sampler = ctx.sampler("train", self._domains(ctx))
        with ctx.phase("train"):
            while not ctx.should_stop():
                ctx.step_done(**grpo_step(ctx, ctx.student, sampler, self.config))

    def _domains(self, ctx: RunContext) -> list[str] | None:
        return None


class GRPO(GRPOJoint):
    """GRPO on a single domain of the suite (`domain=...`, default the first)."""

    name = "grpo"

    def _domains(self, ctx: RunContext) -> list[str]:
        domain = self.config.domain or ctx.domains[0]
        if domain not in ctx.domains:
            raise ValueError(f"domain {domain!r} is not in the suite; its domains: {', '.join(ctx.domains)}")
        return [domain]


def grpo_phase(
    ctx: RunContext,
    policy: Policy,
    phase: str,
    domains: list[str],
    phase_flops: float,
    config: GRPOStepConfig,
    *,
    window: int = 3,
    patience: int = 0,
    min_gain: float = 0.01,
) -> float | None:
    """GRPO on `domains` under ledger phase `phase` until it has spent `phase_flops` (or the budget ends).

    Used for opd-multi's experts and self-grpo's stages. With `patience`, the phase also ends once it
    has converged: its mean sample reward over `window` steps has not beaten its best by `min_gain` for
    `patience` steps in a row. The loop and that count live in the run's state, so a resumed run
    continues where it stopped. Returns the policy's mean sample reward over its last `window` steps
    (the teacher's accuracy for distillation's stopping rule), None if it never ran.
    """
    sampler = ctx.sampler(phase, domains)
    rewards = ctx.state.setdefault("grpo_rewards", {}).setdefault(phase, [])
    plateau = ctx.state.setdefault("grpo_plateau", {}).setdefault(phase, {"best": -1.0, "since": 0})
    with ctx.phase(phase):
        while ctx.phase_flops(phase) < phase_flops and not ctx.should_stop():
            if patience and plateau["since"] >= patience:
                break
            stats = grpo_step(ctx, policy, sampler, config)
            rewards.append(stats["reward"])
            del rewards[:-window]
            mean = sum(rewards) / len(rewards)
            if mean > plateau["best"] + min_gain:
                plateau.update(best=mean, since=0)
            else:
                plateau["since"] += 1
            ctx.step_done(**stats)
    return sum(rewards) / len(rewards) if rewards else None
