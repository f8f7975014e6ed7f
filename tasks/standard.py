"""Standard benchmarks (GSM8K, MATH, MBPP, HumanEval) read from local files, for the hf format.

    OPD_BENCH_DATA=~/data bench run --profile hf --suite gsm8k --model PATH

Where the data lives: `$OPD_BENCH_DATA/<benchmark>/`, default `~/.cache/opd-bench/data/<benchmark>/`
(`data_root()`), one sub-folder per benchmark named as its domain (`gsm8k`, `hendrycks_math`, `mbpp`,
`humaneval`). Nothing is downloaded: the machine running the benchmark may have no network, so the
user fetches each dataset once, e.g. `hf download openai/gsm8k --repo-type dataset --local-dir
$OPD_BENCH_DATA/gsm8k`, or puts `train.jsonl` / `test.jsonl` files there.

Which files: every `.parquet`, `.jsonl`, `.json` or `.csv` file under the folder (hidden folders such
as `hf download`'s `.cache` are skipped), or under its preferred configuration's sub-folder when there
is one (`gsm8k/main`, `mbpp/full`, as the Hub repositories lay them out). A file's split is the word
its name starts with (`train-00000-of-00001.parquet`, `test.jsonl`, `validation.jsonl`); a folder in
which no file names a split (`HumanEval.jsonl`) is all `test`. Files are read with `datasets`.

Splits: a benchmark's `test` split is the held-out split (the same for every method, as with the
generated suites; in a fixed shuffled order, so that a profile's first `eval_size` problems are a
uniform sample), its `train` split is what training draws from, its `validation` split (or, where
it has none, a fixed sample of its train split) is what a method may stop on. The hash-bucket rule of
the generated domains is not used: the benchmark's own split is the one results are compared on.
A benchmark without a train split (HumanEval) trains on another's (`Benchmark.train_from`, MBPP).

A domain here implements `tasks.base.Domain` plus `heldout_split(fmt)` and `validation_split(fmt)`,
which `tasks.suites.Suite` uses instead of drawing; difficulty has no meaning and is ignored.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tasks.base import Problem, UnknownSuiteError

DATA_ENV = "OPD_BENCH_DATA"
_BUILDERS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
_SPLITS = ("train", "validation", "test", "prompt")
VALIDATION_SAMPLE = 500


class MissingDataError(UnknownSuiteError):
    """A standard benchmark's data folder is missing or holds no data files; the message is one line."""


@dataclass(frozen=True)
class Benchmark:
    """One standard benchmark: where its files are and how a row becomes a `Problem`.

    Attributes:
        name: the domain name and the data sub-folder.
        hub_id: the Hugging Face dataset the files usually come from (for the missing-data message).
        to_problem: a row of the dataset (a dict) -> a `Problem` in the hf format.
        score: (completion, problem) -> 0.0 or 1.0, never raising.
        config_dir: the preferred sub-folder (a Hub configuration), used when present.
        train_from: the benchmark whose train and validation splits this one trains on (None: its own).
        parallel_score: its verifier waits on a subprocess, so `Suite.score_many` may run several at once.
    """

    name: str
    hub_id: str
    to_problem: Callable[[dict[str, Any]], Problem]
    score: Callable[[str, Problem], float]
    config_dir: str | None = None
    train_from: Benchmark | None = None
    parallel_score: bool = False


def data_root() -> Path:
    """$OPD_BENCH_DATA, default ~/.cache/opd-bench/data (under $OPD_BENCH_CACHE when that is set)."""
    from tasks.suites import cache_dir

    return Path(os.environ.get(DATA_ENV) or cache_dir() / "data").expanduser()


def data_folder(bench: Benchmark) -> Path:
    """The folder a benchmark's files are read from (its configuration's sub-folder when present)."""
    folder = data_root() / bench.name
    if bench.config_dir and (folder / bench.config_dir).is_dir():
        return folder / bench.config_dir
    return folder


def split_files(bench: Benchmark) -> dict[str, list[Path]]:
    """split -> its data files; raises a one-line `MissingDataError` when there are none."""
    folder = data_folder(bench)
    found: dict[str, list[Path]] = {}
    unnamed: list[Path] = []
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).parts
            if path.suffix not in _BUILDERS or any(p.startswith(".") for p in rel) or not path.is_file():
                continue
            word = re.match(r"[a-z]*", path.name.lower()).group(0)
            if word in _SPLITS:
                found.setdefault(word, []).append(path)
            else:
                unnamed.append(path)
    if not found and unnamed:
        found["test"] = unnamed
    if "test" not in found:
        where = data_root() / bench.name
        raise MissingDataError(
            f"no {bench.name} test data in {where} (set ${DATA_ENV} to a folder with a {bench.name}/ sub-folder); "
            f"get it with: hf download {bench.hub_id} --repo-type dataset --local-dir {where}")
    return found


@cache
def _load_rows(paths: tuple[Path, ...]) -> tuple[dict[str, Any], ...]:
    import datasets

    from tasks.suites import cache_dir

    builder = _BUILDERS[paths[0].suffix]
    if any(_BUILDERS[p.suffix] != builder for p in paths):
        raise MissingDataError(f"mixed file types in one split: {', '.join(map(str, paths))}")
    quiet = datasets.utils.are_progress_bars_disabled()
    datasets.utils.disable_progress_bars()  # a few files read once: no progress bars in a run's output
    try:
        dataset = datasets.load_dataset(builder, data_files=[str(p) for p in paths], split="train",
                                        cache_dir=str(cache_dir() / "hf-datasets"))
    finally:
        if not quiet:
            datasets.utils.enable_progress_bars()
    return tuple(dataset)


def load_split(bench: Benchmark, split: str) -> list[Problem]:
    """The problems of one split ([] when the benchmark has no such split)."""
    paths = split_files(bench).get(split)
    if not paths:
        return []
    return [bench.to_problem(dict(row)) for row in _load_rows(tuple(paths))]


def hf_only(name: str, fmt: str) -> None:
    """Refuse any prompt format but `hf`, in one line."""
    if fmt != "hf":
        raise UnknownSuiteError(f"{name} is a standard benchmark for real models: format hf only, not {fmt!r} "
                                f"(use --profile hf)")


class StandardDomain:
    """A `Domain` over one benchmark's files: trains on its train split, holds out its test split."""

    def __init__(self, bench: Benchmark) -> None:
        self.bench = bench
        self.name = bench.name
        self._train_bench = bench.train_from or bench
        self._train_problems: list[Problem] | None = None
        self.parallel_score = bench.parallel_score

    def config(self, difficulty: str, fmt: str) -> dict[str, Any]:
        hf_only(self.name, fmt)
        files = split_files(self.bench)
        if self.bench.train_from is not None:
            split_files(self.bench.train_from)  # the training data must be there too
        return {"benchmark": self.name, "train_from": self._train_bench.name,
                "files": {s: [p.name for p in paths] for s, paths in sorted(files.items())}}

    def _train(self) -> list[Problem]:
        if self._train_problems is None:
            problems = load_split(self._train_bench, "train")
            if not problems:
                raise MissingDataError(f"{self._train_bench.name} has no train split in "
                                       f"{data_folder(self._train_bench)}; {self.name} can be evaluated, "
                                       "not trained on")
            self._train_problems = [dataclasses.replace(p, domain=self.name) for p in problems]
        return self._train_problems

    def sample(self, rng: random.Random, difficulty: str, fmt: str) -> Problem:
        hf_only(self.name, fmt)
        return rng.choice(self._train())

    def heldout_split(self, fmt: str) -> list[Problem]:
        """The test split in a fixed shuffled order, so that the first N (a profile's `eval_size`) are a
        uniform sample rather than, for MATH read subject by subject, the first subjects only."""
        hf_only(self.name, fmt)
        problems = load_split(self.bench, "test")
        random.Random(f"opd-bench/heldout/{self.name}").shuffle(problems)
        return problems

    def validation_split(self, fmt: str) -> list[Problem]:
        """The validation split of the training benchmark, else a fixed sample of its train split."""
        hf_only(self.name, fmt)
        problems = load_split(self._train_bench, "validation")
        if problems:
            return [dataclasses.replace(p, domain=self.name) for p in problems]
        train = self._train()
        return random.Random(f"opd-bench/validation/{self.name}").sample(train, min(VALIDATION_SAMPLE, len(train)))

    def score(self, completion: str, problem: Problem) -> float:
        return self.bench.score(completion, problem)
