"""Profiles: which models, token limits, budgets and evaluation sizes a run uses by default.

`tiny` (default) runs on a CPU in minutes with models this project builds itself (`bench prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class WarmupConfig:
    # Calibrated for the tiny profile (issue #4; benchmarks/calibration_sweep.py chose the recipe):
    # 4,500 steps of 64 on math, code, graphs and strings, half the answers with the systematic mistake,
    # trained on one thread (bench.prepare.single_threaded), give a base at 37-52% greedy per domain
    # (pass@8 88-96%), from which each GRPO expert gains 30+ points in 4.5e11 FLOPs (README). 3,000
    # steps were too few: whether math and code were learnt at all then turned on the data mix.
    student_steps: int = 4500
    teacher_steps: int = 900
    batch_size: int = 64
    student_lr: float = 3e-3
    teacher_lr: float = 2e-3
    label_noise: float = 0.0  # share of the student's warm-up answers with one random wrong character
    # Share with the systematic mistake (last character shifted, bench.prepare): greedy decoding then
    # often picks the mistake while sampling finds the answer (pass@8 >> pass@1), once the rule is learnt.
    mistake_rate: float = 0.5
    # Relative frequency of each domain in the warm-up, e.g. (("math", 3.0), ("code", 3.0)); () = uniform.
    domain_weights: tuple[tuple[str, float], ...] = ()
    difficulty: str = "easy"
    seed: int = 0


@dataclass(frozen=True)
class Profile:
    name: str
    task_format: str  # the suites' prompt format
    student: str  # tiny spec name or model folder of the untrained student architecture
    teacher: str  # architecture of the external teacher
    max_new_tokens: int  # rollout limit for methods
    eval_max_new_tokens: int  # evaluation limit (long enough for a verbose teacher-style answer)
    budget_flops: float  # default training budget, counted FLOPs
    eval_size: int  # held-out prompts per domain at each milestone
    description: str
    warmup: WarmupConfig = field(default_factory=WarmupConfig)


PROFILES: dict[str, Profile] = {
    "tiny": Profile(
        name="tiny",
        task_format="tiny",
        student="tiny-llama",
        teacher="tiny-llama-teacher",
        # Worked solutions (the external teacher's style) run to ~63 characters plus `#answer`.
        max_new_tokens=64,
        eval_max_new_tokens=64,
        budget_flops=2e12,  # ~2 minutes of training on one core (~1.5e10 FLOP/s achieved)
        eval_size=1000,
        description="CPU, minutes: ~0.4M-parameter student, ~1.8M external teacher, built locally",
    ),
}

# `smoke`: `tiny` shrunk for checks and CI (`bench check-adapter`, the plugin and lm-eval tests). Built
# from `tiny` so that it follows any change to tiny's models and token limits.
from dataclasses import replace as _replace  # noqa: E402

PROFILES["smoke"] = _replace(
    PROFILES["tiny"],
    name="smoke",
    budget_flops=2e11,
    eval_size=32,
    description="checks and CI: tiny models after a 30-step warm-up, a 2e11-FLOP budget",
    warmup=WarmupConfig(student_steps=30, teacher_steps=30, batch_size=32),
)

# `hf`: real models. The student is `--model PATH` (any local HF causal LM folder), teachers come from
# `--external PATH` / `--teacher DOMAIN=PATH`; prompts are chat-formatted natural language.
PROFILES["hf"] = Profile(
    name="hf",
    task_format="hf",
    student="",
    teacher="",
    max_new_tokens=512,
    eval_max_new_tokens=512,
    budget_flops=1e17,
    eval_size=1000,
    description="real models: a local HF causal LM (--model), chat prompts, bf16 on CUDA (--device cuda)",
)
