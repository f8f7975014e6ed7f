"""Suites as `datasets` folders: `export` writes the suite's splits with a card, `datasets.load_dataset`
reads them, and `load` gives back the same suite (problems, content hash, scores)."""

from __future__ import annotations

import itertools

import pytest

from tasks import get_suite
from tasks.hf_datasets import SPLITS, SuiteFolderError, card_metadata, export, load

datasets = pytest.importorskip("datasets")
TRAIN = 48


@pytest.fixture(scope="module")
def suite():
    return get_suite("math_code", "easy", "tiny")


@pytest.fixture(scope="module")
def folder(suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "math_code"
    export(suite, out, train_size=TRAIN, seed=3)
    return out


def test_export_is_a_dataset_dict_with_a_card(suite, folder):
    splits = datasets.load_dataset(str(folder), cache_dir=str(folder.parent / "cache"))
    assert set(splits) == set(SPLITS)
    assert len(splits["train"]) == TRAIN
    assert len(splits["validation"]) == sum(len(suite.validation(d)) for d in suite.domains)
    assert len(splits["heldout"]) == len(suite.heldout()) == 2000
    assert splits["heldout"][0]["prompt"] == suite.heldout()[0].prompt
    meta = card_metadata(folder)
    assert meta == {"suite": "math_code", "difficulty": "easy", "format": "tiny", "domains": ["math", "code"],
                    "version": suite.version, "content_hash": suite.content_hash, "train_seed": 3,
                    "train_size": TRAIN}
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "# OPD-Bench math_code-easy-tiny" in card


def test_load_gives_back_the_suite(suite, folder):
    loaded = load(folder)
    assert (loaded.name, loaded.difficulty, loaded.fmt, loaded.domains) == (suite.name, "easy", "tiny", suite.domains)
    assert loaded.content_hash == suite.content_hash
    for d in suite.domains:
        assert loaded.heldout(d) == suite.heldout(d)
        assert loaded.validation(d) == suite.validation(d)
    assert loaded.train_sample == list(itertools.islice(suite.train_sampler(3), TRAIN))
    problem = loaded.heldout("code")[5]
    assert loaded.score(problem, problem.answer) == 1.0 and loaded.score(problem, "") == 0.0


def test_load_refuses_altered_files(suite, folder, tmp_path):
    altered = tmp_path / "altered"
    rows = datasets.load_dataset(str(folder), cache_dir=str(tmp_path / "cache"))
    export(suite, altered, train_size=TRAIN)
    heldout = rows["heldout"].map(lambda r, i: {"answer": r["answer"] + "0" if i == 0 else r["answer"]},
                                  with_indices=True)
    heldout.to_parquet(str(altered / "data" / "heldout-00000-of-00001.parquet"))
    with pytest.raises(SuiteFolderError, match="do not match the card"):
        load(altered)
    (altered / "README.md").unlink()
    with pytest.raises(SuiteFolderError, match="no README.md"):
        load(altered)


def test_an_export_written_again_into_its_folder_loads_as_itself(suite, tmp_path):
    """`datasets` caches a folder with a card by the card: a new export there (another train sample)
    loads as the new one, through `datasets.load_dataset` and `load`; and files altered after a load
    are read as they are, not from the cache."""
    out, cache = tmp_path / "ds", str(tmp_path / "cache")
    export(suite, out, train_size=4, seed=0)
    assert len(datasets.load_dataset(str(out), cache_dir=cache)["train"]) == len(load(out).train_sample) == 4
    export(suite, out, train_size=6, seed=1)
    fresh = list(itertools.islice(suite.train_sampler(1), 6))
    assert [r["prompt"] for r in datasets.load_dataset(str(out), cache_dir=cache)["train"]] == [p.prompt for p in fresh]
    assert load(out).train_sample == fresh
    heldout = datasets.load_dataset(str(out), cache_dir=cache)["heldout"]
    heldout.map(lambda r, i: {"answer": r["answer"] + "0" if i == 0 else r["answer"]}, with_indices=True).to_parquet(
        str(out / "data" / "heldout-00000-of-00001.parquet"))
    with pytest.raises(SuiteFolderError, match="do not match the card"):
        load(out)


def test_export_refuses_data_it_did_not_write(suite, tmp_path):
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "heldout-00000-of-00001.parquet").write_bytes(b"my own rows")
    with pytest.raises(SuiteFolderError, match="data/ folder with files but no README.md card"):
        export(suite, mine, train_size=4)
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == ["data", "data/heldout-00000-of-00001.parquet"]
    assert (mine / "data" / "heldout-00000-of-00001.parquet").read_bytes() == b"my own rows"
    ours = tmp_path / "ours"
    for _ in range(2):  # an earlier export's card and data are its own: written again
        export(suite, ours, train_size=4)
    assert len(load(ours).train_sample) == 4


def test_cli_export_hf(tmp_path):
    from typer.testing import CliRunner

    from bench.cli import app

    out = tmp_path / "ds"
    result = CliRunner().invoke(app, ["export-hf", "math", "--out", str(out), "--format", "tiny", "--train-size", "8"])
    assert result.exit_code == 0, result.output
    assert len(load(out).train_sample) == 8 and card_metadata(out)["suite"] == "math"
    bad = CliRunner().invoke(app, ["export-hf", "math_cod", "--out", str(out)])
    assert bad.exit_code == 2 and "math_code" in (bad.stderr or bad.output)
