"""`opd-external`: on-policy distillation from an external, already post-trained teacher.

Follows the external-teacher arm of arXiv:2611.08453 (finding 3): the student samples prompts of
every domain and is distilled on-policy from one bigger teacher trained elsewhere (per-token
reverse-KL advantage, `methods.distill`). The teacher's own post-training is recorded as `external`
and not counted; every scoring pass it makes for this run is counted.

Departures from the paper:
- the teacher is the profile's prepared external model (`tiny`: a ~4x larger model trained on
  verbose worked solutions), not a released checkpoint;
- distillation stops when the per-token reverse KL stays below `distill.kl_threshold` for
  `distill.patience` steps, else at the budget; the accuracy rule is off because the teacher's accuracy is unknown
  without spending counted compute on it;
- the distillation details of `methods.distill` apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.api import RunContext
from methods.distill import DistillConfig, distill


@dataclass(frozen=True)
class OPDExternalConfig:
    """`distill`: the distillation and its stopping rule; `teacher`: which prepared teacher."""

    distill: DistillConfig = field(default_factory=DistillConfig)
    teacher: str = "external"  # a teacher prepared outside the run (`ctx.teacher(name)`)

    def __post_init__(self) -> None:
        if not self.teacher:
            raise ValueError("teacher must name a prepared teacher, e.g. 'external'")


class OPDExternal:
    """OPD of the base student from one external teacher, on every domain of the suite."""

    name = "opd-external"
    Config = OPDExternalConfig

    def __init__(self, config: OPDExternalConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        teacher = ctx.teacher(self.config.teacher)
        with ctx.phase("distill"):
            distill(ctx, ctx.student, {d: teacher for d in ctx.domains}, ctx.sampler("distill"),
                    self.config.distill)
