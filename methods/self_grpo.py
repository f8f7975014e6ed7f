"""`self-grpo`: GRPO through the domains one after another, then OPD from the student's own checkpoints.

Follows the self-teacher setting of arXiv:2611.08453 (finding 4): one student is trained with GRPO
on each domain in turn (`stage:<domain>` phases); its frozen checkpoint at the end of a domain's
stage becomes that domain's teacher (`self:<domain>`); a final multi-teacher on-policy distillation
(`distill`, `methods.distill`) from those self-teachers recovers what later stages made it forget.
Every stage and the distillation are counted.

Departures from the paper:
- each stage gets a fixed share of the budget (`stage_fraction`, split evenly across domains)
  rather than training to convergence;
- stages run in the suite's domain order (`order` overrides it);
- distillation stops on the convergence rule of `methods.distill` (reverse KL, or the student's
  sample accuracy at each self-teacher's end-of-stage accuracy), else at the budget.

Config: `stage.*` is each stage's GRPO step, `distill.*` the distillation and its stopping rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.api import ConfigError, Policy, RunContext
from methods.distill import DistillConfig, distill
from methods.grpo import GRPOStepConfig, grpo_phase


@dataclass(frozen=True)
class SelfGRPOConfig:
    """`stage`: each stage's GRPO step; `distill`: the distillation from the self-teachers and its rule."""

    stage: GRPOStepConfig = field(default_factory=GRPOStepConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    stage_fraction: float = 0.9  # share of the budget for all stages together, split evenly by domain
    order: tuple[str, ...] = ()  # stage order (default: the suite's domains in order)

    def __post_init__(self) -> None:
        if not 0 < self.stage_fraction < 1:
            raise ValueError(f"stage_fraction must be in (0, 1), got {self.stage_fraction!r}")
        if len(set(self.order)) != len(self.order):
            raise ValueError(f"order repeats a domain: {self.order!r}")


def stage_order(ctx: RunContext, order: tuple[str, ...]) -> list[str]:
    """The stages' domains: `order` if given (every suite domain exactly once), else the suite's order."""
    if not order:
        return list(ctx.domains)
    if sorted(order) != sorted(ctx.domains):
        raise ConfigError(f"order {','.join(order)} must list each of the suite's domains once: "
                          f"{','.join(ctx.domains)}")
    return list(order)


class SelfGRPO:
    """Sequential per-domain GRPO on one student, then OPD from its end-of-stage checkpoints."""

    name = "self-grpo"
    Config = SelfGRPOConfig

    def __init__(self, config: SelfGRPOConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        domains = stage_order(ctx, self.config.order)
        per_stage = self.config.stage_fraction * ctx.budget_flops / len(domains)
        teachers: dict[str, Policy] = {}
        rewards: dict[str, float] = {}
        for domain in domains:
            reward = grpo_phase(ctx, ctx.student, f"stage:{domain}", [domain], per_stage, self.config.stage)
            if ctx.should_stop():
                return
            teachers[domain] = ctx.snapshot(ctx.student, f"self:{domain}")
            if reward is not None:
                rewards[domain] = reward
        with ctx.phase("distill"):
            distill(ctx, ctx.student, teachers, ctx.sampler("distill"), self.config.distill,
                    teacher_rewards=rewards if len(rewards) == len(teachers) else None)
