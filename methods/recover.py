"""`recover`: the single-domain recovery protocol of finding 4 (self-teachers make recovery cheap).

Follows the recovery experiment of arXiv:2611.08453: a student learns a domain with GRPO
(`stage:<domain>`), its checkpoint then is frozen as a self-teacher (`self:<domain>`), and GRPO on
the suite's other domains (`stage:<other>`) makes it lose some of the first. From that same lost
state it then recovers the domain twice, each way metered in its own ledger phase:

- `recover:grpo`: GRPO on the domain again (on a clone of the lost student);
- `recover:opd`: on-policy distillation from its own earlier checkpoint (on the student itself,
  which is the run's deliverable).

Each stops as soon as the domain's greedy held-out accuracy reaches the target, checked every
`check_every` steps on `check_size` held-out prompts (at least 300, so that one check's binomial
error, under 3 points, is smaller than the gap it measures). The checks are the protocol's
measurement, not training: they are booked as evaluation (recorded, not counted), like the runner's
own milestones, so neither arm's FLOPs include them. The target is
lost + `target_fraction` x (self-teacher - lost) held-out accuracy, measured once,
or an absolute accuracy (`target`).
The result, `ctx.report("recovery", {domain, target, grpo_flops, opd_flops, check_size,
teacher_accuracy, lost_accuracy, checks})` (FLOPs None where not reached within the phase's cap;
`checks`: per arm, every check as [the arm's FLOPs so far, accuracy]), becomes the record's
`recovery` block; the self-teacher reduction is grpo_flops / opd_flops.

How the budget is placed (`protocol_flops`): the domain's stage, the other domains' stages together
and each arm's cap share it in the proportions stage_fraction/2 : forget_scale x stage_fraction/2 :
(1 - stage_fraction)/2 : (1 - stage_fraction)/2. At the default forget_scale of 1 the stages take
`stage_fraction` of the budget, half each, and each arm's cap is half of the rest; a larger
forget_scale makes the student forget for longer, and a budget raised in proportion keeps the
domain's stage and the caps where they were (forget_scale 3 at 3e13: 5e12, 1.5e13 and 5e12 each,
as at 1 and 2e13).

Departures from the paper:
- forgetting is induced by a fixed budget of GRPO on the other domains, not by a longer curriculum;
- each recovery is capped at a fixed share of the budget;
- the target is relative to the self-teacher's accuracy, since tiny models forget little in absolute terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from bench.api import ConfigError, Policy, RunContext
from methods.distill import DistillStepConfig, distill_step
from methods.grpo import GRPOStepConfig, grpo_phase, grpo_step


@dataclass(frozen=True)
class RecoverConfig:
    """`grpo`: the GRPO step of the stages and of the GRPO recovery (at `grpo_arm_lr` where set);
    `distill`: the OPD recovery's step."""

    grpo: GRPOStepConfig = field(default_factory=GRPOStepConfig)
    distill: DistillStepConfig = field(default_factory=DistillStepConfig)
    grpo_arm_lr: float = 0.0  # the GRPO recovery's rate (0: the stages' `grpo.lr`)
    domain: str = ""  # the domain to lose and recover (default: the suite's first)
    stage_fraction: float = 0.5  # budget share of both stages together (learn it, then the others)...
    forget_scale: float = 1.0  # ...where the others' stages cost this many times the domain's stage
    target_fraction: float = 0.9  # target = lost + target_fraction x (teacher - lost)...
    target: float = 0.0  # ...unless this absolute held-out accuracy is set (> 0)
    check_every: int = 1  # training steps between held-out checks
    check_size: int = 300  # held-out prompts per check

    def __post_init__(self) -> None:
        if not 0 < self.stage_fraction < 1 or not 0 < self.target_fraction <= 1 or not 0 <= self.target <= 1:
            raise ValueError("stage_fraction must be in (0, 1), target_fraction in (0, 1] and target in [0, 1]")
        if self.check_every < 1 or self.check_size < 1:
            raise ValueError("check_every and check_size must be >= 1")
        if not 0 <= self.grpo_arm_lr < float("inf"):
            raise ValueError("grpo_arm_lr must be >= 0 (0: the stages' rate)")
        if not 0 < self.forget_scale < float("inf"):
            raise ValueError(f"forget_scale must be a positive number, got {self.forget_scale!r}")


def protocol_flops(config: RecoverConfig, budget_flops: float) -> tuple[float, float, float]:
    """Where the protocol places `budget_flops`: (the domain's stage, the other domains' stages
    together, each arm's cap), in the proportions of the module's docstring."""
    total = 1 + (config.forget_scale - 1) * config.stage_fraction / 2
    stages = config.stage_fraction * budget_flops / total
    return stages / 2, config.forget_scale * (stages / 2), (1 - config.stage_fraction) / 2 * budget_flops / total


def heldout_accuracy(ctx: RunContext, policy: Policy, domain: str, size: int) -> float:
    """Greedy pass@1 on the domain's first `size` held-out prompts (booked as evaluation)."""
    return float(ctx.evaluate(policy, split="heldout", domains=[domain], size=size)["accuracy"])


def recover_until(
    ctx: RunContext, phase: str, policy: Policy, step: Callable[[], dict], target: float, cap_flops: float,
    config: RecoverConfig, domain: str,
) -> float | None:
    """Run `step` under `phase` until `policy` reaches `target` on `domain`: the phase's FLOPs then, or None.

    None when the phase spends `cap_flops` (or the run its budget) first. Progress lives in
    `ctx.state[phase]`, so a resumed run repeats exactly what the killed one would have done.
    """
    progress = ctx.state.setdefault(phase, {"steps": 0, "done": False, "flops": None, "accuracy": None})
    progress.setdefault("checks", [])  # a checkpoint from before checks were kept resumes with those to come
    with ctx.phase(phase):
        while not progress["done"]:
            if progress["steps"] % config.check_every == 0:
                progress["accuracy"] = heldout_accuracy(ctx, policy, domain, config.check_size)
                progress["checks"].append([ctx.phase_flops(phase), progress["accuracy"]])
                if progress["accuracy"] >= target:
                    progress["flops"] = ctx.phase_flops(phase)
                    progress["done"] = True
                    break
            if ctx.phase_flops(phase) >= cap_flops or ctx.should_stop():
                progress["done"] = True
                break
            stats = step()
            progress["steps"] += 1
            ctx.step_done(**{k: v for k, v in stats.items() if ":" not in k})
    return progress["flops"]


def forget(ctx: RunContext, config: RecoverConfig, budget_flops: float) -> tuple[str, Policy]:
    """The protocol's first half, with stages placed in `budget_flops`: GRPO on the domain, its
    checkpoint frozen as the self-teacher (`self:<domain>`), then GRPO on each other domain of the
    suite in turn. Returns (the domain, the self-teacher)."""
    domain = config.domain or ctx.domains[0]
    if domain not in ctx.domains:
        raise ConfigError(f"domain {domain!r} is not in the suite; its domains: {', '.join(ctx.domains)}")
    others = [d for d in ctx.domains if d != domain]
    if not others:
        raise ConfigError("recover needs a suite with at least two domains (one to lose, one to train on)")
    learn, lose, _ = protocol_flops(config, budget_flops)
    grpo_phase(ctx, ctx.student, f"stage:{domain}", [domain], learn, config.grpo)
    teacher = ctx.snapshot(ctx.student, f"self:{domain}")
    for other in others:
        grpo_phase(ctx, ctx.student, f"stage:{other}", [other], lose / len(others), config.grpo)
    return domain, teacher


class Recover:
    """Learn a domain, forget it, then recover it by GRPO and by OPD from the earlier self."""

    name = "recover"
    reads_heldout = ("the recovery protocol's measurement: each arm stops when the domain's held-out accuracy "
                     "reaches a target set from the self-teacher's and the lost student's held-out accuracy")
    Config = RecoverConfig

    def __init__(self, config: RecoverConfig) -> None:
        self.config = config

    def run(self, ctx: RunContext) -> None:
        config = self.config
        domain, teacher = forget(ctx, config, ctx.budget_flops)
        if ctx.should_stop():
            return
        target = self._target(ctx, teacher, domain)
        cap = protocol_flops(config, ctx.budget_flops)[2]
        # The clone is taken from the lost student before OPD changes it (a resumed run gets it back).
        grpo_policy = ctx.clone(ctx.student, "recover:grpo")
        grpo_sampler, opd_sampler = ctx.sampler("recover:grpo", [domain]), ctx.sampler("recover:opd", [domain])
        grpo_arm = replace(config.grpo, lr=config.grpo_arm_lr) if config.grpo_arm_lr else config.grpo
        grpo_flops = recover_until(ctx, "recover:grpo", grpo_policy,
                                   lambda: grpo_step(ctx, grpo_policy, grpo_sampler, grpo_arm),
                                   target, cap, config, domain)
        opd_flops = recover_until(ctx, "recover:opd", ctx.student,
                                  lambda: distill_step(ctx, ctx.student, {domain: teacher}, opd_sampler,
                                                       config.distill),
                                  target, cap, config, domain)
        measured = ctx.state["recovery_target"]
        ctx.report("recovery", {"domain": domain, "target": target, "grpo_flops": grpo_flops, "opd_flops": opd_flops,
                                "check_size": config.check_size, "teacher_accuracy": measured["teacher"],
                                "lost_accuracy": measured["lost"],
                                "checks": {arm: ctx.state[f"recover:{arm}"]["checks"] for arm in ("grpo", "opd")}})

    def _target(self, ctx: RunContext, teacher: Policy, domain: str) -> float:
        """The recovery target, measured once from the self-teacher and the lost student."""
        if "recovery_target" not in ctx.state:
            teacher_acc = heldout_accuracy(ctx, teacher, domain, self.config.check_size)
            lost_acc = heldout_accuracy(ctx, ctx.student, domain, self.config.check_size)
            target = self.config.target or lost_acc + self.config.target_fraction * (teacher_acc - lost_acc)
            ctx.state["recovery_target"] = {"teacher": teacher_acc, "lost": lost_acc, "target": target}
        return ctx.state["recovery_target"]["target"]
