"""constraints.txt, the tested package set `make setup` installs, covers and satisfies what
pyproject.toml asks for, and this environment holds it; constraints-vllm.txt likewise for the vLLM
environment (`make vllm-env`, .venv-vllm)."""

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def pins(file: str = "constraints.txt") -> dict[str, Version]:
    out = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            out[canonicalize_name(name)] = Version(version)
    return out


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]


@pytest.mark.parametrize("file", ["constraints.txt", "constraints-vllm.txt"])
def test_every_requirement_is_pinned_within_its_range(file):
    p = pins(file)
    for req in requirements():
        name = canonicalize_name(req.name)
        if name == "torch":  # the Makefile installs the local CPU build by its own pin
            assert "torch" not in p
            continue
        assert name in p, f"{req.name} is not in {file}: run `make lock`"
        assert req.specifier.contains(p[name], prereleases=True), f"{req.name}=={p[name]} breaks {req}"


VERSIONS = """
import json, sys
from importlib import metadata

def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"

print(json.dumps({name: version(name) for name in json.loads(sys.argv[1])}))
"""


def mismatches(file: str, python: str) -> dict[str, tuple[str, str]]:
    """Packages pinned in `file` whose version under `python` is another, or none."""
    want = pins(file)
    out = subprocess.run([python, "-c", VERSIONS, json.dumps(sorted(want))], capture_output=True, text=True,
                         check=True).stdout
    return {name: (have, str(want[name])) for name, have in json.loads(out).items()
            if have == "not installed" or Version(have) != want[name]}


def test_this_environment_has_the_pinned_versions():
    wrong = mismatches("constraints.txt", sys.executable)
    assert not wrong, f"installed vs constraints.txt (rebuild the venv: make setup): {wrong}"


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: `make vllm-env` builds it")
def test_the_vllm_environment_has_its_pinned_versions():
    wrong = mismatches("constraints-vllm.txt", str(VLLM_PYTHON))
    assert not wrong, f"installed in .venv-vllm vs constraints-vllm.txt (rebuild it: make vllm-env): {wrong}"
