"""A suite as a Hugging Face `datasets.DatasetDict` folder with a dataset card, and back.

    from tasks import get_suite
    from tasks.hf_datasets import export, load
    export(get_suite("math_code", "easy", "hf"), "opd-math-code/")   # bench export-hf math_code --out ...
    datasets.load_dataset("opd-math-code/")                           # DatasetDict: train, validation, heldout
    suite = load("opd-math-code/")                                    # a Suite whose splits are these files

The folder has the layout of a dataset repository on the Hugging Face Hub (it can be uploaded as is):
`data/<split>-00000-of-00001.parquet` per split and a `README.md` card whose YAML header maps the
splits to their files (`configs`) and records the suite (`opd_bench`: name, difficulty, format,
version, content hash, how the train sample was drawn). The splits are the suite's own:

- `train`: the first `train_size` problems of `Suite.train_sampler(seed)` (the sampler is endless;
  this is a fixed sample of it);
- `validation`: `Suite.validation(domain)` of every domain, in suite order;
- `heldout`: `Suite.heldout()`, the split the leaderboard reports.

Rows are the held-out records' flat strings (`id`, `domain`, `prompt`, `answer`, `solution`,
`alt_solution`, `meta` as JSON). Generators and verifiers stay code: `load` rebuilds the suite from
the card, reads its held-out and validation problems from the files, and refuses files whose held-out
problems no longer hash to the card's content hash.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tasks.suites import Suite, all_suites, cache_dir, get_suite, problem_from_record, problem_record

if TYPE_CHECKING:
    import datasets

SPLITS = ("train", "validation", "heldout")
TRAIN_SIZE = 1000
COLUMNS = ("id", "domain", "prompt", "answer", "solution", "alt_solution", "meta")


class SuiteFolderError(ValueError):
    """A folder that is not a readable `export` of a suite, or whose files were altered."""


def _rows(suite: Suite, split: str, problems: list) -> list[dict[str, str]]:
    return [problem_record(p, f"{suite.id}/{split}/{i}") for i, p in enumerate(problems)]


def to_dataset_dict(suite: Suite, train_size: int = TRAIN_SIZE, seed: int = 0) -> datasets.DatasetDict:
    """The suite's train sample, validation and held-out splits as one `DatasetDict` (string columns)."""
    import datasets

    if train_size < 0:
        raise ValueError(f"train_size must be >= 0, got {train_size}")
    problems = {
        "train": list(itertools.islice(suite.train_sampler(seed), train_size)),
        "validation": [p for d in suite.domains for p in suite.validation(d)],
        "heldout": suite.heldout(),
    }
    features = datasets.Features({c: datasets.Value("string") for c in COLUMNS})
    return datasets.DatasetDict({split: datasets.Dataset.from_list(_rows(suite, split, problems[split]),
                                                                   features=features) for split in SPLITS})


def _card(suite: Suite, sizes: dict[str, int], train_size: int, seed: int) -> str:
    from huggingface_hub import DatasetCard, DatasetCardData

    data = DatasetCardData(
        pretty_name=f"OPD-Bench {suite.id}",
        tags=["opd-bench", "synthetic", "reasoning"],
        task_categories=["text-generation"],
        # `datasets` caches a folder with a card by its name and the card's configs, not by its files: a
        # description of what the files hold makes a new export there (or in a folder of the same name)
        # load as itself, not as the one before
        configs=[{"config_name": "default", "description": f"{suite.id} {suite.content_hash}, train seed {seed} "
                  f"size {train_size}", "data_files": [{"split": s, "path": f"data/{s}-*.parquet"} for s in SPLITS]}],
        opd_bench={"suite": suite.name, "difficulty": suite.difficulty, "format": suite.fmt,
                   "domains": list(suite.domains), "version": suite.version, "content_hash": suite.content_hash,
                   "train_seed": seed, "train_size": train_size},
    )
    table = "\n".join(f"| `{s}` | {sizes[s]:,} |" for s in SPLITS)
    body = f"""
# OPD-Bench {suite.id}

Procedurally generated problems of the OPD-Bench suite `{suite.name}` (domains: {", ".join(suite.domains)};
difficulty `{suite.difficulty}`; prompt format `{suite.fmt}`), suite version {suite.version}, content
hash `{suite.content_hash}`. Written by `bench export-hf`.

| split | rows |
| --- | --- |
{table}

- `heldout`: the fixed held-out split every method is scored on (greedy pass@1, mean over domains). A
  prompt is held out when a hash of its text falls in one fixed bucket of prompt space, so no training
  prompt can be a held-out one.
- `validation`: a fixed sample of the training distribution (never the held-out bucket), for methods
  that stop on a plateau without looking at the held-out split.
- `train`: the first {train_size:,} problems of the suite's endless training stream with seed {seed}; a
  run draws its own stream, this is a sample of it.

Columns: `id`, `domain`, `prompt` (the text fed to the model), `answer` (the final answer the
verifier expects), `solution` and `alt_solution` (two worked solutions in different styles), `meta`
(generator details, JSON). Answers are checked by OPD-Bench's verifiers (`tasks/`), which extract the
final answer from the completion and compare it with `answer`; reading a completion never runs it.

    import datasets
    splits = datasets.load_dataset("path/to/this/folder")
    from tasks.hf_datasets import load            # in an OPD-Bench checkout
    suite = load("path/to/this/folder")          # a Suite whose splits are these files
"""
    return str(DatasetCard(f"---\n{data.to_yaml()}\n---\n{body}"))


def export(suite: Suite, out_dir: str | os.PathLike, *, train_size: int = TRAIN_SIZE, seed: int = 0) -> Path:
    """Write the suite's splits as parquet files and a dataset card into `out_dir`; returns the card's path.

    A README.md that is not an earlier export's card, or a data/ folder with files beside no such card,
    is refused (`SuiteFolderError`) before anything is written.
    """
    import datasets

    out = Path(out_dir)
    data = out / "data"
    if (out / "README.md").exists():  # a card of an earlier export is replaced; anyone else's README is not
        try:
            card_metadata(out)
        except Exception as exc:
            raise SuiteFolderError(f"{out} holds a README.md that no `bench export-hf` wrote; choose another "
                                   "--out") from exc
    elif data.is_dir() and any(data.iterdir()):  # files in data/ and no card of ours: someone else's
        raise SuiteFolderError(f"{out} holds a data/ folder with files but no README.md card of `bench export-hf`; "
                               "choose another --out")
    splits = to_dataset_dict(suite, train_size, seed)
    out.mkdir(parents=True, exist_ok=True)
    card = out / "README.md"  # first: an export interrupted while writing data/ is recognised as ours
    card.write_text(_card(suite, {s: len(d) for s, d in splits.items()}, train_size, seed), encoding="utf-8")
    data.mkdir(exist_ok=True)
    quiet = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # a bar per split for a few milliseconds of writing: noise on stderr
    try:
        for split, dataset in splits.items():
            dataset.to_parquet(str(data / f"{split}-00000-of-00001.parquet"))
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    return card


class LoadedSuite(Suite):
    """A suite whose held-out and validation problems (and its train sample) come from an export folder."""

    def __init__(self, name: str, difficulty: str, fmt: str, splits: datasets.DatasetDict) -> None:
        super().__init__(name, difficulty, fmt, all_suites()[name])
        problems = {s: [problem_from_record(r) for r in splits[s]] for s in SPLITS}
        self.train_sample = problems["train"]
        self._heldout = {d: [p for p in problems["heldout"] if p.domain == d] for d in self.domains}
        self._validation = {d: [p for p in problems["validation"] if p.domain == d] for d in self.domains}

    def heldout(self, domain: str | None = None) -> list:
        names = self.domains if domain is None else (self.domain(domain).name,)
        return [p for d in names for p in self._heldout[d]]

    def validation(self, domain: str) -> list:
        return list(self._validation[self.domain(domain).name])


def card_metadata(folder: str | os.PathLike) -> dict[str, Any]:
    """The `opd_bench` block of an export's dataset card."""
    from huggingface_hub import DatasetCard

    path = Path(folder) / "README.md"
    if not path.is_file():
        raise SuiteFolderError(f"{folder} has no README.md: not a folder written by `bench export-hf`")
    meta = DatasetCard.load(path).data.to_dict().get("opd_bench")
    if not isinstance(meta, dict):
        raise SuiteFolderError(f"{path} has no opd_bench block in its header: not written by `bench export-hf`")
    return meta


def load(folder: str | os.PathLike) -> LoadedSuite:
    """Read a suite back from an `export` folder (through `datasets.load_dataset`), checked against its card."""
    import datasets

    meta = card_metadata(folder)
    get_suite(meta["suite"], meta["difficulty"], meta["format"])  # unknown names fail here, in one line
    # rebuilt each time from the files as they are (a cached copy would hide files altered since)
    splits = datasets.load_dataset(str(folder), cache_dir=str(cache_dir() / "hf-datasets"),
                                   download_mode="force_redownload")
    missing = [s for s in SPLITS if s not in splits]
    if missing:
        raise SuiteFolderError(f"{folder}: missing split(s) {', '.join(missing)}")
    suite = LoadedSuite(meta["suite"], meta["difficulty"], meta["format"], splits)
    if str(meta["version"]) != suite.version or suite.content_hash != meta["content_hash"]:
        raise SuiteFolderError(
            f"{folder}: the held-out files do not match the card (suite version {meta['version']}, hash "
            f"{str(meta['content_hash'])[:12]}; these files under version {suite.version} hash "
            f"{suite.content_hash[:12]}): altered, or written by another version of the suite")
    return suite
