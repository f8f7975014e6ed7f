"""Shipped reference models: a profile's base student and external teacher, as built once, hash-checked.

A tiny world's models are trained on a CPU, and float sums on a CPU depend on its instruction set:
the same recipe, code and packages give bit-identical weights in any process and at any thread
count on one machine (`bench prepare` trains on one thread), but not across CPUs (the kernels of
MKL and of torch's vectorised ops take other code paths on another processor). So that every user
starts from the same models, `bench/reference/<profile>/` holds the models `bench prepare` built
for the reference results, with the sha256 of every file:

    bench/reference/tiny/manifest.json          {"key": ..., "part_keys": {part: key}, "world_version": ...,
                                                 "files": {path: sha256}}
    bench/reference/tiny/prepared.json          the base's record (warm-up FLOPs, calibration, hash)
    bench/reference/tiny/student/...            the base, a Hugging Face folder
    bench/reference/tiny/external.json, external/...   the external teacher, likewise (a world may
                                                       ship its base alone; the teacher is then built)

`bench prepare` installs them into the cache when their recipe key matches the profile's (a changed
recipe, task or model spec gives another key, and the models are built instead); a file whose hash
differs from the manifest stops it with one line. `bench prepare --check` rebuilds from scratch and
compares weights hashes; `bench prepare --rebuild --write-reference` replaces the shipped models.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from bench.errors import ReferenceError
from bench.store import file_hash

ROOT = Path(__file__).resolve().parents[1] / "reference"  # bench/reference/: data, not code
PARTS = {"student": ("student", "prepared.json"), "external": ("external", "external.json")}


def manifest(profile_name: str) -> dict | None:
    path = ROOT / profile_name / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else None


def ships(profile_name: str, part: str) -> bool:
    """Whether `bench/reference/<profile>/` holds `part` (`student` or `external`), for some recipe."""
    meta = manifest(profile_name)
    return meta is not None and PARTS[part][1] in meta["files"]


def shipped_hashes(profile_name: str) -> dict[str, str]:
    """The weights hashes of the shipped models, {"base": ..., "external": ...} (a world may ship its
    base before its teacher); {} where the world ships none."""
    root = ROOT / profile_name
    if not ships(profile_name, "student"):
        return {}
    hashes = {"base": json.loads((root / "prepared.json").read_text())["model_hashes"]["base"]}
    if ships(profile_name, "external"):
        hashes["external"] = json.loads((root / "external.json").read_text())["model_hash"]
    return hashes


def install(profile_name: str, key: str, folder: Path, part: str, part_key: str | None = None) -> bool:
    """Copy the shipped `part` (`student` or `external`) into `folder` if it was built for this recipe:
    the part's own key (`part_key`) where the manifest records one, else the world's `key`.

    Returns False when there is no reference for this profile and recipe (the caller builds instead).
    Raises ReferenceError when a shipped file does not match its manifest's sha256.
    """
    meta = manifest(profile_name)
    source = ROOT / profile_name
    if meta is None or not (source / PARTS[part][1]).exists():
        return False
    shipped = meta.get("part_keys", {}).get(part)
    if (shipped != part_key) if shipped is not None else (meta.get("key") != key):
        return False
    files = {rel: digest for rel, digest in meta["files"].items()
             if rel == PARTS[part][1] or rel.startswith(PARTS[part][0] + "/")}
    for rel, digest in files.items():
        if not (source / rel).exists() or file_hash(source / rel) != digest:
            raise ReferenceError(f"shipped reference file {source / rel} does not match its sha256 in "
                                 f"{source / 'manifest.json'}; restore it (git checkout) or run "
                                 "bench prepare --rebuild")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{part}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source / PARTS[part][0], tmp)
    shutil.rmtree(folder / PARTS[part][0], ignore_errors=True)
    tmp.rename(folder / PARTS[part][0])
    # last, and whole (its readers do not wait on the installer): it marks the part as ready
    shutil.copyfile(source / PARTS[part][1], folder / f".{PARTS[part][1]}.tmp")
    os.replace(folder / f".{PARTS[part][1]}.tmp", folder / PARTS[part][1])
    return True


def write(profile_name: str, key: str, world_version: str, folder: Path,
          part_keys: dict[str, str] | None = None) -> Path:
    """Replace the shipped reference of `profile_name` with the built models in `folder`; `part_keys`
    (each part's recipe key) lets a part install while only the other part's recipe has changed."""
    target = ROOT / profile_name
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for part, (directory, info) in PARTS.items():
        if part == "external" and not (folder / info).exists():
            continue  # the base alone (`bench prepare --no-teacher`): the teacher is built on first use
        shutil.copytree(folder / directory, target / directory)
        shutil.copyfile(folder / info, target / info)
    files = {str(p.relative_to(target)): file_hash(p) for p in sorted(target.rglob("*")) if p.is_file()}
    meta = {"key": key, "world_version": world_version, "files": files}
    if part_keys:
        meta["part_keys"] = {part: k for part, k in part_keys.items() if (target / PARTS[part][1]).exists()}
    (target / "manifest.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return target


def cpu_model() -> str | None:
    """The processor's model name from /proc/cpuinfo (Linux), None where there is none."""
    return _cpuinfo("model name")


def cpu_signature() -> str:
    """The processor, torch's vectorised-kernel level and torch's version: what a base's bytes depend on.

    A virtual machine may name any Intel generation "Intel(R) Xeon(R) Processor", so a processor with
    AMX tiles (Sapphire Rapids and later), where math libraries may choose other kernels, says so.
    """
    import torch

    model = cpu_model() or "unknown"
    amx = "amx_tile" in (_cpuinfo("flags") or "").split()
    level = torch.backends.cpu.get_cpu_capability() + (" AMX" if amx else "")
    return f"{model} / {level} / torch {torch.__version__}"


def _cpuinfo(field: str) -> str | None:
    """The value of the first `field` line of /proc/cpuinfo (Linux), None where there is none."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None
