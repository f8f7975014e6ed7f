"""Suites: named sets of domains at one difficulty and format, with their train and held-out splits.

    suite = get_suite("math_code", "easy", "tiny")
    problems = suite.train_sampler(seed=0)          # endless, seeded, never yields a held-out prompt
    heldout = suite.heldout()                       # 1,000 prompts per domain, the same for everyone
    suite.score(problem, completion)                # 0.0 or 1.0

The split (docs/design.md, Tasks and worlds): a prompt belongs to the held-out space when a hash of its text falls in
one fixed bucket (`tasks.base.in_heldout_bucket`, 1/8 of prompt space). The train sampler draws from
the generators and rejects that bucket; the held-out split is drawn from a fixed seed per
(domain, difficulty, format), keeps only that bucket and drops duplicate prompts. Both come from one
distribution, neither depends on the method or run seed, and a domain's held-out split is the same in
every suite that contains it. `content_hash` pins the held-out prompts, answers and generator settings.

Held-out splits are cached in memory and as JSON lines under `cache_dir()` (keyed by the generator
settings, the source of the code that draws them and the reasoning-gym version).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import random
from collections.abc import Iterator, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tasks.base import DIFFICULTIES, FORMATS, Domain, Problem, check_choice, in_heldout_bucket

# Bump when a generator, prompt format or verifier changes what a suite means.
SUITE_VERSION = "2"
HELDOUT_PER_DOMAIN = 1000
# Held-out generation gives up after this many draws per kept problem (a sign of a tiny prompt space).
_MAX_DRAWS_PER_KEPT = 200

SUITES: dict[str, tuple[str, ...]] = {
    "math": ("math",),
    "code": ("code",),
    "logic": ("logic",),
    "strings": ("strings",),
    "graphs": ("graphs",),
    "math_code": ("math", "code"),
    "four_domain": ("math", "code", "graphs", "strings"),
}

# Standard benchmarks read from local files (`tasks.standard`; hf format only): each holds out its own test
# split. `humaneval` trains on MBPP (HumanEval has no train split); `std_math_code` is GSM8K and MBPP.
STANDARD_SUITES: dict[str, tuple[str, ...]] = {
    "gsm8k": ("gsm8k",),
    "hendrycks_math": ("hendrycks_math",),
    "mbpp": ("mbpp",),
    "humaneval": ("humaneval",),
    "std_math_code": ("gsm8k", "mbpp"),
}

_HELDOUT_CACHE: dict[tuple[str, str, str, int], list[Problem]] = {}
_VALIDATION_CACHE: dict[tuple[str, str, str], list[Problem]] = {}
VALIDATION_PER_DOMAIN = 500
# Most verifiers run at once by `Suite.score_many` for domains that score in a subprocess.
SCORE_THREADS = 8


# Third-party tasks arrive through entry points, like methods: `opd_bench.domains` names a Domain
# class ("module:Class"), which also becomes a one-domain suite of its name; `opd_bench.suites` names
# a tuple of domain names ("module:ATTRIBUTE"). Built-in names win over plugins of the same name.
DOMAIN_ENTRY_POINTS = "opd_bench.domains"
SUITE_ENTRY_POINTS = "opd_bench.suites"


@functools.cache
def _entry_points(group: str) -> tuple:
    """The installed entry points of a group, read once a process: reading them scans every installed
    distribution (~9 ms here), and each suite that is built asks five times."""
    return tuple(importlib.metadata.entry_points(group=group))


def plugin_domains() -> dict[str, str]:
    """Installed domain plugins: name -> "module:Class"."""
    return {ep.name: ep.value for ep in _entry_points(DOMAIN_ENTRY_POINTS)}


def all_suites() -> dict[str, tuple[str, ...]]:
    """The built-in suites (generated, then standard), then one per plugin domain, then the plugins' own."""
    suites = {**SUITES, **STANDARD_SUITES}
    for name in plugin_domains():
        suites.setdefault(name, (name,))
    for ep in _entry_points(SUITE_ENTRY_POINTS):
        if ep.name not in suites:
            domains = ep.load()
            if not (isinstance(domains, (tuple, list)) and domains and all(isinstance(d, str) for d in domains)):
                raise TypeError(f"suite plugin {ep.name} ({ep.value}) must be a non-empty tuple of domain names")
            suites[ep.name] = tuple(domains)
    return suites


def list_suites() -> list[str]:
    """Names of the registered suites (built-in and installed plugins)."""
    return list(all_suites())


def get_domain(name: str) -> Domain:
    """Instantiate a domain from the registry in `tasks/__init__.py` (lazy `module:Class`)."""
    import importlib

    import tasks

    registry = {**plugin_domains(), **tasks.DOMAINS}
    check_choice("domain", name, list(registry))
    module_name, _, class_name = registry[name].partition(":")
    domain = getattr(importlib.import_module(module_name), class_name)()
    if not isinstance(domain, Domain) or domain.name != name:
        raise TypeError(f"{registry[name]} does not implement the Domain protocol as {name!r}")
    return domain


def get_suite(name: str, difficulty: str = "easy", fmt: str = "tiny") -> Suite:
    """A registered suite at one difficulty and format; unknown values raise `UnknownSuiteError`."""
    suites = all_suites()
    check_choice("suite", name, list(suites))
    check_choice("difficulty", difficulty, DIFFICULTIES)
    check_choice("format", fmt, FORMATS)
    suite = Suite(name, difficulty, fmt, suites[name])
    suite.config()  # a domain without this format says so here, in one line
    return suite


def has_own_splits(domain: Domain) -> bool:
    """Whether a domain brings its own held-out and validation splits (a standard benchmark's files)."""
    return callable(getattr(domain, "heldout_split", None)) and callable(getattr(domain, "validation_split", None))


def cache_dir() -> Path:
    """Where materialised splits live: $OPD_BENCH_CACHE, default ~/.cache/opd-bench."""
    return Path(os.environ.get("OPD_BENCH_CACHE") or Path.home() / ".cache" / "opd-bench")


def generate_heldout(domain: Domain, difficulty: str, fmt: str, n: int = HELDOUT_PER_DOMAIN) -> list[Problem]:
    """The fixed held-out split of one domain: `n` distinct prompts from the held-out bucket."""
    rng = random.Random(f"opd-bench/heldout/{domain.name}/{difficulty}/{fmt}")
    seen: set[str] = set()
    out: list[Problem] = []
    for _ in range(n * _MAX_DRAWS_PER_KEPT):
        problem = domain.sample(rng, difficulty, fmt)
        if problem.prompt in seen or not in_heldout_bucket(problem.prompt):
            continue
        seen.add(problem.prompt)
        out.append(problem)
        if len(out) == n:
            return out
    raise RuntimeError(
        f"{domain.name}/{difficulty}/{fmt}: only {len(out)} distinct held-out prompts after "
        f"{n * _MAX_DRAWS_PER_KEPT} draws; the generator's prompt space is too small"
    )


def _source_key(domain: Domain, difficulty: str, fmt: str) -> str:
    """Everything a held-out split depends on: settings, the code that draws and splits, versions."""
    import importlib.metadata
    import inspect

    files = {inspect.getfile(type(domain)), __file__}
    files |= {str(Path(__file__).with_name(name)) for name in ("base.py", "rg.py")}
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(Path(path).read_bytes())
    try:
        rg_version = importlib.metadata.version("reasoning-gym")
    except importlib.metadata.PackageNotFoundError:
        rg_version = "none"
    header = [SUITE_VERSION, domain.name, difficulty, fmt, HELDOUT_PER_DOMAIN, rg_version,
              domain.config(difficulty, fmt)]
    h.update(json.dumps(header, sort_keys=True).encode())
    return h.hexdigest()[:16]


def load_heldout(domain: Domain, difficulty: str, fmt: str) -> list[Problem]:
    """`generate_heldout`, through a JSON-lines cache in `cache_dir()/heldout` keyed by `_source_key`.

    The hf splits take ~20 s to draw (reasoning-gym), the tiny ones ~0.5 s a domain; a run, a
    listing and an export should not pay that each time. A file that does not read back whole is
    drawn again.
    """
    path = cache_dir() / "heldout" / f"{domain.name}-{difficulty}-{fmt}-{_source_key(domain, difficulty, fmt)}.jsonl"
    try:
        problems = [problem_from_record(json.loads(line)) for line in path.read_text("utf-8").splitlines()]
        if len(problems) == HELDOUT_PER_DOMAIN and all(p.domain == domain.name for p in problems):
            return problems
    except (OSError, ValueError, KeyError, TypeError):
        pass
    problems = generate_heldout(domain, difficulty, fmt)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = ({"domain": p.domain, "prompt": p.prompt, "answer": p.answer, "solution": p.solution,
                 "alt_solution": p.alt_solution, "meta": json.dumps(p.meta, sort_keys=True)} for p in problems)
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
        os.replace(tmp, path)  # atomic: a concurrent reader sees the old file or the whole new one
    except OSError:  # a read-only or full cache only costs time
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return problems


class Suite:
    """A list of domains at one difficulty and prompt format."""

    def __init__(self, name: str, difficulty: str, fmt: str, domains: Sequence[str]):
        self.name = name
        self.difficulty = difficulty
        self.fmt = fmt
        self.domains = tuple(domains)
        self.version = SUITE_VERSION
        self._domains = {d: get_domain(d) for d in self.domains}

    def __repr__(self) -> str:
        return f"Suite({self.name!r}, {self.difficulty!r}, {self.fmt!r}, domains={self.domains})"

    @property
    def id(self) -> str:
        """`name-difficulty-fmt`, e.g. `math_code-easy-tiny`."""
        return f"{self.name}-{self.difficulty}-{self.fmt}"

    def domain(self, name: str) -> Domain:
        return self._domains[check_choice(f"domain of suite {self.name}", name, self.domains)]

    def config(self) -> dict[str, Any]:
        """The generator settings of every domain (part of the content hash)."""
        return {d: dom.config(self.difficulty, self.fmt) for d, dom in self._domains.items()}

    def train_sampler(
        self,
        seed: int,
        domains: Sequence[str] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> Iterator[Problem]:
        """Endless seeded stream of training problems, none from the held-out bucket.

        Args:
            seed: run seed; the same seed gives the same stream.
            domains: restrict to these domains of the suite (default: all).
            weights: relative domain frequencies (default: uniform).
        """
        chosen = tuple(self.domains if domains is None else domains)
        for d in chosen:
            check_choice(f"domain of suite {self.name}", d, self.domains)
        if not chosen:
            raise ValueError("train_sampler needs at least one domain")
        w = [float((weights or {}).get(d, 1.0)) for d in chosen]
        if any(x < 0 for x in w) or sum(w) <= 0:
            raise ValueError(f"domain weights must be >= 0 with a positive sum, got {dict(zip(chosen, w))}")
        return self._train_stream(random.Random(f"opd-bench/train/{seed}"), chosen, w)

    def _train_stream(self, rng: random.Random, domains: tuple[str, ...], w: list[float]) -> Iterator[Problem]:
        while True:
            d = rng.choices(domains, weights=w, k=1)[0]
            problem = self._domains[d].sample(rng, self.difficulty, self.fmt)
            if has_own_splits(self._domains[d]) or not in_heldout_bucket(problem.prompt):
                yield problem

    def heldout(self, domain: str | None = None) -> list[Problem]:
        """The held-out split (cached): one domain's, or all domains' concatenated in suite order."""
        names = self.domains if domain is None else (self.domain(domain).name,)
        out: list[Problem] = []
        for d in names:
            if has_own_splits(self._domains[d]):
                out.extend(self._domains[d].heldout_split(self.fmt))
                continue
            key = (d, self.difficulty, self.fmt, HELDOUT_PER_DOMAIN)
            if key not in _HELDOUT_CACHE:
                _HELDOUT_CACHE[key] = load_heldout(self._domains[d], self.difficulty, self.fmt)
            out.extend(_HELDOUT_CACHE[key])
        return out

    def validation(self, domain: str) -> list[Problem]:
        """A fixed validation sample of one domain: `VALIDATION_PER_DOMAIN` distinct prompts drawn from
        the training distribution (never the held-out bucket) with a seed of its own.

        What a method may stop on (e.g. an expert's held-out-style plateau) without looking at the
        held-out split the leaderboard reports. Like training prompts, it may share prompts with a
        run's training stream.
        """
        name = self.domain(domain).name
        if has_own_splits(self._domains[name]):
            return self._domains[name].validation_split(self.fmt)
        key = (name, self.difficulty, self.fmt)
        if key not in _VALIDATION_CACHE:
            rng = random.Random(f"opd-bench/validation/{name}/{self.difficulty}/{self.fmt}")
            seen: set[str] = set()
            out: list[Problem] = []
            for _ in range(VALIDATION_PER_DOMAIN * _MAX_DRAWS_PER_KEPT):
                problem = self._domains[name].sample(rng, self.difficulty, self.fmt)
                if problem.prompt not in seen and not in_heldout_bucket(problem.prompt):
                    seen.add(problem.prompt)
                    out.append(problem)
                    if len(out) == VALIDATION_PER_DOMAIN:
                        break
            _VALIDATION_CACHE[key] = out
        return _VALIDATION_CACHE[key]

    def score(self, problem: Problem, completion: str) -> float:
        """1.0 if `completion` answers `problem` correctly, else 0.0; never raises on hostile text.

        A problem from a domain outside the suite is a caller's bug and raises `UnknownSuiteError`.
        """
        return self.domain(problem.domain).score(completion, problem)

    def score_many(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        """`score` of each (problem, completion) pair, in order.

        Domains whose verifier waits on a subprocess (`parallel_score = True`: the code benchmarks run
        each completion in a sandbox) are scored on a few threads at once; the rest in this thread.
        """
        pairs = list(zip(problems, completions, strict=True))
        if not any(getattr(self.domain(p.domain), "parallel_score", False) for p, _ in pairs):
            return [self.score(p, c) for p, c in pairs]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(SCORE_THREADS, os.cpu_count() or 1)) as pool:
            return list(pool.map(lambda pair: self.score(*pair), pairs))

    @cached_property
    def content_hash(self) -> str:
        """sha256 over the version, generator settings and held-out prompts + answers."""
        h = hashlib.sha256()
        header = {"version": self.version, "difficulty": self.difficulty, "fmt": self.fmt,
                  "domains": self.domains, "config": self.config()}
        h.update(json.dumps(header, sort_keys=True).encode())
        for p in self.heldout():
            h.update(json.dumps([p.domain, p.prompt, p.answer]).encode())
        return h.hexdigest()

    def heldout_records(self) -> list[dict[str, Any]]:
        """Held-out problems as flat JSON-friendly rows (`meta` as a JSON string)."""
        return [problem_record(p, f"{self.id}/{d}/{i}") for d in self.domains for i, p in enumerate(self.heldout(d))]


def problem_record(p: Problem, id: str) -> dict[str, Any]:
    """A `Problem` as a flat JSON-friendly row (`meta` as a JSON string): `problem_from_record`'s inverse."""
    return {"id": id, "domain": p.domain, "prompt": p.prompt, "answer": p.answer, "solution": p.solution,
            "alt_solution": p.alt_solution, "meta": json.dumps(p.meta, sort_keys=True)}


def problem_from_record(record: Mapping[str, Any]) -> Problem:
    """Rebuild a `Problem` from a `heldout_records()` row (as read back from parquet or jsonl)."""
    meta = record.get("meta") or "{}"
    return Problem(
        domain=str(record["domain"]),
        prompt=str(record["prompt"]),
        answer=str(record["answer"]),
        solution=str(record["solution"]),
        meta=json.loads(meta) if isinstance(meta, str) else dict(meta),
        alt_solution=str(record.get("alt_solution") or ""),
    )
