"""Stopping a `concurrent.futures` process pool's workers, for a sweep's runs and a run's phases."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGTERM to the pool's worker processes (Python 3.14 has `terminate_workers` for this)."""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.terminate()
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        process.join(timeout=10)
