"""Files a run or a prepared world writes: atomic JSON, append-only JSON lines read back strictly.

A reader sees a whole file or the previous one, never half of one; a line that is not JSON is a
`CorruptRunError`, never silently skipped (docs/design.md, Run directory).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bench.errors import CorruptRunError


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

