"""Suites: registry errors, the train/held-out split, determinism, hashes, datasets, listing."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import tasks
from tasks import DIFFICULTIES, HELDOUT_PER_DOMAIN, UnknownSuiteError, describe_suites, get_suite, list_suites
from tasks.base import HELDOUT_BUCKETS, in_heldout_bucket
from tasks.suites import generate_heldout, get_domain, load_heldout

REPO = Path(__file__).resolve().parents[2]


def test_registry_lists_suites_and_domains():
    assert list_suites() == ["math", "code", "logic", "strings", "graphs", "math_code", "four_domain",
                             "gsm8k", "hendrycks_math", "mbpp", "humaneval", "std_math_code"]
    assert set(tasks.DOMAINS) == {"math", "code", "logic", "strings", "graphs", "gsm8k", "hendrycks_math", "mbpp",
                                  "humaneval"}
    assert get_suite("four_domain").domains == ("math", "code", "graphs", "strings")
    assert get_suite("math_code", "hard", "hf").fmt == "hf"


@pytest.mark.parametrize("args,fragment", [
    (("mat",), "did you mean 'math'?"),
    (("math_cod",), "did you mean 'math_code'?"),
    (("math", "hrad"), "did you mean 'hard'?"),
    (("math", "easy", "hff"), "did you mean 'hf'?"),
    (("zzzz",), "known suites: math, code, logic, strings, graphs, math_code, four_domain"),
    (("math", "hrad"), "known difficulties: easy, medium, hard (did you mean 'hard'?)"),
])
def test_unknown_names_give_one_line_with_allowed_values(args, fragment):
    with pytest.raises(UnknownSuiteError) as info:
        get_suite(*args)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert fragment in message and "\n" not in message


def test_a_kind_of_several_words_is_plural_in_its_first():
    with pytest.raises(UnknownSuiteError, match=r"known domains of suite math_code: math, code \(did you mean"):
        get_suite("math_code").heldout("mat")


def test_unknown_domain_in_sampler_raises():
    with pytest.raises(UnknownSuiteError, match="did you mean 'code'"):
        next(get_suite("math_code").train_sampler(0, domains=["cod"]))
    with pytest.raises(UnknownSuiteError):
        next(get_suite("math").train_sampler(0, domains=["code"]))  # not in this suite


def test_heldout_is_1000_distinct_prompts_per_domain_all_in_the_bucket():
    suite = get_suite("four_domain", "easy", "tiny")
    heldout = suite.heldout()
    assert len(heldout) == 4 * HELDOUT_PER_DOMAIN >= 4000
    for domain in suite.domains:
        problems = suite.heldout(domain)
        assert len(problems) == HELDOUT_PER_DOMAIN
        assert all(p.domain == domain for p in problems)
        assert len({p.prompt for p in problems}) == len(problems)
        assert all(in_heldout_bucket(p.prompt) for p in problems)
        assert all(suite.score(p, p.answer) == 1.0 for p in problems)


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_train_and_heldout_are_disjoint(difficulty):
    suite = get_suite("four_domain", difficulty, "tiny")
    heldout = {p.prompt for p in suite.heldout()}
    train = list(itertools.islice(suite.train_sampler(seed=0), 20_000))
    assert not any(in_heldout_bucket(p.prompt) for p in train)
    assert not heldout & {p.prompt for p in train}


def test_bucket_is_about_one_eighth_of_prompt_space():
    dom = get_domain("math")
    import random

    rng = random.Random(3)
    prompts = {dom.sample(rng, "medium", "tiny").prompt for _ in range(20_000)}
    share = sum(map(in_heldout_bucket, prompts)) / len(prompts)
    assert abs(share - 1 / HELDOUT_BUCKETS) < 0.015


@pytest.mark.parametrize("domain", ["math", "code", "logic", "strings", "graphs"])
def test_train_and_heldout_share_one_distribution(domain):
    """Same answer-length and prompt-length profile; same mix of generators and sub-tasks."""
    suite = get_suite(domain, "medium", "tiny")
    heldout = suite.heldout()
    train = list(itertools.islice(suite.train_sampler(seed=1), 4000))

    def profile(problems):
        n = len(problems)
        return (sum(len(p.prompt) for p in problems) / n, sum(len(p.answer) for p in problems) / n,
                Counter(p.prompt[:2] for p in problems))

    (hp, ha, hc), (tp, ta, tc) = profile(heldout), profile(train)
    assert abs(hp - tp) / tp < 0.05 and abs(ha - ta) / ta < 0.05
    for key in set(hc) | set(tc):
        assert abs(hc[key] / len(heldout) - tc[key] / len(train)) < 0.05, key


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
@pytest.mark.parametrize("domain", ["math", "code", "logic", "strings", "graphs"])
def test_prompt_space_is_large_enough_that_nothing_recurs_often(domain, difficulty):
    train = list(itertools.islice(get_suite(domain, difficulty).train_sampler(seed=5), 3000))
    counts = Counter(p.prompt for p in train)
    assert len(counts) > 0.9 * len(train)
    assert counts.most_common(1)[0][1] <= 5


def test_train_sampler_is_seeded_and_restrictable():
    suite = get_suite("four_domain", "easy", "tiny")
    first = [p.prompt for p in itertools.islice(suite.train_sampler(seed=3), 50)]
    again = [p.prompt for p in itertools.islice(suite.train_sampler(seed=3), 50)]
    other = [p.prompt for p in itertools.islice(suite.train_sampler(seed=4), 50)]
    assert first == again and first != other
    only = list(itertools.islice(suite.train_sampler(seed=0, domains=["code", "graphs"]), 400))
    assert {p.domain for p in only} == {"code", "graphs"}
    mix = Counter(p.domain for p in itertools.islice(suite.train_sampler(seed=0), 4000))
    assert all(abs(mix[d] / 4000 - 0.25) < 0.04 for d in suite.domains)
    weighted = Counter(p.domain for p in itertools.islice(
        suite.train_sampler(seed=0, weights={"math": 3.0, "code": 1.0, "graphs": 0.0, "strings": 0.0}), 2000))
    assert weighted["graphs"] == weighted["strings"] == 0 and 0.7 < weighted["math"] / 2000 < 0.8
    with pytest.raises(ValueError):
        suite.train_sampler(seed=0, weights={d: 0.0 for d in suite.domains})


def test_a_domains_heldout_is_the_same_in_every_suite():
    assert get_suite("math", "easy").heldout() == get_suite("four_domain", "easy").heldout("math")
    assert get_suite("code", "easy").heldout() == get_suite("math_code", "easy").heldout("code")


def test_content_hash_is_stable_and_sensitive():
    a, b = get_suite("math", "easy"), get_suite("math", "easy")
    assert a.content_hash == b.content_hash and len(a.content_hash) == 64
    assert a.content_hash != get_suite("math", "medium").content_hash
    assert a.content_hash != get_suite("code", "easy").content_hash


def test_heldout_and_hash_do_not_depend_on_the_process(tmp_path):
    """Different PYTHONHASHSEED, fresh process: the same held-out split and hash."""
    code = "from tasks import get_suite; print(get_suite('math', 'easy').content_hash)"
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(REPO), "OPD_BENCH_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=120, check=True)
    assert out.stdout.strip() == get_suite("math", "easy").content_hash


def test_heldout_disk_cache_round_trips_and_recovers(tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path))
    dom = get_domain("strings")
    fresh = load_heldout(dom, "easy", "tiny")
    [path] = (tmp_path / "heldout").glob("strings-easy-tiny-*.jsonl")
    assert load_heldout(dom, "easy", "tiny") == fresh == generate_heldout(dom, "easy", "tiny")
    # It really reads the file: an edit shows up ...
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0].replace('"answer": "', '"answer": "Z')] + lines[1:]) + "\n")
    assert load_heldout(dom, "easy", "tiny")[0].answer.startswith("Z")
    # ... and a truncated or garbled file is drawn again.
    path.write_text("\n".join(lines[:10]) + "\n{not json")
    assert load_heldout(dom, "easy", "tiny") == fresh
    assert path.read_text().splitlines() == lines
    # Another difficulty or format is another file.
    load_heldout(dom, "medium", "tiny")
    assert len(list((tmp_path / "heldout").glob("*.jsonl"))) == 2


def test_describe_suites_lists_every_suite_and_difficulty():
    rows = [row for row in describe_suites() if row["data"] == "generated"]
    generated = [s for s in list_suites() if s not in tasks.STANDARD_SUITES]  # standard ones read local files
    assert len(rows) == len(generated) * len(DIFFICULTIES)
    for row in rows:
        suite = get_suite(row["suite"], row["difficulty"])
        assert row["domains"] == list(suite.domains)
        assert row["heldout_size"] == HELDOUT_PER_DOMAIN * len(suite.domains)
        assert row["content_hash"] == suite.content_hash
        problem = suite.heldout()[0]
        assert (row["example_prompt"], row["example_answer"]) == (problem.prompt, problem.answer)
    with pytest.raises(UnknownSuiteError):
        describe_suites(fmt="big")


@pytest.mark.slow
@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_hf_heldout_splits(difficulty):
    """hf held-out splits (reasoning-gym inside): ~10-20 s each on one core."""
    suite = get_suite("four_domain", difficulty, "hf")
    for domain in suite.domains:
        problems = suite.heldout(domain)
        assert len({p.prompt for p in problems}) == HELDOUT_PER_DOMAIN
        assert all(suite.score(p, p.solution) == 1.0 and suite.score(p, p.answer) == 1.0 for p in problems)
