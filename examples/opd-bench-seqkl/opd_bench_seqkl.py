"""SeqKL: on-policy distillation with a sequence-level reverse-KL reward, as a third-party OPD-Bench method.

Follows MiniLLM (Gu et al., 2024, "MiniLLM: Knowledge Distillation of Large Language Models",
arXiv:2306.08543) in its single-step policy-gradient form: the student samples k completions per
prompt, the teacher scores them, and a completion's reward is its log-likelihood under the teacher
minus under the student, per token (a one-sample estimate of -KL(student || teacher) on that
sequence). The whole completion moves by its reward minus its prompt's group mean. Token-level OPD
(opd-multi's distillation) gives every token its own advantage; here every token of a completion
shares one.

Departures from the paper:
- one gradient step per batch of fresh samples (so no importance ratio and no clipping), and no
  mixing of teacher tokens into the student's samples;
- the reward is the mean per-token log-ratio (length-normalised), the baseline the group mean;
- the verifier's reward is reported, never trained on.

The loss is this file's own, handed to `ctx.update` one length bucket at a time: bucketing, the cap
on logits per micro-batch, the FLOP ledger and the update's wall clock are the engine's. The file
imports nothing from OPD-Bench but `bench.api`, and is the whole plugin with its `pyproject.toml`:

    pip install -e examples/opd-bench-seqkl && bench check-adapter seqkl
    bench run --method examples/opd-bench-seqkl/opd_bench_seqkl.py:SeqKL --set samples=8   # without installing
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.api import Bucket, RunContext, group_advantages, masked_mean


@dataclass(frozen=True)
class SeqKLConfig:
    """SeqKL settings; `bench run --set key=value` overrides are checked against these fields."""

    prompts_per_step: int = 16
    samples: int = 4  # k completions per prompt: the group whose mean reward is the baseline
    lr: float = 5e-4
    temperature: float = 1.0
    warmup_updates: int = 0
    teacher: str = "external"  # a teacher prepared outside the run (`ctx.teacher(name)`)

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples < 2:
            raise ValueError("prompts_per_step must be >= 1 and samples >= 2 (the baseline needs a group)")
        if not self.lr > 0 or not self.temperature > 0 or self.warmup_updates < 0:
            raise ValueError("lr and temperature must be > 0, warmup_updates >= 0")
        if not self.teacher:
            raise ValueError("teacher must name a prepared teacher, e.g. 'external'")


def sequence_rewards(teacher_lp: torch.Tensor, student_lp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean per-token log p_teacher - log p_student over each completion: [B, T] x 3 -> [B]."""
    return masked_mean(teacher_lp - student_lp, mask, dim=1)


def sequence_loss(bucket: Bucket, advantages: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE on whole completions: -(advantage x mean log-prob of the completion), mean over rows."""
    adv = bucket.take(advantages)  # [b]
    per_sequence = masked_mean(bucket.logprobs, bucket.mask, dim=1)  # [b]
    return -(adv * per_sequence).mean(), {}


class SeqKL:
    """Sequence-level reverse-KL distillation of the student from one teacher, on every domain."""

    name = "seqkl"
    Config = SeqKLConfig

    def __init__(self, config: SeqKLConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        cfg = self.config
        teacher = ctx.teacher(cfg.teacher)
        if teacher.vocab() != ctx.student.vocab():
            raise ValueError(f"teacher {teacher.name!r} has another vocabulary: log-ratios need the same tokens")
        sampler = ctx.sampler("distill")
        with ctx.phase("distill"):
            while not ctx.should_stop():
                batch = ctx.rollout(ctx.student, sampler.next(cfg.prompts_per_step), n=cfg.samples,
                                    temperature=cfg.temperature)
                teacher_lp = ctx.score(teacher, batch)  # [B, T]
                student_lp = batch.logprobs if batch.logprobs is not None else ctx.score(ctx.student, batch)
                rewards = sequence_rewards(teacher_lp, student_lp, batch.completion_mask)  # [B]
                advantages = group_advantages(rewards, cfg.samples, scale=False)  # [B]
                stats = ctx.update(ctx.student, batch, lambda bucket: sequence_loss(bucket, advantages),
                                   lr=cfg.lr, warmup_updates=cfg.warmup_updates)
                ctx.step_done(reward=float(batch.rewards.mean()), seq_reverse_kl=float(-rewards.mean()), **stats)
