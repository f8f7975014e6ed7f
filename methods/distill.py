"""On-policy distillation (OPD) mechanics shared by `opd-multi`, `opd-external`, `self-grpo` and `recover`.

The student samples its own completions; each prompt's teacher scores them; the per-token advantage
log p_teacher(x_t) - log p_student(x_t) is maximised with the same policy-gradient update GRPO uses,
which minimises the reverse KL(student || teacher) one sampled token at a time (Agarwal et al., 2024,
"On-Policy Distillation of Language Models", arXiv:2306.13649; Thinking Machines' "On-Policy
Distillation" blog, 2025; the multi-teacher form of arXiv:2611.08453).

Departures, common to every method built on this file:
- the student's log-probs are the rollout engine's sampling log-probs (no second student forward
  pass; identical up to float error because the update follows the rollout with one epoch);
- the teacher is chosen per prompt by the prompt's domain; rows of one teacher are scored together,
  trimmed to their own padded width;
- distillation stops when it has converged (see `distill`), not after a fixed number of steps;
- the loss is normalised as GRPO's by default (`loss_type="grpo"`: each completion's mean over its
  tokens, then the mean over completions), so a token of a short completion weighs more than one
  of a long completion, where tinker-cookbook sums over tokens; `distill.loss_type=dapo` weighs
  every token of the batch alike (the learning rates here were chosen with the default);
- at a `temperature` other than 1 (default 1) the advantage's log-probs are still the untempered
  models' (`bench.rollout.base.RolloutBatch`), so the student's samples come from another distribution
  than the one the reverse KL is estimated for.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace

import torch

from bench.api import (
    LOSS_TYPES,
    ConfigError,
    Policy,
    Rollouts,
    RunContext,
    Sampler,
    distillation_advantages,
    reverse_kl_estimate,
)

@dataclass(frozen=True)
class DistillStepConfig:
    """The settings of one distillation step; OPD-based methods nest it as `distill` (`distill.lr`)."""

    prompts_per_step: int = 32
    samples: int = 4  # completions per prompt
    # GRPO's rate: at 2e-3 opd-multi's student oscillated on math_code (67% -> 35% -> 66% held-out) and
    # never met its stopping rule; at 5e-4 it converged at 86% in a tenth of the FLOPs.
    lr: float = 5e-4
    loss_type: str = "grpo"  # normalisation of the per-token loss, as in GRPO (`LOSS_TYPES`)
    temperature: float = 1.0
    warmup_updates: int = 0

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples < 1:
            raise ValueError("prompts_per_step and samples must be >= 1")
        if self.loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {self.loss_type!r}")
        if not self.lr > 0 or not self.temperature > 0 or self.warmup_updates < 0:
            raise ValueError("lr and temperature must be > 0, warmup_updates >= 0")


@dataclass(frozen=True)
class DistillConfig(DistillStepConfig):
    """Distillation steps plus the rule that says when distillation has converged."""

    # Converged when the per-token reverse KL stays below `kl_threshold` (nats) for `patience` steps...
    # (0.05: a guess, not yet calibrated; on the tiny profile a batch's estimate scatters by ~0.1-0.3
    # around its trend, so a much smaller threshold would in practice never fire.)
    kl_threshold: float = 0.05
    patience: int = 3
    # ...or, where the teachers' sample accuracy is known, when the student's sample accuracy on every
    # domain (pooled over the last `patience` steps) is within `reward_tolerance` of its teacher's.
    reward_tolerance: float = 0.0
    use_reward_rule: bool = True
    # A fixed schedule instead (the paper's protocol): exactly this many steps, no convergence rule
    # (0: use the rule). The budget still ends distillation first if it runs out.
    steps: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.kl_threshold >= 0 or self.patience < 1 or not 0 <= self.reward_tolerance <= 1:
            raise ValueError("kl_threshold must be >= 0, patience >= 1 and reward_tolerance in [0, 1]")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps!r}")


def subset(rollouts: Rollouts, problem_indices: list[int]) -> Rollouts:
    """The rows of the given problems (whole groups), trimmed to their own padded width."""
    n = rollouts.n
    rows = torch.tensor([i * n + j for i in problem_indices for j in range(n)], dtype=torch.long)
    width = int(rollouts.attention_mask[rows].sum(1).max()) if len(rows) else 0

    def cut(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t[rows, :width]  # [b, t]

    return replace(
        rollouts,
        problems=[rollouts.problems[i] for i in problem_indices],
        input_ids=cut(rollouts.input_ids),
        attention_mask=cut(rollouts.attention_mask),
        completion_mask=cut(rollouts.completion_mask),
        completions=[rollouts.completions[int(r)] for r in rows],
        rewards=rollouts.rewards[rows],
        lengths=rollouts.lengths[rows],
        logprobs=cut(rollouts.logprobs),
    )


def teacher_logprobs(ctx: RunContext, teachers: Mapping[str, Policy], rollouts: Rollouts) -> torch.Tensor:
    """Per-token log-probs [B, T] of the rollouts, each row under its domain's teacher (kind `score`).

    Rows that share a teacher are scored in one pass, so a single teacher for every domain costs
    exactly one forward over the batch.
    """
    missing = sorted({p.domain for p in rollouts.problems} - set(teachers))
    if missing:
        raise KeyError(f"no teacher for domain(s) {', '.join(missing)}; teachers: {', '.join(sorted(teachers))}")
    by_teacher: dict[str, list[int]] = {}
    for i, problem in enumerate(rollouts.problems):
        by_teacher.setdefault(teachers[problem.domain].name, []).append(i)
    named = {t.name: t for t in teachers.values()}
    out = torch.zeros(rollouts.input_ids.shape)  # [B, T]
    n = rollouts.n
    for name, indices in by_teacher.items():
        part = rollouts if len(indices) == len(rollouts.problems) else subset(rollouts, indices)
        logprobs = ctx.score(named[name], part)  # [b, t]
        rows = torch.tensor([i * n + j for i in indices for j in range(n)], dtype=torch.long)
        out[rows, : logprobs.shape[1]] = logprobs.float()
    return out


def student_logprobs(ctx: RunContext, student: Policy, rollouts: Rollouts) -> torch.Tensor:
    """The student's per-token log-probs [B, T]: the rollout's own, or (engine without them) a scored pass."""
    if rollouts.logprobs is not None:
        return rollouts.logprobs
    return ctx.score(student, rollouts).float()


def distill_step(
    ctx: RunContext, student: Policy, teachers: Mapping[str, Policy], sampler: Sampler, config: DistillStepConfig
) -> dict[str, float]:
    """One OPD step: student samples, teachers score, one policy-gradient update on the per-token advantage.

    Returns stats: `reverse_kl` (per token, nats, before the update), `reward` (the student's sample
    accuracy) and, for each domain in the batch, `hits:<domain>` / `count:<domain>` (correct samples,
    samples).
    """
    batch = ctx.rollout(student, sampler.next(config.prompts_per_step), n=config.samples,
                        temperature=config.temperature)
    teacher_lp = teacher_logprobs(ctx, teachers, batch)  # [B, T]
    student_lp = student_logprobs(ctx, student, batch)  # [B, T]
    mask = batch.completion_mask
    advantages = distillation_advantages(teacher_lp, student_lp) * mask  # [B, T]
    stats = ctx.pg_step(student, batch, advantages, lr=config.lr, loss_type=config.loss_type,
                        warmup_updates=config.warmup_updates)
    stats["reverse_kl"] = reverse_kl_estimate(teacher_lp, student_lp, mask)
    stats["reward"] = float(batch.rewards.mean())
    stats["mean_length"] = float(batch.lengths.mean())
    stats["completion_share"] = float(mask.sum() / batch.attention_mask.sum())
    stats.update(signal_spread(teacher_lp, student_lp, mask))
    for domain in sorted({p.domain for p in batch.problems}):
        rows = torch.tensor([d == domain for d in batch.domains()])
        stats[f"hits:{domain}"] = float(batch.rewards[rows].sum())
        stats[f"count:{domain}"] = float(rows.sum())
    return stats


def signal_spread(teacher_lp: torch.Tensor, student_lp: torch.Tensor, mask: torch.Tensor,
                  threshold: float = 0.5) -> dict[str, float]:
    """How many tokens carry the teacher's signal, and whether one position carries most of it.

    Args:
        teacher_lp, student_lp: [B, T] per-token log-probs of the sampled tokens; mask: [B, T] completion.
    Returns:
        informative_tokens: mean number per sample of completion tokens with
            |log p_teacher - log p_student| > `threshold` nats;
        max_position_share: the largest share of the batch's total |log-ratio| that falls on one
            completion position (counted from each completion's first token).
    """
    gap = (teacher_lp - student_lp).abs() * mask  # [B, T]
    informative = float(((gap > threshold) & mask.bool()).sum(1).float().mean())
    start = mask.float().argmax(1)  # [B] first completion column of each row
    position = torch.arange(mask.shape[1]).unsqueeze(0) - start.unsqueeze(1)  # [B, T]
    per_position = torch.zeros(mask.shape[1]).index_add_(0, position.clamp(min=0).flatten(), gap.flatten())
    total = float(gap.sum())
    share = float(per_position.max()) / total if total else 0.0
    return {"informative_tokens": informative, "max_position_share": share}


def check_tokenizers(student: Policy, teachers: Mapping[str, Policy]) -> None:
    """Token-level distillation needs one vocabulary: refuse a teacher whose tokenizer differs."""

    def digest(policy: Policy) -> str:
        vocab = sorted(policy.vocab().items())
        return hashlib.sha256(repr(vocab).encode()).hexdigest()

    mine = digest(student)
    for teacher in {t.name: t for t in teachers.values()}.values():
        if digest(teacher) != mine:
            raise ConfigError(f"teacher {teacher.name!r} has a different tokenizer from the student {student.name!r}; "
                              "on-policy distillation compares log-probs token by token and needs the same vocabulary")


def _converged(progress: dict, config: DistillConfig, teacher_rewards: Mapping[str, float] | None) -> str | None:
    """Why distillation has converged or ended (`steps`, `kl` or `reward`), or None."""
    if config.steps:
        return "steps" if progress["steps"] >= config.steps else None
    if progress["low_kl_steps"] >= config.patience:
        return "kl"
    window = progress["window"]
    if not (config.use_reward_rule and teacher_rewards) or len(window) < config.patience:
        return None
    for domain, target in teacher_rewards.items():
        hits = sum(step.get(domain, [0.0, 0.0])[0] for step in window)
        count = sum(step.get(domain, [0.0, 0.0])[1] for step in window)
        if not count or hits / count < target - config.reward_tolerance:
            return None
    return "reward"


def distill(
    ctx: RunContext,
    student: Policy,
    teachers: Mapping[str, Policy],
    sampler: Sampler,
    config: DistillConfig,
    *,
    teacher_rewards: Mapping[str, float] | None = None,
    key: str = "distill",
) -> str:
    """Distil until converged or the budget is spent; returns why it stopped (`steps`, `kl`, `reward`,
    `budget`). The FLOPs distillation had spent when it stopped are reported as `<key>_stop_flops`.

    `teacher_rewards` (domain -> the teacher's sample accuracy, e.g. its last GRPO rewards) turns on
    the accuracy rule. Progress lives in `ctx.state[key]`, so a resumed run stops where it would have.
    """
    check_tokenizers(student, teachers)
    progress = ctx.state.setdefault(key, {"steps": 0, "low_kl_steps": 0, "window": [], "stopped": None})
    while progress["stopped"] is None:
        if ctx.should_stop():
            return "budget"
        stats = distill_step(ctx, student, teachers, sampler, config)
        progress["steps"] += 1
        progress["low_kl_steps"] = progress["low_kl_steps"] + 1 if stats["reverse_kl"] < config.kl_threshold else 0
        step = {d: [stats[f"hits:{d}"], stats[f"count:{d}"]] for d in teachers if f"count:{d}" in stats}
        progress["window"] = (progress["window"] + [step])[-config.patience :]
        progress["stopped"] = _converged(progress, config, teacher_rewards)
        if progress["stopped"] is not None:
            ctx.report(f"{key}_stop_flops", ctx.phase_flops(key))
        # The state is final before step_done, which may checkpoint it.
        ctx.step_done(**{k: v for k, v in stats.items() if ":" not in k})
    return progress["stopped"]
