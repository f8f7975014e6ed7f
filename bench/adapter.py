"""The registration check of a method class, kept free of torch so that listing methods is instant.

The protocol it checks is `bench.api.Method`; the registry runs this check on every method it
loads (built-in, entry point or file), and `bench.api` re-exports it for plugins' own tests.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.errors import AdapterError


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
    why = getattr(cls, "reads_heldout", None)
    if why is not None and not (isinstance(why, str) and why.strip()):
        problems.append("`reads_heldout`, where set, to say in words why it reads held-out accuracy")
    if problems:
        raise AdapterError(f"{label} is not a method adapter: it needs " + "; ".join(problems))
    if (bare := _without_default(config)) is not None:
        raise AdapterError(f"{label}: {bare} has no default: every config field needs one, so that `bench run` "
                           "works without --set")
    return cls


def _without_default(config: type) -> str | None:
    """`Cfg field 'lr'` for the first field that `Config()` cannot fill (no default and no default_factory),
    nested configs made by their default_factory included; None where every field has a default."""
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        factory = field.default_factory
        if field.default is dataclasses.MISSING and factory is dataclasses.MISSING:
            return f"{config.__name__} field {field.name!r}"
        if isinstance(factory, type) and dataclasses.is_dataclass(factory) and (inner := _without_default(factory)):
            return inner
    return None
