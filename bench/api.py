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

import dataclasses
from typing import Any, ClassVar, Protocol, runtime_checkable

from bench.context import RunContext, Sampler
from bench.losses import (
    distillation_advantages,
    group_advantages,
    masked_mean,
    reverse_kl_estimate,
)
from bench.policy import Policy, Rollouts

__all__ = [
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


@runtime_checkable
class Method(Protocol):
    """A post-training method adapter."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def run(self, ctx: RunContext) -> None:
        """Train `ctx.student` (and any helpers) until `ctx.should_stop()` or the method is done."""
        ...


class AdapterError(TypeError):
    """A method class does not satisfy the adapter protocol."""


def check_method_class(cls: Any, where: str = "") -> type:
    """Verify a class against the protocol at registration; one clear error naming what is wrong."""
    label = f"{where or getattr(cls, '__name__', repr(cls))}"
    if not isinstance(cls, type):
        raise AdapterError(f"{label}: expected a class, got {type(cls).__name__}")
    problems = []
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        problems.append("a non-empty class attribute `name: str`")
    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        problems.append("a `Config` dataclass")
    elif not config.__dataclass_params__.frozen:
        problems.append("a frozen `Config` dataclass (@dataclass(frozen=True))")
    if not callable(getattr(cls, "run", None)):
        problems.append("a `run(self, ctx)` method")
    if problems:
        raise AdapterError(f"{label} is not a method adapter: it needs " + "; ".join(problems))
    return cls
