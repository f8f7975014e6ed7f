"""The method protocol and its registration check, kept free of torch so that listing is instant.

`bench.api` re-exports everything here; plugins import from `bench.api`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from bench.errors import AdapterError

if TYPE_CHECKING:
    from bench.context import RunContext


@runtime_checkable
class Method(Protocol):
    """A post-training method adapter."""

    name: ClassVar[str]
    Config: ClassVar[type]

    def __init__(self, config: Any) -> None: ...

    def run(self, ctx: RunContext) -> None:
        """Train `ctx.student` (and any helpers) until `ctx.should_stop()` or the method is done."""
        ...


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
