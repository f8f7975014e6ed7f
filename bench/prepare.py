"""`bench prepare`: the shared base student and the external teacher of a profile, built once and cached.

tiny profile (DESIGN section 5):
- base student: the tiny student architecture after a short supervised warm-up on short answers of all
  four domains, with some answers deliberately wrong (`label_noise`) so that the base is imperfect and
  sampling finds better answers than greedy decoding (room for RL). Its FLOPs are booked `shared`.
- external teacher: a >= 4x larger model trained longer on verbose worked solutions, so that, like a
  real post-trained teacher, it is stronger and writes longer answers. Its FLOPs are booked `external`.

Both are deterministic (seeded) and cached under `$OPD_BENCH_CACHE/prepared/`; the cache key covers
the specs, the warm-up settings and the suite's content hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.context import sft_step
from bench.ledger import Ledger, ledger_context
from bench.models import build_tiny, cache_root, load_model, save_model, state_digest, TINY_SPECS
from bench.policy import Policy
from bench.profiles import Profile, WarmupConfig
from bench.registry import get_suite

WARMUP_SUITE = "four_domain"


@dataclass
class Prepared:
    folder: Path
    info: dict

    def load_student(self) -> tuple[Any, Any]:
        return load_model(self.folder / "student")

    def load_teacher(self, name: str, ledger: Ledger) -> Policy:
        if name != "external":
            raise KeyError(f"no prepared teacher {name!r}; prepared teachers: external")
        model, tokenizer = load_model(self.folder / "external")
        return Policy("external", model, tokenizer, ledger=ledger, trainable=False)

    def ledger_rows(self) -> list[dict]:
        return self.info["ledger"]

    def model_hashes(self) -> dict[str, str]:
        return self.info["model_hashes"]


def _key(profile: Profile, config: WarmupConfig, suite_hash: str) -> str:
    payload = {
        "profile": profile.name,
        "student": dataclasses.asdict(TINY_SPECS[profile.student]),
        "teacher": dataclasses.asdict(TINY_SPECS[profile.teacher]),
        "warmup": dataclasses.asdict(config),
        "suite": suite_hash,
        "version": 1,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def prepare(profile: Profile, *, progress: bool = True) -> Prepared:
    """Build (or find in the cache) the profile's base student and external teacher."""
    config = profile.warmup
    suite = get_suite(WARMUP_SUITE, config.difficulty, profile.task_format)
    folder = cache_root() / "prepared" / f"{profile.name}-{_key(profile, config, suite.content_hash)}"
    info_path = folder / "prepared.json"
    if info_path.exists():
        return Prepared(folder, store.read_json(info_path))
    ledger = Ledger()
    rng = random.Random(config.seed)
    with ledger_context(category="shared", phase="warmup"):
        student = _train(profile.student, "base", suite, config.student_steps, config.student_lr,
                         config, ledger, rng, verbose=False, noise=config.label_noise, progress=progress)
    with ledger_context(category="external", phase="external"):
        teacher = _train(profile.teacher, "external", suite, config.teacher_steps, config.teacher_lr,
                         config, ledger, rng, verbose=True, noise=0.0, progress=progress)
    save_model(student.model, student.tokenizer, folder / "student")
    save_model(teacher.model, teacher.tokenizer, folder / "external")
    info = {
        "profile": profile.name,
        "warmup": dataclasses.asdict(config),
        "suite_hash": suite.content_hash,
        "ledger": [
            {k: r[k] for k in ("category", "phase", "kind", "model", "flops", "tokens")} for r in ledger.rows()
        ],
        "model_hashes": {"base": state_digest(student.model), "external": state_digest(teacher.model)},
    }
    store.write_json(info_path, info)
    return Prepared(folder, info)


def _train(spec_name: str, name: str, suite: Any, steps: int, lr: float, config: WarmupConfig,
           ledger: Ledger, rng: random.Random, *, verbose: bool, noise: float, progress: bool) -> Policy:
    from bench.evaluation import progress as bar_ctx

    model, tokenizer = build_tiny(TINY_SPECS[spec_name])
    policy = Policy(name, model, tokenizer, ledger=ledger)
    sampler = suite.train_sampler(config.seed + (1 if verbose else 0))
    torch.manual_seed(config.seed)
    with bar_ctx(steps, enabled=progress, label=f"prepare {name}") as bar:
        for step in range(steps):
            problems = [next(sampler) for _ in range(config.batch_size)]
            targets = [p.solution if verbose else _noisy(p.answer, noise, rng) for p in problems]
            loss = sft_step(policy, [p.prompt for p in problems], targets, lr=lr * _cosine(step, steps))
            bar.progress and bar.progress.update(bar.task, completed=step + 1, flops=f"step {step + 1}",
                                                 acc=f"loss {loss:.3f}")
    policy.model.eval()
    return policy


def _cosine(step: int, steps: int) -> float:
    import math

    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(steps, 1)))


def _noisy(answer: str, noise: float, rng: random.Random) -> str:
    """With probability `noise`, a plausible wrong answer (one digit or letter changed)."""
    if rng.random() >= noise or not answer:
        return answer
    i = rng.randrange(len(answer))
    ch = answer[i]
    if ch.isdigit():
        repl = str((int(ch) + rng.randint(1, 9)) % 10)
    elif ch.isalpha():
        repl = rng.choice([c for c in "abcdefghijklmnopqrstuvwxyz" if c != ch.lower()])
    else:
        return answer
    return answer[:i] + repl + answer[i + 1 :]
