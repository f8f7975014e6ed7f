"""Writing a site into its folder: safe paths only, the previous build's files removed, records never lost.

`Writer` writes files under the site folder (every path made of slugs), first into a staging folder
inside it, and moves them into place only when the build has made every one (`commit`): a build that
fails half-way leaves the previous site as it was, byte for byte. `remove_previous` deletes what the
previous build listed in its site.json. `check_overwrite` runs first: a build that would delete
record files of runs it does not show (a smaller runs folder built into a full leaderboard) raises
SiteOverwriteError before anything in the folder is touched, unless forced.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

from reports import figures, locks
from reports.formatting import is_safe_slug


class SiteOverwriteError(RuntimeError):
    """The output folder holds a built site with records this build would lose; nothing was written."""


class SiteBusyError(SiteOverwriteError):
    """Another process is building a site into the same folder; nothing was written."""


@contextlib.contextmanager
def building(root: Path) -> Iterator[None]:
    """One build into a site folder at a time: a build clears staging folders and the previous site's
    files, which a second build would be writing or checking. The second raises SiteBusyError before it
    reads or writes anything there. The lock is on the folder itself (`reports.locks`): no file of its
    own is left in the site."""
    if root.exists() and not root.is_dir():
        check_site_folder(root)  # a file: its own message
    with locks.exclusive_folder(root, lambda: SiteBusyError(
            f"{root} is being built by another process (another `bench report` or `bench reproduce`); wait "
            "for it to finish. Nothing was written.")):
        yield


class Writer:
    """Writes files under one root, refusing any path that is not made of safe slugs.

    Files are written into a staging folder inside the root (`.building-*`); `commit` moves those
    written so far into place, one rename each, and leaving the `with` block removes the staging
    folder, with whatever a failed build left in it. Figures go through `draw`: seaborn's to the worker
    processes when there are any (`finish` writes them), the rest drawn here at once.
    """

    def __init__(self, root: Path, pool: Executor | None = None) -> None:
        self.root = root.resolve()
        self.pool = pool
        self.written: list[str] = []
        self._staged: dict[str, None] = {}  # in order, each path once: a path written twice keeps its last
        self._stage: Path | None = None
        self._pending: list[tuple[str, Future, Callable[..., str], dict[str, Any]]] = []

    def __enter__(self) -> Writer:
        self.root.mkdir(parents=True, exist_ok=True)
        for left in self.root.glob(".building-*"):  # a build killed before it could clean up after itself
            shutil.rmtree(left, ignore_errors=True)
        self._stage = Path(tempfile.mkdtemp(prefix=".building-", dir=self.root))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stage is not None:
            shutil.rmtree(self._stage, ignore_errors=True)
            self._stage = None

    def _checked(self, rel: str) -> str:
        parts = rel.split("/")
        stems = [p.rsplit(".", 1)[0] for p in parts]
        if not all(is_safe_slug(s) for s in stems) or ".." in parts:
            raise ValueError(f"refusing to write unsafe path {rel!r}")
        self.written.append(rel)
        return rel

    def _staging(self, rel: str) -> Path:
        """Where `rel` is written until `commit` (a path of safe slugs only)."""
        if self._stage is None:
            raise RuntimeError("a Writer writes inside its `with` block")
        path = self._stage / self._checked(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._staged[rel] = None
        return path

    def write(self, rel: str, text: str) -> None:
        # errors="replace": a lone surrogate from JSON "\ud800"
        self._staging(rel).write_text(text, encoding="utf-8", errors="replace")

    def copy(self, rel: str, source: Path) -> None:
        """Copy a file's bytes (a record just read and validated: no need to encode it again)."""
        shutil.copyfile(source, self._staging(rel))

    def keep(self, rel: str) -> None:
        """List a file that is already in place (a record the site is being rebuilt from)."""
        self._checked(rel)

    def draw(self, rel: str, func: Callable[..., str], kwargs: dict[str, Any]) -> None:
        if self.pool is not None and func in figures.SEABORN_FIGURES:
            self._pending.append((rel, self.pool.submit(func, **kwargs), func, kwargs))
        else:
            self.write(rel, func(**kwargs))

    def finish(self) -> None:
        """Write the workers' figures; this process, done with the rest, draws those not yet started."""
        here = {}
        for rel, future, func, kwargs in reversed(self._pending):  # workers take from the front
            if future.cancel():
                here[rel] = func(**kwargs)
        for rel, future, _, _ in self._pending:
            self.write(rel, here[rel] if rel in here else future.result())
        self._pending.clear()

    def commit(self) -> None:
        """Write the workers' figures (`finish`), then move every file written since the last commit into
        place: a rename each, on the root's own file system."""
        self.finish()
        for rel in self._staged:
            target = self.root / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._stage / rel, target)
        self._staged.clear()


def remove_previous(root: Path, keep: set[Path]) -> None:
    """Delete the files a previous build listed in site.json (only those, only inside root), except `keep`.

    keep: the files this build wrote and the record files it read (resolved): a site rebuilt from its
    own records/ keeps them.
    """
    index = root / "site.json"
    try:
        previous = json.loads(index.read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        return
    root = root.resolve()
    for rel in previous if isinstance(previous, list) else []:
        path = (root / str(rel)).resolve()
        if path.is_relative_to(root) and path.is_file() and path not in keep:
            path.unlink()


def _run_id(path: Path) -> str | None:
    """The run id a record file names, or None for a file that is not a readable record."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run_id = value.get("run_id") if isinstance(value, dict) else None
    return run_id if isinstance(run_id, str) else None


# what a build writes at the top of its folder, besides site.json and the records/ and studies/ it copies
SITE_NAMES = ("index.html", "findings.html", "results.csv", "results.json", "methods", "plots", "static")


def check_site_folder(root: Path) -> None:
    """Refuse an output folder that is a file, or a folder that holds no built site (no site.json) but
    files of the names a build writes (`SITE_NAMES`): someone else's, which it would write over. Other
    files (a README.md of one's own, say) stay where they are. (With force a build goes ahead.)"""
    if root.exists() and not root.is_dir():
        raise SiteOverwriteError(f"{root} is a file, not a folder for the site; choose another output folder")
    if not root.is_dir() or (root / "site.json").is_file():
        return
    if taken := [name for name in SITE_NAMES if (root / name).exists()]:
        raise SiteOverwriteError(
            f"{root} holds {', '.join(taken)} but no built site (no site.json): a build would write over them. "
            "Nothing was written. Choose a new or empty output folder, or pass force=True (--force on the "
            "command line) to build there anyway.")


def check_overwrite(root: Path, run_ids: set[str], inputs: set[Path]) -> None:
    """Refuse to build into a site whose records/ holds runs this build does not read.

    Args:
        root: the output folder.
        run_ids: the run ids of the records this build shows.
        inputs: every record file this build reads (resolved): those are kept, never lost.
    Raises:
        SiteOverwriteError where `root` is a file or holds files of a site's names but no built site
        (`check_site_folder`); or
        naming how many records would be lost, when `root` holds a built site
        (site.json) with record files (records/*.json) of other run ids, or a study
        (studies/<slug>/study.json and records/*.json) this build does not read.
    """
    check_site_folder(root)
    if not (root / "site.json").is_file():
        return
    lost = [p for p in sorted((root / "records").glob("*.json"))
            if p.resolve() not in inputs and (run_id := _run_id(p)) is not None and run_id not in run_ids]
    # a study's records are its own (another study may hold runs of the same names): kept only if read
    lost += [p for p in sorted((root / "studies").glob("*/records/*.json"))
             if p.resolve() not in inputs and _run_id(p) is not None]
    lost += [p for p in sorted((root / "studies").glob("*/study.json")) if p.resolve() not in inputs]
    if lost:
        n, first = len(lost), lost[0].relative_to(root)
        raise SiteOverwriteError(
            f"{root} holds a built site, and {n} of its record files ({first}{', ...' if n > 1 else ''}) would "
            "be lost: this build does not read them (runs it does not show, or a study it is not given). "
            "Nothing was written. Pass force=True (--force on the command line) to replace the site, or choose "
            "another output folder.")
