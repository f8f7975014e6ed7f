"""`sft`: the off-policy baseline, supervised training of the student on a teacher's samples.

Follows sequence-level knowledge distillation (Kim and Rush, 2016, arXiv:1606.07947) with the
rejection-sampling filter of rejection-sampling fine-tuning (Yuan et al., 2023, arXiv:2308.01825):
the teacher samples completions for training prompts (counted rollouts), the correct ones (or all,
`keep=all`) become targets, and the student takes a supervised step on them (counted update).

Departures:
- teacher samples are drawn fresh for every step, never stored and reused, so the ledger shows the
  true cost of the data (a reused data set would make later epochs look free);
- a truncated sample (no stop token within the rollout limit: EOS, or a chat turn's end) is never a
  target: the end that the supervised step appends would teach the student to stop mid-answer;
- a step whose batch has no kept sample makes no update (its sampling is still counted);
- `minibatches` > 1 splits one step's kept samples into that many supervised updates, in order. The
  teacher's samples do not depend on the student, so drawing several updates' worth at once changes
  no sample's distribution; it only lets the teacher decode more rows per forward (on one CPU thread,
  256 rows decode about 2x faster per token than 32). Each sample is still a target exactly once.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.api import Rollouts, RunContext

KEEP = ("correct", "all")


@dataclass(frozen=True)
class SFTConfig:
    prompts_per_step: int = 32
    samples_per_prompt: int = 1
    minibatches: int = 1  # supervised updates per step, each on an equal share of its kept samples
    temperature: float = 1.0
    keep: str = "correct"  # correct | all
    lr: float = 1e-3
    teacher: str = "external"  # a teacher prepared outside the run (`ctx.teacher(name)`)

    def __post_init__(self) -> None:
        if self.prompts_per_step < 1 or self.samples_per_prompt < 1 or self.minibatches < 1:
            raise ValueError("prompts_per_step, samples_per_prompt and minibatches must be >= 1")
        if not self.temperature > 0 or not self.lr > 0:
            raise ValueError("temperature and lr must be > 0")
        if self.keep not in KEEP:
            raise ValueError(f"keep must be one of {', '.join(KEEP)}, got {self.keep!r}")
        if not self.teacher:
            raise ValueError("teacher must name a prepared teacher, e.g. 'external'")


def ended_with_eos(batch: Rollouts, stop_ids: tuple[int, ...]) -> list[bool]:
    """Whether each row's completion ended with a stop token (rather than at the rollout's token limit)."""
    last = batch.attention_mask.sum(1) - 1  # [B] index of each row's last real token
    ended = torch.isin(batch.input_ids[torch.arange(batch.size), last], torch.tensor(stop_ids))  # [B]
    return [bool(x) and bool(n) for x, n in zip(ended, batch.completion_mask.sum(1))]


def split(items: list[int], parts: int) -> list[list[int]]:
    """`items` in `parts` consecutive runs whose lengths differ by at most one (the first ones longer)."""
    size, extra = divmod(len(items), parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]


class SFT:
    """Supervised fine-tuning of the base student on (filtered) teacher samples of every domain."""

    name = "sft"
    Config = SFTConfig

    def __init__(self, config: SFTConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        config = self.config
        teacher = ctx.teacher(config.teacher)
        sampler = ctx.sampler("train")
        with ctx.phase("train"):
            while not ctx.should_stop():
                batch = ctx.rollout(teacher, sampler.next(config.prompts_per_step), n=config.samples_per_prompt,
                                    temperature=config.temperature)
                rows = [p for p in batch.problems for _ in range(batch.n)]
                finished = ended_with_eos(batch, teacher.stop_ids)
                kept = [i for i in range(batch.size)
                        if finished[i] and (config.keep == "all" or batch.rewards[i] > 0)]
                stats = {"teacher_reward": float(batch.rewards.mean()), "kept": float(len(kept))}
                losses = [ctx.sft_step(ctx.student, [rows[i].prompt for i in part],
                                       [batch.completions[i] for i in part], lr=config.lr)
                          for part in split(kept, config.minibatches) if part]
                if losses:
                    stats["loss"] = sum(losses) / len(losses)
                ctx.step_done(**stats)
