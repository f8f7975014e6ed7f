"""GRPO with verifiable 0/1 rewards: `grpo` (one domain) and `grpo-joint` (every domain of the suite).

Follows DeepSeekMath (Shao et al., 2024, arXiv:2402.03300) with TRL's loss normalisations.
Departures from the paper:
- no KL penalty to a reference, as in Dr. GRPO and DAPO (the step has no setting for one; a method
  of its own can pass `ref` and `kl_coef` to `RunContext.pg_step`);
- one gradient step per batch by default (`epochs=1`), so the clipped ratio is 1 and the loss is
  REINFORCE with group-mean baselines; `epochs>1` turns clipping on;
- the ratio's old policy is the trainer's own forward in the step's first epoch, not the rollout
  engine's sampling log-probs: nothing corrects a mismatch between the two (TRL weighs vLLM's
  samples by a capped importance ratio). The torch engine and the trainer agree to float error on
  the CPU; for `--rollout vllm` in bf16 on a GPU the gap is unmeasured;
- log-probs are the untempered model's (`temperature` only changes how the rollouts are sampled;
  TRL divides the logits by it before the loss): with the default `temperature=1` the two agree;
- a linear learning-rate warm-up (a fresh AdamW on a converged warm-up model can collapse it);
- advantages are scaled by the group's population std (`std="population"`, divide by n), where TRL
  uses the sample std (divide by n - 1): ours are sqrt(n / (n - 1)) larger, 1.069x at 8 samples.
  `--set std=sample` matches TRL; the default keeps the published records comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.api import GROUP_STDS, LOSS_TYPES, ConfigError, Policy, RunContext, Sampler, group_advantages


@dataclass(frozen=True)
class GRPOStepConfig:
    """The settings of one GRPO step; GRPO-based methods nest it (`expert.lr`, `stage.lr`, `grpo.lr`)."""

    prompts_per_step: int = 32
    group_size: int = 8
    lr: float = 5e-4  # 2e-3 collapsed the direct world's warm-up base (greedy 21% -> 4% in 30 steps)
    loss_type: str = "grpo"  # the normalisation: one of LOSS_TYPES
    epochs: int = 1
    clip_eps: float = 0.2
    temperature: float = 1.0
    warmup_updates: int = 5
    std: str = "population"  # the group std that scales advantages: population (n) or sample (n - 1, TRL)

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.group_size < 2:
            raise ValueError("prompts_per_step must be >= 1 and group_size >= 2")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        if self.std not in GROUP_STDS:
            raise ValueError(f"std must be one of {', '.join(GROUP_STDS)}, got {self.std!r}")
        if not self.lr > 0 or self.epochs < 1 or not self.temperature > 0 or self.warmup_updates < 0:
            raise ValueError("lr and temperature must be > 0, epochs >= 1 and warmup_updates >= 0")
        if not self.clip_eps > 0:  # the ratio is clipped to [1 - clip_eps, 1 + clip_eps]
            raise ValueError(f"clip_eps must be > 0, got {self.clip_eps!r}")


@dataclass(frozen=True)
class GRPOConfig(GRPOStepConfig):
    """`grpo` and `grpo-joint`: the step's settings, flat (`--set lr=1e-3`), and the domain."""

    domain: str = ""  # `grpo` only: the domain to train on (default: the suite's first)


def grpo_step(ctx: RunContext, policy: Policy, sampler: Sampler, config: GRPOStepConfig) -> dict[str, float]:
    """Sample groups, score them, one policy-gradient update; shared by every GRPO-based method."""
    batch = ctx.rollout(policy, sampler.next(config.prompts_per_step), n=config.group_size,
                        temperature=config.temperature)
    advantages = group_advantages(batch.rewards, config.group_size, scale=config.loss_type != "dr_grpo",
                                  std=config.std)
    stats = ctx.pg_step(policy, batch, advantages, lr=config.lr, loss_type=config.loss_type,
                        epochs=config.epochs, clip_eps=config.clip_eps, warmup_updates=config.warmup_updates)
    groups = batch.rewards.view(-1, config.group_size)  # [prompts, group]
    stats["reward"] = float(batch.rewards.mean())
    # groups whose samples all scored alike carry no gradient: the share GRPO wastes
    stats["zero_adv_share"] = float((groups.amax(1) == groups.amin(1)).float().mean())
    stats["mean_length"] = float(batch.lengths.mean())
    stats["completion_share"] = float(batch.completion_mask.sum() / batch.attention_mask.sum())
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
            raise ConfigError(f"domain {domain!r} is not in the suite; its domains: {', '.join(ctx.domains)}")
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
    stop: str = "reward",
    eval_every: int = 5,
    eval_size: int = 200,
) -> float | None:
    """GRPO on `domains` under ledger phase `phase` until it has spent `phase_flops` (or the budget ends).

    Used for opd-multi's experts and self-grpo's stages. With `patience`, the phase also ends once it
    has converged, judged by `stop`:
    - `reward`: its mean sample reward over `window` steps has not beaten its best by `min_gain` for
      `patience` steps in a row (free: the rewards are the rollouts' own);
    - `validation`: its greedy accuracy on `eval_size` validation prompts per domain (checked every
      `eval_every` steps and once before the first; counted in the phase, since the checks decide
      when it stops) has not beaten its best by one binomial standard error for `patience` checks
      in a row (the paper's protocol: experts stopped on a held-out plateau).
    The loop, its best point and the count live in the run's state (`grpo_plateau[phase]`, with
    `tail_flops`: the phase's FLOPs after its best point), so a resumed run continues where it
    stopped. Returns the policy's mean sample reward over its last `window` steps (the teacher's
    accuracy for distillation's stopping rule), None if it never ran.
    """
    if stop not in ("reward", "validation"):
        raise ValueError(f"stop must be 'reward' or 'validation', got {stop!r}")
    sampler = ctx.sampler(phase, domains)
    rewards = ctx.state.setdefault("grpo_rewards", {}).setdefault(phase, [])
    plateau = ctx.state.setdefault("grpo_plateau", {}).setdefault(
        phase, {"best": -1.0, "since": 0, "steps": 0, "best_flops": 0.0, "tail_flops": 0.0})
    with ctx.phase(phase):
        # the starting point, unless the budget or the phase's share is spent: the check is counted work
        if (stop == "validation" and patience and plateau["steps"] == 0 and plateau["best"] < 0
                and ctx.phase_flops(phase) < phase_flops and not ctx.should_stop()):
            _check(ctx, policy, plateau, domains, eval_size, 0.0)
        while ctx.phase_flops(phase) < phase_flops and not ctx.should_stop():
            if patience and plateau["since"] >= patience:
                break
            stats = grpo_step(ctx, policy, sampler, config)
            plateau["steps"] += 1
            rewards.append(stats["reward"])
            del rewards[:-window]
            if stop == "reward":
                mean = sum(rewards) / len(rewards)
                _improve(plateau, mean, mean > plateau["best"] + min_gain, ctx.phase_flops(phase))
            elif patience and plateau["steps"] % eval_every == 0:
                _check(ctx, policy, plateau, domains, eval_size, ctx.phase_flops(phase))
            plateau["tail_flops"] = ctx.phase_flops(phase) - plateau["best_flops"]
            ctx.step_done(**stats)
    return sum(rewards) / len(rewards) if rewards else None


def _improve(plateau: dict, value: float, improved: bool, flops: float) -> None:
    if improved:
        plateau.update(best=value, since=0, best_flops=flops)
    else:
        plateau["since"] += 1


def _check(ctx: RunContext, policy: Policy, plateau: dict, domains: list[str], size: int, flops: float) -> None:
    """One validation check: improved when accuracy beats the best by one binomial standard error."""
    accuracy = float(ctx.evaluate(policy, split="validation", domains=domains, size=size)["accuracy"])
    best = max(plateau["best"], 0.0)
    n = size * len(domains)
    se = (best * (1 - best) / n) ** 0.5 if n else 0.0
    _improve(plateau, accuracy, accuracy > plateau["best"] + se, flops)
