"""Profiles: which models, token limits, budgets and evaluation sizes a run uses by default.

Worlds that run on a CPU with models this project builds itself (`bench prepare`):
- `tiny` (default): the worked-answer world. Answers are worked step by step over 22-60 tokens and
  rewarded on the final answer only; the base is a ~1.3M student warmed up on worked solutions for
  fewer steps than it needs to master them, so its mistakes are its own and differ by domain; the
  external teacher is ~4.7x larger and trained longer on another valid solution style.
- `direct`: the direct-answer world (answers of a few tokens, a ~0.4M student whose warm-up data
  carries one systematic mistake), kept as the ablation of answer length.
- `smoke`: `tiny` shrunk for checks and CI (`bench check-adapter`);
- `direct-smoke`: `direct` shrunk the same way, the test suite's fast profile.
`hf` runs real local Hugging Face models.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class WarmupConfig:
    # The defaults are the direct world's recipe (benchmarks/calibration_sweep.py chose it): 4,500 steps
    # of 64 on math, code, graphs and strings, half the answers with the systematic mistake, trained on
    # one thread (bench.world.warmup.single_threaded), give a base at 37-52% greedy per domain (pass@8
    # 88-96%), from which each GRPO expert gains 30+ points in 4.5e11 FLOPs. At 3,000 steps whether
    # math and code were learnt at all turned on the data mix.
    student_steps: int = 4500
    teacher_steps: int = 900
    batch_size: int = 64
    student_lr: float = 3e-3
    teacher_lr: float = 2e-3
    # What each model is trained to write: `answer` (the direct answer, with `mistake_rate` and
    # `label_noise` applied), `solution` (the worked solution) or `alt_solution` (another valid style).
    student_target: str = "answer"
    teacher_target: str = "solution"
    # Learning-rate schedule: `cosine` (from lr down to a tenth) or `constant` (after a 100-step linear
    # warm-up): with `constant`, a recipe of N steps is exactly step N of a longer run, so a world can
    # be calibrated by checkpoints along one run.
    schedule: str = "cosine"
    label_noise: float = 0.0  # share of the student's warm-up answers with one random wrong character
    # Share with the systematic mistake (last character shifted, bench.world.prepare): greedy decoding then
    # often picks the mistake while sampling finds the answer (pass@8 >> pass@1), once the rule is learnt.
    mistake_rate: float = 0.5
    # Relative frequency of each domain in the student's warm-up, e.g. (("math", 3.0), ("code", 3.0));
    # () = uniform. The teacher's mix is its own (`teacher_domain_weights`).
    domain_weights: tuple[tuple[str, float], ...] = ()
    teacher_domain_weights: tuple[tuple[str, float], ...] = ()
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
    # Bumped whenever the code that builds this world's models changes their bytes (tasks, recipe,
    # model code): records carry it, and a board with records of two versions says so.
    world_version: str = ""
    # Settings this world's calibration chose for the built-in methods (docs/world.md): per method,
    # `--set` defaults applied beneath the user's own `--set`; the record's method_config shows them.
    method_defaults: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    device: str = "cpu"  # where a built-in world's models are trained and run (`gpu-small`: cuda)

    def defaults_for(self, method: str) -> tuple[tuple[str, str], ...]:
        """The `--set` defaults this world gives `method` (none for a plugin or an uncalibrated world)."""
        return dict(self.method_defaults).get(method, ())


def method_settings(grpo: float, distill: float, kl_threshold: float | None = None, reward_rule: bool = True
                    ) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """`method_defaults` giving every built-in method's GRPO steps the rate `grpo`, its distillation
    steps the rate `distill` and its distillation stopping rule, where given, the per-token reverse-KL
    threshold `kl_threshold` (nats) and, with `reward_rule=False`, no accuracy rule."""
    g, d = ("lr", repr(grpo)), ("lr", repr(distill))
    stop = (() if kl_threshold is None else (("distill.kl_threshold", repr(kl_threshold)),)) + (
        () if reward_rule else (("distill.use_reward_rule", "false"),))
    nest = lambda prefix, kv: (f"{prefix}.{kv[0]}", kv[1])  # noqa: E731
    return (("grpo", (g,)), ("grpo-joint", (g,)), ("opd-multi", (nest("expert", g), nest("distill", d), *stop)),
            ("self-grpo", (nest("stage", g), nest("distill", d), *stop)),
            ("recover", (nest("grpo", g), nest("distill", d))),
            ("opd-external", (nest("distill", d), *stop)))


# The direct-answer world: short answers, the ablation of answer length.
DIRECT = Profile(
    name="direct",
    task_format="tiny",
    student="tiny-llama",
    teacher="tiny-llama-teacher",
    # Worked solutions (the external teacher's style) run to ~63 characters plus `#answer`.
    max_new_tokens=64,
    eval_max_new_tokens=64,
    budget_flops=2e12,  # ~2 minutes of training on one core (~1.5e10 FLOP/s achieved)
    eval_size=1000,
    world_version="direct-1",
    description="direct answers of a few tokens: ~0.4M student, ~1.8M external teacher, "
                "shipped in bench/reference/direct",
)

# The worked-answer world. Its base and teacher recipes are fixed by the regime criteria of
# docs/world.md on single-method runs (benchmarks/calibrate_world.py) before any comparison runs on
# it; until they are (docs/world.md, Calibration), it has no shipped reference and no leaderboard.
WORKED = Profile(
    name="tiny",
    task_format="worked",
    student="tiny-worked",
    teacher="tiny-worked-teacher",
    max_new_tokens=96,  # the student's solutions run to ~75 tokens; longer ones score 0
    eval_max_new_tokens=128,  # the teacher's style runs to ~125
    budget_flops=2e13,
    eval_size=500,
    world_version="worked-1",
    description="worked answers of 22-60 tokens: ~1.3M student, ~6M external teacher (CPU, minutes after prepare)",
    # The base: step 1,500 of a constant-rate warm-up drawing graphs 1.5x and strings 0.5x as often, the
    # first checkpoint that met the rule of docs/world.md (Calibration), chosen before any method ran.
    warmup=WarmupConfig(student_steps=1500, teacher_steps=3000, batch_size=64, student_lr=3e-3, teacher_lr=1.5e-3,
                        student_target="solution", teacher_target="alt_solution", mistake_rate=0.0,
                        schedule="constant", domain_weights=(("graphs", 1.5), ("strings", 0.5)),
                        # graphs were the student's last domain learnt in uniform warm-ups; the teacher
                        # should master every domain, so it draws graphs 1.5x and the rest uniformly
                        teacher_domain_weights=(("graphs", 1.5),)),
    # GRPO at half the library's rate: in the calibration's first pass (at 5e-4) twice the rate
    # collapsed every domain and the library's own rate ended below its best on three of four
    # (docs/world.md, Learning rates); distillation keeps the library's rate. Distillation stops once
    # the per-token reverse KL stays under 0.03 nat for 3 steps: the largest threshold that, replayed
    # on the calibration's OPD runs, fires no earlier than any domain's plateau; the accuracy rule,
    # replayed so, fires on math 10 steps before its plateau, so it is off (docs/world.md, Calibration).
    # sft draws eight updates' worth of teacher samples a step (each update 32 prompts' worth, as
    # before): a throughput setting, not a calibrated one. This teacher writes ~76-token answers, and
    # sampling them 32 prompts at a time was 69-76% of an sft run, at a third of its updates' FLOP rate.
    # The recovery protocol's arms recover at rates of their own, chosen by single-arm runs (docs/world.md,
    # Calibrating the recovery rates): both at 1.25e-4; its stages keep GRPO's rate.
    method_defaults=method_settings(grpo=2.5e-4, distill=5e-4, kl_threshold=0.03, reward_rule=False)
    + (("sft", (("prompts_per_step", "256"), ("minibatches", "8"))),
       ("recover", (("grpo.lr", repr(2.5e-4)), ("grpo_arm_lr", repr(1.25e-4)), ("distill.lr", repr(1.25e-4))))),
)

PROFILES: dict[str, Profile] = {"tiny": WORKED, "direct": DIRECT}

# `smoke`: `tiny` shrunk for checks and CI (`bench check-adapter`, the plugin and lm-eval tests). Built
# from `tiny` so that it follows any change to tiny's models and token limits. Its models are the
# direct world's small student, its token caps short: a smoke run checks the plumbing on the worked
# tasks in seconds, not learning (an untrained model never stops before its cap).
PROFILES["smoke"] = replace(
    WORKED,
    name="smoke",
    student="tiny-llama",
    teacher="tiny-llama",
    max_new_tokens=48,
    eval_max_new_tokens=48,
    budget_flops=4e11,
    eval_size=32,
    description="checks and CI: the tiny world's tasks, a 0.4M student after a 30-step warm-up, short caps, 4e11 FLOPs",
    # uniform domains: the smoke base's bytes stay put while the tiny world's data mix is calibrated
    warmup=replace(WORKED.warmup, student_steps=30, teacher_steps=30, batch_size=32, domain_weights=(),
                   teacher_domain_weights=()),
)

# `direct-smoke`: `direct` shrunk for the test suite (`tests/conftest.py: fast_profile`): the direct
# world's tasks and models after a 30-step warm-up, a small budget and evaluation; seconds per run.
PROFILES["direct-smoke"] = replace(
    DIRECT,
    name="direct-smoke",
    budget_flops=4e11,
    eval_size=64,
    description="tests: the direct world's tasks and models after a 30-step warm-up, 4e11 FLOPs",
    warmup=replace(DIRECT.warmup, student_steps=30, teacher_steps=30, batch_size=32),
)

# `gpu-small`: the GPU path's learning check, since no pretrained weights can be had offline: the
# worked world's tasks at 20-100M parameters (a ~25M student and its experts, a ~118M external
# teacher, 4.7x), built from scratch on one CUDA GPU by `bench prepare` and trained there in fp32. Its
# recipe, budget and method settings are first guesses, written before any run on it, scaled from
# `tiny`'s: the warm-up's rate a third of tiny's, for a model 19x larger and 4x wider; the methods'
# settings tiny's calibrated ones, their rates a third too (tiny's calibration found the library's GRPO
# rate too high at a quarter of this width). benchmarks/gpu_check.py measures the warm-up along one
# run and the default run, and the recipe is chosen by `tiny`'s base-choosing rule (docs/world.md)
# from that measurement; the rates by tiny's rate rule from calibration runs.
PROFILES["gpu-small"] = replace(
    WORKED,
    name="gpu-small",
    student="gpu-small",
    teacher="gpu-small-teacher",
    device="cuda",
    budget_flops=4e14,  # about as many GRPO steps as tiny's 2e13 buys its 1.3M student
    eval_size=500,
    world_version="gpu-small-0",
    description="the GPU learning check: the worked world's tasks, a ~25M student and ~118M teacher built on one "
                "CUDA GPU (recipe provisional until measured there)",
    warmup=replace(WORKED.warmup, student_steps=600, teacher_steps=1500, student_lr=1e-3, teacher_lr=5e-4),
    method_defaults=method_settings(grpo=8e-5, distill=1.6e-4, kl_threshold=0.03, reward_rule=False),
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
    # Rates for full fine-tuning of a pretrained model, not calibrated here (no pretrained weights can be
    # had offline): GRPO steps at TRL's GRPO default, 1e-6; distillation steps, the same policy-gradient
    # update with the teacher's log-ratio as the advantage, at the same; sft at TRL's SFT default, 2e-5.
    # The library's own rates were set on worlds of a few million parameters trained from scratch (grpo
    # 5e-4, sft 1e-3) and would wreck a pretrained model in a few steps. `--set lr=...` overrides.
    method_defaults=method_settings(grpo=1e-6, distill=1e-6) + (("sft", (("lr", "2e-05"),)),),
)
