"""`bench prepare`: the shared base student and the external teacher of a profile, built once and cached.

tiny profile (DESIGN section 5):
- base student: the tiny student architecture after a supervised warm-up on short answers of all four
  domains, on imperfect data: a share `mistake_rate` of the answers carry one systematic, plausible
  mistake (the last character shifted: 355 -> 356, abcd -> abce, a flipped last truth-table bit) and a
  share `label_noise` one random wrong character. Learning the rule well but being unsure between the
  right answer and the habitual mistake leaves greedy decoding often wrong while sampling finds the
  right answer (pass@8 well above pass@1): room for RL to sharpen. Its FLOPs are booked `shared`.
- external teacher: a >= 4x larger model trained longer on verbose worked solutions, so that, like a
  real post-trained teacher, it is stronger and writes longer answers. Its FLOPs are booked `external`.

Both are deterministic (seeded) and cached under `$OPD_BENCH_CACHE/prepared/`; the cache key covers
the specs, the warm-up settings and the suite's content hash. `prepared.json` also holds calibration
figures per domain (`calibrate`): base greedy pass@1, base pass@8 at temperature 1, the external
teacher's greedy pass@1 and mean lengths, so that a user sees how much room the tiny world leaves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import time
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
        "version": 2,
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
    started = time.perf_counter()
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
        "calibration": calibrate(student, teacher, suite, profile),
        "wall_s": round(time.perf_counter() - started, 1),  # training and calibration, this machine
    }
    store.write_json(info_path, info)
    return Prepared(folder, info)


def _train(spec_name: str, name: str, suite: Any, steps: int, lr: float, config: WarmupConfig,
           ledger: Ledger, rng: random.Random, *, verbose: bool, noise: float, progress: bool) -> Policy:
    from bench.evaluation import progress as bar_ctx

    model, tokenizer = build_tiny(TINY_SPECS[spec_name])
    policy = Policy(name, model, tokenizer, ledger=ledger)
    weights = {d: w for d, w in config.domain_weights if d in suite.domains} or None
    sampler = suite.train_sampler(config.seed + (1 if verbose else 0), weights=weights)
    torch.manual_seed(config.seed)
    with bar_ctx(steps, enabled=progress, label=f"prepare {name}") as bar:
        for step in range(steps):
            problems = [next(sampler) for _ in range(config.batch_size)]
            targets = [p.solution if verbose else _warmup_answer(p, config, noise, rng) for p in problems]
            loss = sft_step(policy, [p.prompt for p in problems], targets, lr=lr * _cosine(step, steps))
            bar.show(step + 1, f"step {step + 1}", f"loss {loss:.3f}")
    policy.model.eval()
    return policy


def _cosine(step: int, steps: int) -> float:
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(steps, 1)))


def _warmup_answer(problem: Any, config: WarmupConfig, noise: float, rng: random.Random) -> str:
    """The student's warm-up target: the answer, its systematic mistake, or a randomly corrupted one."""
    if rng.random() < config.mistake_rate:
        return _mistake(problem)
    return _noisy(problem.answer, noise, rng)


def _mistake(problem: Any) -> str:
    """The habitual mistake: the answer's last character shifted by one (a bit flipped in logic)."""
    answer = problem.answer
    if not answer:
        return answer
    ch = answer[-1]
    if problem.domain == "logic" and ch in "01":
        repl = "1" if ch == "0" else "0"
    elif ch.isdigit():
        repl = str((int(ch) + 1) % 10)
    elif "a" <= ch <= "z":
        repl = chr((ord(ch) - ord("a") + 1) % 26 + ord("a"))
    else:
        return answer
    return answer[:-1] + repl


def calibrate(student: Policy, teacher: Policy, suite: Any, profile: Profile, *, greedy_size: int = 500,
              sample_size: int = 200, k: int = 8) -> list[dict]:
    """Per domain: base greedy pass@1, base pass@k at temperature 1, teacher greedy pass@1, mean lengths.

    Evaluation-only (booked `eval`); greedy on the first `greedy_size` held-out prompts, sampling on the
    first `sample_size` (both at most the profile's eval_size, so a test profile stays fast).
    """
    from bench.evaluation import Evaluator
    from bench.ledger import ledger_context
    from bench.rollout import TorchRollout

    greedy_size, sample_size = min(greedy_size, profile.eval_size), min(sample_size, profile.eval_size)
    evaluator = Evaluator(suite, greedy_size, profile.eval_max_new_tokens)
    base, external = evaluator.evaluate(student), evaluator.evaluate(teacher)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for domain in suite.domains:
        problems = suite.heldout(domain)[:sample_size]
        with ledger_context(category="eval", phase="eval"):
            batch = TorchRollout().generate(
                student.model, [student.encode(p.prompt) for p in problems], n=k,
                max_new_tokens=profile.max_new_tokens, temperature=1.0, eos_id=student.eos_id,
                pad_id=student.pad_id, generator=generator,
            )
        texts = [student.decode(ids) for ids in batch.completion_ids]
        hits = torch.tensor([suite.score(p, t) for p, t in zip((p for p in problems for _ in range(k)), texts)])
        hits = hits.view(len(problems), k)  # [prompts, k]
        rows.append({
            "domain": domain,
            "base_pass1": base["domain_accuracy"][domain],
            f"base_pass{k}": float(hits.max(1).values.mean()),
            "base_sample_acc": float(hits.mean()),
            "base_length": base["domain_mean_length"][domain],
            "teacher_pass1": external["domain_accuracy"][domain],
            "teacher_length": external["domain_mean_length"][domain],
        })
    return rows


def format_calibration(rows: list[dict]) -> list[str]:
    """The calibration figures as aligned text lines (what `bench prepare` prints)."""
    head = f"{'domain':<8} {'base@1':>7} {'base@8':>7} {'sample':>7} {'len':>5} {'teacher@1':>9} {'t.len':>6}"
    lines = [head]
    for r in rows:
        lines.append(f"{r['domain']:<8} {100 * r['base_pass1']:6.1f}% {100 * r['base_pass8']:6.1f}% "
                     f"{100 * r['base_sample_acc']:6.1f}% {r['base_length']:5.1f} {100 * r['teacher_pass1']:8.1f}% "
                     f"{r['teacher_length']:6.1f}")
    return lines


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
