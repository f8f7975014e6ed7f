"""Files a run or a prepared world writes: atomic JSON, append-only JSON lines read back strictly,
the hashes a checkpoint keeps of them, and the lock that allows one writer at a time.

A reader sees a whole file or the previous one, never half of one; a line that is not JSON is a
`CorruptRunError`, never silently skipped (docs/design.md, Run directory).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.errors import CorruptRunError, RunError

LOCK = ".lock"  # the lock file inside a run directory


@contextlib.contextmanager
def locked(path: Path, *, what: str, wait: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` (created with its folders) for the block.

    The holder writes its PID into the file. A second holder waits (`wait`) or gets a RunError that
    names the holder's PID. The lock dies with its process, so a killed run never leaves it behind.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise RunError(f"{what} is in use by another process (PID {holder}); wait for it to finish "
                           f"or stop it") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def building(folder: Path) -> contextlib.AbstractContextManager[None]:
    """One builder per cache entry (`folder`) at a time: a second waits for the first, then finds it built."""
    folder = Path(folder)
    return locked(folder.with_name(folder.name + ".lock"), what=f"cache entry {folder}", wait=True)


def file_hash(path: Path) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prefix_hash(path: Path, rows: int) -> str | None:
    """sha256 of the first `rows` lines of a text file, or None if it has fewer."""
    h = hashlib.sha256()
    if rows == 0:
        return h.hexdigest()
    if not Path(path).exists():
        return None
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, start=1):
            h.update(line)
            if n == rows:
                return h.hexdigest() if line.endswith(b"\n") else None
    return None


def write_text(path: Path, text: str) -> None:
    """Write a file atomically: a reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # the target a folder, a full disk, Ctrl-C: no half-written temporary left behind
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: name ours
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically (`write_text`)."""
    write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=str))


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorruptRunError(f"{path}: cannot be read as JSON ({exc})") from exc


def append_row(path: Path, row: dict) -> None:
    """Append one JSON row to a JSON-lines file, fsynced."""
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
    write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

