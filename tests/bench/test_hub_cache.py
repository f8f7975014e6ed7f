"""`--model` and friends accept a hub id already in the local Hugging Face cache, offline; anything else
gets one line that says where it looked."""

from __future__ import annotations

import shutil

import huggingface_hub
import pytest
from typer.testing import CliRunner

from bench.cli import app
from bench.errors import UnknownModelError
from bench.world.models import load_model, resolve_model, tiny_model_dir

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture()
def hub_cache(tmp_path, monkeypatch):
    """A Hugging Face hub cache holding `opd-bench/tiny-llama` (the tiny spec's folder) at `main`."""
    repo = tmp_path / "hub" / "models--opd-bench--tiny-llama"
    shutil.copytree(tiny_model_dir("tiny-llama"), repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_cached_hub_id_resolves_to_its_snapshot(hub_cache):
    folder = resolve_model("opd-bench/tiny-llama")
    assert folder == (hub_cache / "models--opd-bench--tiny-llama" / "snapshots" / COMMIT).resolve()
    model, _ = load_model("opd-bench/tiny-llama")
    assert model.config.model_type == "llama"


def test_an_uncached_hub_id_says_where_it_looked(hub_cache):
    with pytest.raises(UnknownModelError, match="local Hugging Face cache") as caught:
        resolve_model("opd-bench/not-downloaded")
    assert str(hub_cache) in str(caught.value) and "hf download opd-bench/not-downloaded" in str(caught.value)
    with pytest.raises(UnknownModelError) as path_like:
        resolve_model("./no/such/folder")
    assert "cache" not in str(path_like.value).split(";")[0]  # a path is never looked up as an id


def test_cli_takes_a_cached_hub_id(hub_cache):
    result = CliRunner().invoke(app, ["flops", "opd-bench/tiny-llama"])
    assert result.exit_code == 0, result.output
    bad = CliRunner().invoke(app, ["flops", "opd-bench/not-downloaded"])
    assert bad.exit_code == 2 and "local Hugging Face cache" in (bad.stderr or bad.output)
