"""`bench prepare`'s imperfect warm-up data and its calibration figures."""

from __future__ import annotations

import random

from bench.world.prepare import format_calibration, prepare
from bench.world.profiles import WarmupConfig
from bench.world.warmup import _mistake, _warmup_answer, base_rule
from tasks import get_suite


def _problems(domain: str, n: int = 200):
    it = get_suite(domain, "easy", "tiny").train_sampler(seed=3)
    return [next(it) for _ in range(n)]


def test_mistake_is_wrong_plausible_and_systematic():
    for domain in ("math", "code", "graphs", "strings"):
        dom = get_suite(domain, "easy", "tiny").domain(domain)
        for p in _problems(domain):
            wrong = _mistake(p)
            assert dom.score(wrong, p) == 0.0, (p.prompt, p.answer, wrong)
            assert len(wrong) == len(p.answer) and wrong[:-1] == p.answer[:-1]
            assert _mistake(p) == wrong  # the same mistake every time: a habit the base can learn


def test_warmup_answers_mix_answer_and_mistake_at_the_configured_rate():
    config = WarmupConfig(mistake_rate=0.5, label_noise=0.0)
    rng = random.Random(0)
    problems = _problems("math", 2000)
    targets = [_warmup_answer(p, config, config.label_noise, rng) for p in problems]
    right = sum(t == p.answer for t, p in zip(targets, problems))
    mistaken = sum(t == _mistake(p) for t, p in zip(targets, problems))
    assert right + mistaken == len(problems)
    assert 0.45 < mistaken / len(problems) < 0.55


def test_prepare_stores_and_formats_calibration_figures(fast_profile):
    prepared = prepare(fast_profile, progress=False)
    rows = prepared.calibration()
    assert [r["domain"] for r in rows] == ["math", "code", "graphs", "strings"]
    for r in rows:
        for key in ("base_pass1", "base_pass8", "base_sample_acc", "teacher_pass1"):
            assert 0.0 <= r[key] <= 1.0
        assert r["base_pass8"] >= r["base_sample_acc"]  # pass@8 is at least the mean of its samples
        assert r["base_length"] >= 1 and r["teacher_length"] >= 1
    lines = format_calibration(rows)
    assert len(lines) == 5 and lines[1].startswith("math")


def test_the_external_teacher_is_built_on_first_use_and_booked_once(fast_profile, tmp_path, monkeypatch):
    from bench.accounting.ledger import Ledger

    monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path))  # a cold cache: nothing prepared yet
    prepared = prepare(fast_profile, progress=False, teacher=False)
    assert prepared.teacher_info() is None and not (prepared.folder / "external").exists()
    assert set(prepared.model_hashes()) == {"base"}
    assert "teacher_pass1" not in prepared.calibration()[0]
    assert "—" in format_calibration(prepared.calibration())[1]
    ledger = Ledger()
    teacher = prepared.load_teacher("external", ledger)
    info = prepared.teacher_info()
    assert info is not None and set(prepared.model_hashes()) == {"base", "external"}
    assert ledger.total("external") == sum(r["flops"] for r in info["ledger"]) > 0
    assert ledger.counted_flops == 0  # recorded, never counted
    prepared.load_teacher("external", ledger)  # a resumed run asks again: not booked twice
    assert ledger.total("external") == sum(r["flops"] for r in info["ledger"])
    assert teacher.trainable is False and "teacher_pass1" in prepared.calibration()[0]


def test_the_base_is_the_same_whatever_the_thread_count(fast_profile, tmp_path, monkeypatch):
    """The cache key cannot see torch's thread count, so the warm-up must not depend on it."""
    import dataclasses

    import torch

    # The real warm-up's batch: big enough that two threads split its matmuls (at 32 they do not).
    profile = dataclasses.replace(fast_profile, warmup=dataclasses.replace(fast_profile.warmup, batch_size=64))
    digests = []
    for threads in (1, 2):
        monkeypatch.setenv("OPD_BENCH_CACHE", str(tmp_path / f"t{threads}"))
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            digests.append(prepare(profile, progress=False, teacher=False).model_hashes()["base"])
            assert torch.get_num_threads() == threads  # prepare gives the caller's setting back
        finally:
            torch.set_num_threads(before)
    assert digests[0] == digests[1]


def test_the_base_rule_wants_every_domain_sampled_both_ways_and_greedy_apart():
    def rows(*figures):
        return [{"domain": str(i), "base_pass1": g, "base_sample_acc": s} for i, (g, s) in enumerate(figures)]

    # the worked world's chosen base, step 1,500 (docs/world.md): both hold
    assert base_rule(rows((0.414, 0.309), (0.18, 0.134), (0.376, 0.174), (0.504, 0.527)))["met"]
    # its step 1,250 of the uniform-strings run: code and graphs sampled right under 10% of the time
    assert base_rule(rows((0.302, 0.163), (0.176, 0.078), (0.186, 0.08), (0.318, 0.267))) == {
        "spread": False, "room": True, "met": False}
    # every domain sampled both ways, but no greedy figure at 20% or less
    assert base_rule(rows((0.422, 0.285), (0.212, 0.134), (0.502, 0.316), (0.6, 0.522))) == {
        "spread": True, "room": False, "met": False}
    assert not base_rule(rows((0.95, 0.95), (0.1, 0.2)))["spread"]  # above 90%: no unrewarded sample


def test_a_gpu_worlds_warmup_trains_with_tf32_as_its_prepare_does(monkeypatch):
    """A warm-up curve (gpu_check's, benchmarks/warmup_curve.py) calls `warm_up` without `bench
    prepare`: it sets the same matmul precision itself, or checkpoint N of the curve would not be the
    training an N-step `bench prepare` does on a GPU. A CPU world leaves the setting alone."""
    import torch

    from bench.accounting.ledger import Ledger
    from bench.world import warmup
    from bench.world.profiles import PROFILES

    seen = []
    monkeypatch.setattr(warmup, "_train", lambda *args, **kwargs: seen.append(torch.get_float32_matmul_precision()))
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        warmup.warm_up(PROFILES["smoke"], "base", Ledger(), progress=False)
        warmup.warm_up(PROFILES["gpu-small"], "base", Ledger(), progress=False)
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == ["highest", "high"]


def test_every_model_of_a_gpu_world_loads_on_its_device(monkeypatch, tmp_path):
    """The base, the external teacher and a `--teacher NAME=PATH` teacher all load where the world
    runs (`gpu-small`: cuda), never on the CPU beside a student on the GPU."""
    from bench.accounting.ledger import Ledger
    from bench.world import prepare as prep
    from bench.world.profiles import PROFILES

    devices = []

    def load(folder, device="cpu"):
        devices.append(device)
        raise RuntimeError("loaded")

    monkeypatch.setattr(prep, "load_model", load)
    (tmp_path / "student").mkdir()
    (tmp_path / "prepared.json").write_text("{}")
    prepared = prep.Prepared(tmp_path, {}, PROFILES["gpu-small"], extra_teachers={"expert": tmp_path})
    for call in (lambda: prepared.load_teacher("expert", Ledger()),
                 lambda: prepared._load_verified("student", "base", "0", "prepared.json")):
        try:
            call()
        except RuntimeError as exc:
            assert str(exc) == "loaded"
    assert devices == ["cuda", "cuda"]
