"""The checkpoint format: `checkpoints/latest/` of a run directory, replaced atomically at each milestone.

    policies.pt   {name: Policy.state()} of every policy of the run but the external teacher
    rng.pt        {"generator": the run's sampling generator, "torch": torch's global RNG}
    state.json    {"state": the method's ctx.state, "samplers": positions, "reports": ctx.report()s,
                   "student": the deliverable's name, "phase_streams", "heldout_reads", "ledger_rows",
                   "curve_rows", "next_milestone", "trace", "wall_s", "last_eval"}: what the ledger, curve and
                  step trace are cut back to on resume, and the last evaluation with the digest of the weights
                  it was made on;
                  "hashes": sha256 of policies.pt and rng.pt, and of the first ledger_rows / curve_rows
                  / trace rows lines of ledger.jsonl, curve.jsonl and steps.jsonl

A new checkpoint is written beside the old one (`latest.tmp`) and swapped in by renames, so a run
killed at any moment has one whole checkpoint (docs/design.md, Run directory). Resume checks every
hash before it trusts a file: a ledger line deleted, a curve truncated or a flipped byte in the
weights stops the run with one line that names the damaged file.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.errors import RunError, no_space

RUN_FILES = ("ledger.jsonl", "curve.jsonl", "steps.jsonl")


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
    last_eval: tuple[str, dict] | None = None  # (weights digest, result) of the last evaluation


def folder(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints" / "latest"


def save(run_dir: Path, context: dict[str, Any], *, ledger_rows: int, curve_rows: int, next_milestone: int,
         trace: dict, wall_s: float, last_eval: tuple[str, dict] | None = None) -> None:
    """Write a checkpoint of `context` (`RunContext._checkpoint()`) and the runner's position."""
    final = folder(run_dir)
    tmp = final.with_name("latest.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    rows = dict(zip(RUN_FILES, (ledger_rows, curve_rows, trace["rows"])))
    try:
        tmp.mkdir(parents=True)
        torch.save(context["policies"], tmp / "policies.pt")
        torch.save({"generator": context["generator"], "torch": torch.get_rng_state()}, tmp / "rng.pt")
        hashes = {name: store.file_hash(tmp / name) for name in ("policies.pt", "rng.pt")}
        hashes |= {name: store.prefix_hash(Path(run_dir) / name, n) for name, n in rows.items()}
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
                "phase_streams": context["phase_streams"],
                "heldout_reads": context["heldout_reads"],
                "wall_s": wall_s,
                "last_eval": list(last_eval) if last_eval is not None else None,
                "hashes": hashes,
            },
        )
    except (OSError, RuntimeError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError) or no_space(exc):
            why = "no space left on device: free disk space" if no_space(exc) else f"{exc}: fix it"
            raise RunError(f"cannot write a checkpoint in {final.parent} ({why}), then run the command again; "
                           f"a run that has a checkpoint continues from it with --resume") from exc
        raise
    if final.exists():
        old = final.with_name("latest.old")
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def _settle(run_dir: Path) -> None:
    """Finish a swap that a kill interrupted: with no `latest`, the new checkpoint becomes it where it is
    whole (its state.json, written last and atomically, is there), else the previous one comes back."""
    final = folder(run_dir)
    tmp, old = final.with_name("latest.tmp"), final.with_name("latest.old")
    if final.exists():
        return
    if (tmp / "state.json").is_file():
        tmp.rename(final)
    elif old.exists():
        old.rename(final)
    shutil.rmtree(old, ignore_errors=True)


def load(run_dir: Path) -> Checkpoint | None:
    """The run's checkpoint, or None if it has none yet; a RunError if it cannot be read."""
    _settle(run_dir)
    path = folder(run_dir)
    if not path.exists():
        return None
    meta = store.read_json(path / "state.json")
    if not isinstance(meta, dict):
        raise RunError(f"{path / 'state.json'} is damaged (it holds a JSON {type(meta).__name__}, not an object); "
                       f"cannot resume: start the run again in another --runs folder")
    _verify(Path(run_dir), meta)
    try:
        # on the CPU: each policy's state is copied into its re-created model on the run's device, and a
        # GPU need not hold every saved state beside the models being loaded
        policies = torch.load(path / "policies.pt", weights_only=False, map_location="cpu")
        rng = torch.load(path / "rng.pt", weights_only=False)
        generator = torch.Generator()
        generator.set_state(rng["generator"])
        context = {
            "state": meta["state"],
            "policy_states": policies,
            "sampler_positions": meta["samplers"],
            "generator": generator,
            "reports": meta["reports"],
            "student_name": meta.get("student"),
            "phase_streams": meta.get("phase_streams"),  # absent from checkpoints made before it was kept
            "heldout_reads": meta.get("heldout_reads", 0),  # likewise
        }
        return Checkpoint(context, rng["torch"], meta["ledger_rows"], meta["curve_rows"], meta["next_milestone"],
                          meta["trace"], meta["wall_s"],
                          tuple(meta["last_eval"]) if meta.get("last_eval") else None)
    except Exception as exc:  # whatever a damaged file raises (EOFError, UnpicklingError, KeyError, ...)
        why = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}".strip()
        raise RunError(f"the checkpoint in {path} is damaged ({why}); cannot resume: start the run again "
                       f"in another --runs folder") from exc


def _verify(run_dir: Path, meta: dict) -> None:
    """Every file resume reads must hash as it did when the checkpoint was written."""
    hashes = meta.get("hashes")
    if not isinstance(hashes, dict):
        raise RunError(f"the checkpoint in {folder(run_dir)} has no file hashes; cannot check it, so not "
                       f"resuming: start the run again in another --runs folder")
    for name, expected in hashes.items():
        path = folder(run_dir) / name if name.endswith(".pt") else run_dir / name
        if name.endswith(".pt"):
            actual = store.file_hash(path) if path.exists() else None
        else:
            rows = _rows(meta, name)
            if not isinstance(rows, int):
                raise RunError(f"the checkpoint in {folder(run_dir)} is damaged (no row count for {name}); "
                               f"cannot resume: start the run again in another --runs folder")
            actual = store.prefix_hash(path, rows)
        if actual != expected:
            raise RunError(f"{path} does not match the checkpoint (changed, truncated or missing); the run "
                           f"cannot be resumed safely: restore the file or start again in another --runs folder")


def _rows(meta: dict, name: str) -> object:
    trace = meta.get("trace") if isinstance(meta.get("trace"), dict) else {}
    return {"ledger.jsonl": meta.get("ledger_rows"), "curve.jsonl": meta.get("curve_rows"),
            "steps.jsonl": trace.get("rows")}.get(name)
