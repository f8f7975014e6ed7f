"""constraints.txt, the tested package set `make setup` installs, covers and satisfies what
pyproject.toml asks for, and this environment holds it."""

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def pins() -> dict[str, Version]:
    out = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


def test_every_requirement_is_pinned_within_its_range():
    p = pins()
    for req in requirements():
        name = canonicalize_name(req.name)
        if name == "torch":  # the Makefile installs the local CPU build by its own pin
            assert "torch" not in p
            continue
        assert name in p, f"{req.name} is not in constraints.txt: run `make lock`"
        assert req.specifier.contains(p[name], prereleases=True), f"{req.name}=={p[name]} breaks {req}"


def test_this_environment_has_the_pinned_versions():
    wrong = {}
    for name, version in pins().items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed == "not installed" or Version(installed) != version:
            wrong[name] = (installed, str(version))
    assert not wrong, f"installed vs constraints.txt (rebuild the venv: make setup): {wrong}"
