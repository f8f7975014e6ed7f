"""The checkpoint format: `checkpoints/latest/` of a run directory, replaced atomically at each milestone.

    policies.pt   {name: Policy.state()} of every policy of the run but the external teacher
    rng.pt        {"generator": the run's sampling generator, "torch": torch's global RNG}
    state.json    {"state": the method's ctx.state, "samplers": positions, "reports": ctx.report()s,
                   "student": the deliverable's name, "ledger_rows", "curve_rows", "next_milestone",
                   "trace", "wall_s"}: what the ledger, curve and step trace are cut back to on resume

A new checkpoint is written beside the old one (`latest.tmp`) and swapped in by renames, so a run
killed at any moment has one whole checkpoint (docs/design.md, Run directory).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.errors import CorruptRunError, RunError


@dataclass
class Checkpoint:
    """A checkpoint read back: what the context resumes from, and where the runner's files are cut."""

    context: dict[str, Any]  # RunContext keyword arguments (state, policy_states, sampler_positions, ...)
    torch_rng: torch.Tensor
    ledger_rows: int
    curve_rows: int
    next_milestone: int
    trace: dict
    wall_s: float


def folder(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "latest"


def save(run_dir: Path, context: dict[str, Any], *, ledger_rows: int, curve_rows: int, next_milestone: int,
         trace: dict, wall_s: float) -> None:
    """Write a checkpoint of `context` (`RunContext._checkpoint()`) and the runner's position."""
    final = folder(run_dir)
    tmp = final.with_name("latest.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(context["policies"], tmp / "policies.pt")
    torch.save({"generator": context["generator"], "torch": torch.get_rng_state()}, tmp / "rng.pt")
    store.write_json(
        tmp / "state.json",
        {
            "state": context["state"],
            "samplers": context["samplers"],
            "student": context["student"],
            "ledger_rows": ledger_rows,
            "curve_rows": curve_rows,
            "next_milestone": next_milestone,
            "trace": trace,
            "reports": context["reports"],
            "wall_s": wall_s,
        },
    )
    if final.exists():
        old = final.with_name("latest.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def load(run_dir: Path) -> Checkpoint | None:
    """The run's checkpoint, or None if it has none yet; a RunError if it cannot be read."""
    path = folder(run_dir)
    if not path.exists():
        return None
    try:
        meta = store.read_json(path / "state.json")
        policies = torch.load(path / "policies.pt", weights_only=False)
        rng = torch.load(path / "rng.pt", weights_only=False)
    except (OSError, RuntimeError, CorruptRunError) as exc:
        raise RunError(f"checkpoint in {path} is unreadable ({exc}); cannot resume") from exc
    generator = torch.Generator()
    generator.set_state(rng["generator"])
    context = {
        "state": meta["state"],
        "policy_states": policies,
        "sampler_positions": meta["samplers"],
        "generator": generator,
        "reports": meta["reports"],
        "student_name": meta.get("student"),
    }
    return Checkpoint(context, rng["torch"], meta["ledger_rows"], meta["curve_rows"], meta["next_milestone"],
                      meta["trace"], meta["wall_s"])
