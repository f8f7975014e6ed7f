"""The public adapter API: what a method is, and everything a method may use (docs/design.md, The method contract).

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
FLOP milestones and decides when the budget is spent (`should_stop`). A loss of the method's own goes
through `ctx.update(policy, rollouts, loss_fn, lr=...)`, which calls `loss_fn(bucket: Bucket)` per
length bucket. Everything here is the whole surface: built-in methods use nothing else, so a plugin
can do all they do (docs/plugins.md).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from bench.adapter import check_method_class
from bench.context import RunContext, Sampler
from bench.errors import AdapterError, ConfigError
from bench.losses import (
    GROUP_STDS,
    LOSS_TYPES,
    distillation_advantages,
    group_advantages,
    masked_mean,
    reverse_kl_estimate,
)
from bench.policy import Policy
from bench.rollout.base import Rollouts
from bench.update import Bucket


@runtime_checkable
class Method(Protocol):
    """A post-training method adapter (checked at registration by `check_method_class`).

    Optional: a class attribute `reads_heldout: str` saying why the method reads held-out accuracy
    (`ctx.evaluate(split="heldout")`, which only such a method may call). A run's record keeps how
    often it did; the board marks runs of a ranked method that did (docs/plugins.md).
    """

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def run(self, ctx: RunContext) -> None:
        """Train `ctx.student` (and any helpers) until `ctx.should_stop()` or the method is done."""
        ...


__all__ = [
    "GROUP_STDS",
    "LOSS_TYPES",
    "AdapterError",
    "Bucket",
    "ConfigError",
    "Method",
    "Policy",
    "Rollouts",
    "RunContext",
    "Sampler",
    "check_method_class",
    "distillation_advantages",
    "group_advantages",
    "masked_mean",
    "reverse_kl_estimate",
]
