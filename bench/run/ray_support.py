"""Ray, imported only when a sweep or a run's phases ask for it (the `ray` extra is optional)."""

from __future__ import annotations

from typing import Any

from bench.errors import RunError

RAY_MISSING = "the ray executor needs Ray, which is not installed: pip install 'opd-bench[ray]'"


def import_ray() -> Any:
    """The `ray` module, or a RunError that says how to install it."""
    try:
        import ray
    except ImportError:
        raise RunError(RAY_MISSING) from None
    return ray
