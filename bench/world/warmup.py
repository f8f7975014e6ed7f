"""The warm-up recipe of a built-in world's models: supervised training from scratch on the four
domains' prompts, the base student on its answers (some with a habitual mistake or random noise),
the external teacher on worked solutions. `bench prepare` (`bench.world.prepare`) runs it and caches
what it builds; `benchmarks/warmup_curve.py` runs it checkpointed, to choose a recipe's length.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.accounting.ledger import Ledger, ledger_context
from bench.policy import Policy
from bench.progress import progress as progress_bar
from bench.registry import get_suite
from bench.update import sft_step
from bench.world.models import TINY_SPECS, build_tiny
from bench.world.profiles import Profile, WarmupConfig

WARMUP_SUITE = "four_domain"


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Train on one thread, so that a warm-up's float sums add up in one order on every machine.

    The cache key cannot see the thread count: with two threads the same recipe gave a base at 5%
    greedy on code where one thread gives 48%, the figure a 16-core machine also gets with one thread.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


WARMUP_LEDGER = {"base": ("shared", "warmup"), "external": ("external", "external")}  # category, phase


def matmul_precision(profile: Profile) -> None:
    """A GPU world trains and runs in fp32 with TF32 matmuls, set process-wide before its first matmul
    by whatever trains or evaluates it (`bench prepare`, `bench run`'s prepare, a warm-up curve), so
    that a curve's checkpoint N and an N-step `bench prepare` are the same training. A CPU world
    leaves the setting as it is."""
    if profile.device == "cuda":
        torch.set_float32_matmul_precision("high")


def warm_up(profile: Profile, part: str, ledger: Ledger, *, progress: bool, on_step: Any = None,
            resume: dict | None = None, log: Path | None = None) -> Policy:
    """Train the profile's base student (`part` "base") or external teacher ("external") by its recipe,
    on one thread, charging `ledger` under the part's category and phase (`WARMUP_LEDGER`).
    `on_step(step, policy, loss)` after every step (benchmarks/warmup_curve.py's checkpoints).
    `resume` (`train_state`'s dict of a checkpoint along the same recipe) continues from its step with
    the bytes an uninterrupted run would have (with the constant schedule). `log`: a file that gets a
    stamped line at each tenth of the steps, and after a minute without one."""
    matmul_precision(profile)
    config = profile.warmup
    suite = get_suite(WARMUP_SUITE, config.difficulty, profile.task_format)
    category, phase = WARMUP_LEDGER[part]
    # it seeds torch's global RNG: a caller's (a run building its world's models) is given back after
    cuda = list(range(torch.cuda.device_count())) if profile.device == "cuda" or torch.cuda.is_initialized() else []
    with ledger_context(category=category, phase=phase), single_threaded(), torch.random.fork_rng(devices=cuda):
        if part == "base":
            return _train(profile.student, "base", suite, config.student_steps, config.student_lr, config,
                          ledger, random.Random(config.seed), teacher=False, noise=config.label_noise,
                          progress=progress, on_step=on_step, resume=resume, device=profile.device, log=log)
        return _train(profile.teacher, "external", suite, config.teacher_steps, config.teacher_lr, config,
                      ledger, random.Random(config.seed + 1), teacher=True, noise=0.0, progress=progress,
                      on_step=on_step, resume=resume, device=profile.device, log=log)


def train_state(policy: Policy, step: int) -> dict:
    """What a warm-up needs to continue from `step`: weights, optimiser state and torch's RNG."""
    return {"step": step, "policy": policy._state(), "torch_rng": torch.get_rng_state()}


def _train(spec_name: str, name: str, suite: Any, steps: int, lr: float, config: WarmupConfig,
           ledger: Ledger, rng: random.Random, *, teacher: bool, noise: float, progress: bool,
           on_step: Any = None, resume: dict | None = None, device: str = "cpu", log: Path | None = None) -> Policy:
    """`on_step(step, policy)` after every step: a calibration's checkpoints along one run."""
    model, tokenizer = build_tiny(TINY_SPECS[spec_name])
    policy = Policy(name, model.to(device), tokenizer, ledger=ledger)
    mix = config.teacher_domain_weights if teacher else config.domain_weights
    weights = {d: w for d, w in mix if d in suite.domains} or None
    sampler = suite.train_sampler(config.seed + (1 if teacher else 0), weights=weights)
    target = config.teacher_target if teacher else config.student_target
    torch.manual_seed(config.seed)
    start = 0
    if resume is not None:
        start = resume["step"]
        for _ in range(start * config.batch_size):  # the data streams where the checkpoint left them
            _target(next(sampler), target, config, noise, rng)
        policy._load_state(resume["policy"])
        torch.set_rng_state(resume["torch_rng"])
    with progress_bar(steps, enabled=progress, label=f"prepare {name}", log=log, tenths=True) as bar:
        for step in range(start, steps):
            problems = [next(sampler) for _ in range(config.batch_size)]
            targets = [_target(p, target, config, noise, rng) for p in problems]
            loss = sft_step(policy, [p.prompt for p in problems], targets, lr=lr * _schedule(config, step, steps))
            bar.show(step + 1, f"step {step + 1}", f"loss {loss:.3f}")
            if on_step is not None:
                on_step(step + 1, policy, loss)
    return policy


def _target(problem: Any, kind: str, config: WarmupConfig, noise: float, rng: random.Random) -> str:
    """What a warm-up trains on: the direct answer (with its mistakes), or a worked solution's text."""
    if kind == "answer":
        return _warmup_answer(problem, config, noise, rng)
    if kind == "solution":
        return problem.solution
    if kind == "alt_solution":
        return problem.alt_solution or problem.solution
    raise ValueError(f"unknown warm-up target {kind!r}; allowed: answer, solution, alt_solution")


def _schedule(config: WarmupConfig, step: int, steps: int) -> float:
    """The learning-rate factor of `step` (0-based) of `steps`."""
    if config.schedule == "constant":
        return min(1.0, (step + 1) / 100)
    return _cosine(step, steps)


def _cosine(step: int, steps: int) -> float:
    return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / max(steps, 1)))


def _warmup_answer(problem: Any, config: WarmupConfig, noise: float, rng: random.Random) -> str:
    """The student's warm-up target: the answer, its systematic mistake, or a randomly corrupted one."""
    if rng.random() < config.mistake_rate:
        return _mistake(problem)
    return _noisy(problem.answer, noise, rng)


def _mistake(problem: Any) -> str:
    """The habitual mistake: the answer's last character shifted by one."""
    answer = problem.answer
    if not answer:
        return answer
    ch = answer[-1]
    if ch.isdigit():
        repl = str((int(ch) + 1) % 10)
    elif "a" <= ch <= "z":
        repl = chr((ord(ch) - ord("a") + 1) % 26 + ord("a"))
    else:
        return answer
    return answer[:-1] + repl


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


def base_rule(calibration: list[dict]) -> dict[str, bool]:
    """The rule that chooses a world's base along a warm-up (docs/world.md, Calibration), on
    `calibrate`'s rows of one checkpoint: `spread`, every domain's mean sample accuracy at temperature 1
    between 10% and 90% (a group of 8 samples then holds a rewarded and an unrewarded one more than half
    the time); `room`, some domain's greedy pass@1 at least 30% and another's at most 20%. The base is
    the first checkpoint where both hold."""
    greedy = [row["base_pass1"] for row in calibration]
    spread = all(0.1 <= row["base_sample_acc"] <= 0.9 for row in calibration)
    room = bool(greedy) and max(greedy) >= 0.3 and min(greedy) <= 0.2
    return {"spread": spread, "room": room, "met": spread and room}


def calibration_figures(calibration: list[dict]) -> dict:
    """One checkpoint's `calibrate` rows as a warm-up curve records them: per domain its figures
    (greedy pass@1, pass@k and mean sample accuracy at temperature 1, mean length) to 3 decimals, and
    `base_rule` on them."""
    figures = {r["domain"]: {k: round(v, 3) for k, v in r.items() if k != "domain"} for r in calibration}
    return {"calibration": figures, "base_rule": base_rule(calibration)}
