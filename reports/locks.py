"""Advisory locks shared by processes that write the same folders (`fcntl.flock`).

A lock dies with its process, so a killed writer never leaves one behind. The engine's run
directories are locked by `bench.store.locked` (a `.lock` file holding the writer's PID), which the
reports read here and never import.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterator
from pathlib import Path


def holder(path: Path) -> str | None:
    """The PID written in a held lock file, or None when the file is absent or nobody holds it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive_folder(folder: Path, busy: Callable[[], Exception]) -> Iterator[None]:
    """Hold an exclusive lock on the folder itself (created) for the block, writing nothing into it;
    where another process holds it, raise `busy()` at once."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy() from None
        yield
    finally:
        os.close(fd)  # releases the lock

