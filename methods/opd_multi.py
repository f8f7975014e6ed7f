"""`opd-multi`: one GRPO expert per domain, then multi-teacher on-policy distillation into one student.

Follows "Unpacking the Compute Efficiency of Strong-to-Weak OPD against GRPO" (arXiv:2611.08453):
each domain's expert is the base trained with GRPO on that domain alone; the student (the base)
then samples prompts of every domain and is distilled on-policy, each prompt from its domain's
expert (per-token reverse-KL advantage, `methods.distill`). The experts' GRPO FLOPs count toward
the budget; the distillation share is distill FLOPs / expert FLOPs (docs/metrics.md).

Departures from the paper:
- the experts train in parallel, as in the paper, wherever the run's phase executor allows
  (`ctx.map_phases`, `bench.run.phases`): side by side in worker processes under `bench run` on a
  CPU (`--phase-executor processes`), as Ray tasks under `bench sweep --executor ray`; one after
  another under a local `bench sweep` (whose runs already fill the cores) or `--phase-executor
  sequential`. Each expert's FLOPs are booked under `expert:<domain>` either way; in parallel each
  expert samples from its own generator, so the numbers differ from the sequential run's in detail,
  not in kind;
- each expert trains until it has converged, at most a fixed share of the run's budget
  (`expert_fraction`, split evenly across domains). By default converged means its mean sample
  reward over 3 steps has not gained `expert_min_gain` for `expert_patience` steps;
  `expert_stop=validation` is the paper's protocol instead: greedy accuracy on a validation
  sample, checked every `expert_eval_every` steps (counted: the checks decide when it stops), has
  not improved by one standard error for `expert_patience` checks. The FLOPs each expert spent
  after its best point are reported (`expert_tail_flops`); with `score_experts=true`, each
  expert's accuracy on its own domain's held-out prompts once it is trained
  (`expert_heldout_accuracy:<domain>`; evaluation, never counted), which distillation's cost is read against (docs/metrics.md);
- distillation stops on a convergence rule (per-token reverse KL below `distill.kl_threshold` for
  `distill.patience` steps, or the student's sample accuracy at its experts' on every domain), else
  at the budget; `distill.steps=N` is the paper's fixed schedule instead;
- the GRPO and distillation details of `methods.grpo` and `methods.distill` apply.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from bench.api import Policy, RunContext
from methods.distill import DistillConfig, distill
from methods.grpo import GRPOStepConfig, grpo_phase


@dataclass(frozen=True)
class OPDMultiConfig:
    """`expert`: each expert's GRPO step (`--set expert.lr=...`); `distill`: the distillation and its
    stopping rule (`--set distill.patience=...`); the rest: the experts' budget share and stopping rule."""

    expert: GRPOStepConfig = field(default_factory=GRPOStepConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    expert_fraction: float = 0.9  # at most this share of the budget for all experts, split evenly by domain
    # An expert has converged once its mean sample reward over 3 steps has not beaten its best by
    # `expert_min_gain` for `expert_patience` steps (0: train each expert for its whole share). The
    # budget it leaves goes to distillation.
    expert_patience: int = 10
    expert_min_gain: float = 0.01
    expert_stop: str = "reward"  # reward | validation (the paper's protocol: a held-out-style plateau)
    expert_eval_every: int = 5  # expert_stop=validation: steps between checks...
    expert_eval_size: int = 200  # ...on this many validation prompts
    # score each trained expert on its own domain's held-out prompts (evaluation, never counted), for
    # distillation's cost against the experts' gain (docs/metrics.md, "Runs on different budgets")
    score_experts: bool = False

    def __post_init__(self) -> None:
        if not 0 < self.expert_fraction < 1:
            raise ValueError(f"expert_fraction must be in (0, 1), got {self.expert_fraction!r}")
        if self.expert_patience < 0 or not 0 <= self.expert_min_gain < 1:
            raise ValueError("expert_patience must be >= 0 and expert_min_gain in [0, 1)")
        if self.expert_stop not in ("reward", "validation"):
            raise ValueError(f"expert_stop must be reward or validation, got {self.expert_stop!r}")
        if self.expert_eval_every < 1 or self.expert_eval_size < 1:
            raise ValueError("expert_eval_every and expert_eval_size must be >= 1")


class OPDMulti:
    """Per-domain GRPO experts, then multi-teacher OPD of the experts into the base student."""

    name = "opd-multi"
    reads_heldout = ("score_experts: each trained expert's held-out accuracy on its domain, reported "
                     "(expert_heldout_accuracy) and never decided on")
    Config = OPDMultiConfig

    def __init__(self, config: OPDMultiConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        per_expert = self.config.expert_fraction * ctx.budget_flops / len(ctx.domains)
        train = functools.partial(_train_expert, phase_flops=per_expert, config=self.config)
        results = ctx.map_phases(train, ctx.domains)
        experts: dict[str, Policy] = {d: ctx.clone(ctx.student, f"expert:{d}") for d in ctx.domains}
        rewards = {d: r for d, r in results.items() if r is not None}
        plateaus = ctx.state.get("grpo_plateau", {})
        tails = {d: plateaus[f"expert:{d}"]["tail_flops"] for d in ctx.domains if f"expert:{d}" in plateaus}
        for domain, tail in tails.items():
            ctx.report(f"expert_tail_flops:{domain}", tail)
        ctx.report("expert_tail_flops", sum(tails.values()))
        if self.config.score_experts:
            _score_experts(ctx, experts)
        if ctx.should_stop():
            return
        with ctx.phase("distill"):
            distill(ctx, ctx.student, experts, ctx.sampler("distill"), self.config.distill,
                    teacher_rewards=rewards if len(rewards) == len(experts) else None)


def _score_experts(ctx: RunContext, experts: dict[str, Policy]) -> None:
    """Report each trained expert's greedy accuracy on its own domain's held-out prompts, the ones the
    student is scored on (`expert_heldout_accuracy:<domain>`), booked as evaluation: the experts' gain
    over the base is what distillation has to pass on. Once per run; a resumed run keeps the scores."""
    if ctx.heldout_size is None:
        return
    scores = ctx.state.setdefault("expert_heldout_accuracy", {})
    for domain, expert in experts.items():
        if domain not in scores:
            scores[domain] = float(ctx.evaluate(expert, split="heldout", domains=[domain],
                                                size=ctx.heldout_size)["accuracy"])
        ctx.report(f"expert_heldout_accuracy:{domain}", scores[domain])


def _train_expert(ctx: RunContext, domain: str, *, phase_flops: float, config: OPDMultiConfig) -> float | None:
    """GRPO on `domain` alone into the expert `expert:<domain>`; its mean recent reward (or None)."""
    # Cloned from the untouched base: the student does not train until distillation.
    expert = ctx.clone(ctx.student, f"expert:{domain}")
    return grpo_phase(ctx, expert, f"expert:{domain}", [domain], phase_flops, config.expert,
                      patience=config.expert_patience, min_gain=config.expert_min_gain, stop=config.expert_stop,
                      eval_every=config.expert_eval_every, eval_size=config.expert_eval_size)
