"""The public adapter API: what a method is, and everything a method may use (DESIGN section 6).

A method is a small class with a frozen config dataclass and a `run(ctx)`:

    @dataclass(frozen=True)
    class MyConfig:
        lr: float = 1e-3

    class MyMethod:
        name = "my-method"
        Config = MyConfig
        def __init__(self, config: MyConfig): self.config = config
        def run(self, ctx: RunContext) -> None:
            sampler = ctx.sampler("train")
            while not ctx.should_stop():
                batch = ctx.rollout(ctx.student, sampler.next(16), n=8)
                ctx.pg_step(ctx.student, batch, group_advantages(batch.rewards, 8), lr=self.config.lr)
                ctx.step_done()

Methods get metered `Policy` handles, never raw modules; the runner, not the method, evaluates at
FLOP milestones and decides when the budget is spent (`should_stop`). Everything here is the whole
surface: built-in methods use nothing else, so a plugin can do all they do.
"""

from __future__ import annotations

from bench.adapter import Method, check_method_class
from bench.context import RunContext, Sampler
from bench.errors import AdapterError
from bench.losses import (
    distillation_advantages,
    group_advantages,
    masked_mean,
    reverse_kl_estimate,
)
from bench.policy import Policy, Rollouts

__all__ = [
    "AdapterError",
    "Method",
    "Policy",
    "Rollouts",
    "RunContext",
    "Sampler",
    "distillation_advantages",
    "group_advantages",
    "masked_mean",
    "reverse_kl_estimate",
    "check_method_class",
]
