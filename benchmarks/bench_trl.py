"""Training-step speed: our GRPO and OPD steps against TRL's `GRPOTrainer` and `DistillationTrainer`, one thread.

    .venv/bin/pip install -e '.[bench-trl]'
    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_trl.py
        [--models tiny-llama,small-llama] [--methods grpo,opd] [--layouts equal,mixed] [--steps 7]
        [--out benchmarks/RESULTS-trl.md]

One step = sample completions, score them, one optimiser step; the same for both sides:
- same weights (`build_tiny`, built twice), prompts (the `math_code` easy tiny train sampler, fed to
  both in the same order), 16 prompts x 8 samples (GRPO) or 16 x 4 (OPD: TRL's trainer samples once
  per prompt, so its dataset repeats each prompt 4 times), AdamW, gradient clipping at 1.0;
- completions are exactly `--new-tokens` long on both sides (TRL: `min_new_tokens`; ours: a policy
  whose EOS id is never sampled), so both train on the same completion tokens;
- loss normalisation `grpo` for GRPO (TRL `loss_type="grpo"`, group-scaled rewards, beta=0) and
  `dapo` (token mean) for OPD, TRL's only one. OPD losses differ: TRL's `DistillationTrainer` (beta=1,
  reverse KL) matches the full next-token distribution; ours is the sampled-token policy gradient.
- layouts: `equal` keeps only prompts of the sampler's most common token length (identical work up to
  prefill sharing and LM-head positions); `mixed` is the sampler as is (TRL pads, ours buckets).

Timing: TRL runs its real loop, `trainer.train(max_steps=warmup + steps)`; a callback runs our step
at each of TRL's `on_step_end`, so the two alternate in one process. A TRL step is the time between
two `on_step_end`s minus our step in between: data loading, generation, rewards, forward, backward,
clipping, optimiser and scheduler, what a user of the trainer pays (setup excluded, as it is paid once).
Times are CPU seconds of this process (the machine may be shared); steps/s are medians over the timed
steps, speed-ups the median of the per-step ratios (TRL's step k / our step k, run back to back).
FLOPs: ours from the ledger; both counted with `bench.accounting.audit`'s instrumented counter on the first step.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede `import torch`
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import torch  # noqa: E402
import trl  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import DistillationConfig, DistillationTrainer, GRPOConfig, GRPOTrainer  # noqa: E402

from bench.accounting.audit import audited  # noqa: E402
from bench.context import RunContext  # noqa: E402
from bench.accounting.ledger import Ledger  # noqa: E402
from bench.world.models import TINY_SPECS, build_tiny, build_tokenizer, param_count  # noqa: E402
from bench.policy import Policy  # noqa: E402
from bench.rollout.torch_engine import TorchRollout  # noqa: E402
from methods.distill import DistillStepConfig, distill_step  # noqa: E402
from methods.grpo import GRPOStepConfig, grpo_step  # noqa: E402
from tasks import get_suite  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)  # `gradient_checkpointing` renamed in transformers 5.x
torch.set_num_threads(1)  # benchmarks run single-threaded and report ratios (docs/design.md, Known pitfalls)

# OPD teacher per student: the tiny profile's external teacher; for small-llama, one of its size (other seed)
TEACHERS = {"tiny-llama": TINY_SPECS["tiny-llama-teacher"], "small-llama": replace(TINY_SPECS["small-llama"], seed=3)}
LR = 1e-5


class NoEosPolicy(Policy):
    """A policy that no token stops: every completion is exactly max_new_tokens long."""

    @property
    def stop_ids(self) -> tuple[int, ...]:
        return ()


class ListSampler:
    """Hands out a fixed list of problems in order (the `Sampler.next` contract)."""

    def __init__(self, problems: list) -> None:
        self.problems, self.drawn = problems, 0

    def next(self, k: int) -> list:
        out = self.problems[self.drawn : self.drawn + k]
        self.drawn += k
        return out


def matmul_peak_flops(sizes: tuple[int, ...] = (1024, 2048), repeats: int = 8) -> float:
    """Best fp32 FLOP/s of square `torch.mm` on this thread (2 n^3 FLOPs per product)."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        for _ in range(repeats):
            t = time.process_time()
            torch.mm(a, b)
            best = max(best, 2 * n**3 / (time.process_time() - t))
    return best


def problems_for(layout: str, count: int, tokenizer) -> list:
    """`count` train problems of `math_code` (easy, tiny); `equal` keeps the most common prompt length."""
    stream = get_suite("math_code", "easy", "tiny").train_sampler(0)
    if layout == "mixed":
        return [next(stream) for _ in range(count)]
    pool = [next(stream) for _ in range(max(400, 4 * count))]
    lengths = [len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) for p in pool]
    common = Counter(lengths).most_common(1)[0][0]
    out = [p for p, n in zip(pool, lengths) if n == common]
    while len(out) < count:
        p = next(stream)
        if len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) == common:
            out.append(p)
    return out[:count]


class Ours:
    """Our side: a RunContext on the same model and problems; `step()` runs one real GRPO or OPD step."""

    def __init__(self, method: str, model_name: str, problems: list, args: argparse.Namespace) -> None:
        self.method, self.args, self.ledger = method, args, Ledger()
        model, tokenizer = build_tiny(TINY_SPECS[model_name])
        self.suite = get_suite("math_code", "easy", "tiny")
        self.student = NoEosPolicy(name="student", model=model, tokenizer=tokenizer, ledger=self.ledger)
        self.ctx = RunContext(
            suite=self.suite, seed=0, budget_flops=float("inf"), ledger=self.ledger, student=self.student,
            backend=TorchRollout(), teacher_loader=self._teacher, max_new_tokens=args.new_tokens,
            on_step=lambda stats: None,
        )  # fmt: skip
        self.sampler = ListSampler(problems)
        self.parts: dict[str, float] = {}
        self.completion_tokens = 0.0
        for name in ("rollout", "score", "pg_step"):  # time the pieces of a step (update FLOP/s)
            setattr(self.ctx, name, self._timed(name, getattr(self.ctx, name)))
        if method == "grpo":
            self.config = GRPOStepConfig(prompts_per_step=args.prompts, group_size=args.group, lr=LR,
                                         loss_type="grpo", warmup_updates=0)
        else:
            self.config = DistillStepConfig(prompts_per_step=args.prompts, samples=args.samples, lr=LR,
                                            loss_type="dapo")
            teacher = self.ctx.teacher(model_name)
            self.teachers = {d: teacher for d in self.suite.domains}

    def _teacher(self, student_name: str) -> Policy:
        model, tokenizer = build_tiny(TEACHERS[student_name])
        return Policy(name="teacher", model=model, tokenizer=tokenizer, ledger=self.ledger, trainable=False)

    def _timed(self, name: str, fn):
        def wrapper(*a, **kw):
            t = time.process_time()
            try:
                result = fn(*a, **kw)
                if name == "rollout":
                    self.completion_tokens = float(result.lengths.sum())
                return result
            finally:
                self.parts[name] = self.parts.get(name, 0.0) + time.process_time() - t

        return wrapper

    def step(self) -> dict[str, float]:
        """One step; returns CPU and wall seconds, per-piece seconds, completion tokens and ledger FLOPs by kind."""
        self.parts = {}
        before = self._flops_by_kind()
        cpu, wall = time.process_time(), time.perf_counter()
        if self.method == "grpo":
            grpo_step(self.ctx, self.student, self.sampler, self.config)
        else:
            distill_step(self.ctx, self.student, self.teachers, self.sampler, self.config)
        out = {"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, **self.parts}
        out["completion_tokens"] = self.completion_tokens
        for kind, flops in self._flops_by_kind().items():
            out[f"flops_{kind}"] = flops - before.get(kind, 0.0)
        return out

    def _flops_by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for row in self.ledger.rows():
            out[row["kind"]] = out.get(row["kind"], 0.0) + row["flops"]
        return out


class Interleave(TrainerCallback):
    """Runs our step after each TRL step and times both; counts the first step of each with `bench.accounting.audit`."""

    def __init__(self, ours: Ours, warmup: int) -> None:
        self.ours, self.warmup = ours, warmup
        self.trl: list[tuple[float, float]] = []  # (cpu_s, wall_s) per timed TRL step
        self.mine: list[dict[str, float]] = []
        self.counted: dict[str, float] = {}
        self._stack = contextlib.ExitStack()
        self._last = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:  # the first step is counted (slow under the counter), never timed
            self._audit = self._stack.enter_context(audited(Ledger(), "trl"))

    def on_step_end(self, args, state, control, **kwargs):
        now = (time.process_time(), time.perf_counter())
        if state.global_step == 1:
            self._stack.close()
            self.counted["trl_instrumented"] = self._audit.instrumented_flops
            with audited(Ledger(), "ours") as audit:  # a throwaway ledger: the count is only read back
                first = self.ours.step()
            self.counted["ours_instrumented"] = audit.instrumented_flops
            self.counted["ours_ledger"] = sum(v for k, v in first.items() if k.startswith("flops_"))
        else:
            timed = state.global_step > self.warmup
            if timed:
                self.trl.append((now[0] - self._last[0], now[1] - self._last[1]))
            mine = self.ours.step()
            if timed:
                self.mine.append(mine)
        self._last = (time.process_time(), time.perf_counter())  # the next TRL step starts now


def trl_trainer(method: str, model_name: str, problems: list, args: argparse.Namespace, callback, out_dir: str):
    """TRL's trainer on a fresh copy of the same model, problems in the same order, exact completion length."""
    model, tokenizer = build_tiny(TINY_SPECS[model_name])
    common = dict(
        output_dir=out_dir, use_cpu=True, bf16=False, gradient_checkpointing=False, report_to="none",
        max_steps=args.warmup + args.steps, learning_rate=LR, lr_scheduler_type="constant", max_grad_norm=1.0,
        logging_steps=10**6, save_strategy="no", disable_tqdm=True, shuffle_dataset=False, seed=0,
        max_completion_length=args.new_tokens, generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0, dataloader_num_workers=0,
    )  # fmt: skip
    if method == "grpo":
        config = GRPOConfig(**common, per_device_train_batch_size=args.prompts * args.group,
                            num_generations=args.group, loss_type="grpo", scale_rewards="group", beta=0.0)
        suite = get_suite("math_code", "easy", "tiny")

        def reward(prompts, completions, index, **kwargs) -> list[float]:
            return [suite.score(problems[i], c) for i, c in zip(index, completions)]

        data = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])
        return GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                           processing_class=tokenizer, callbacks=[callback])
    teacher, _ = build_tiny(TEACHERS[model_name])
    config = DistillationConfig(**common, per_device_train_batch_size=args.prompts * args.samples, beta=1.0)
    data = Dataset.from_list([{"prompt": p.prompt} for p in problems for _ in range(args.samples)])
    return DistillationTrainer(model=model, teacher_model=teacher, args=config, train_dataset=data,
                               processing_class=tokenizer, callbacks=[callback])


def compare(method: str, model_name: str, layout: str, args: argparse.Namespace) -> dict:
    """Interleaved steps of both sides on one model and layout; medians, ratios and FLOPs per step."""
    tokenizer = build_tokenizer()
    problems = problems_for(layout, args.prompts * (args.warmup + args.steps), tokenizer)
    lengths = sorted({len(tokenizer(p.prompt, add_special_tokens=False)["input_ids"]) for p in problems})
    ours = Ours(method, model_name, problems, args)
    callback = Interleave(ours, args.warmup)
    with tempfile.TemporaryDirectory() as out_dir:
        trainer = trl_trainer(method, model_name, problems, args, callback, out_dir)
        trainer.train()
    rows = args.prompts * (args.group if method == "grpo" else args.samples)
    trl_log = trainer.state.log_history[-1]  # the final log: means over all steps
    span = f"{lengths[0]}" if len(lengths) == 1 else f"{lengths[0]}-{lengths[-1]}"
    return dict(
        method=method, model=model_name, params_m=param_count(ours.student._model) / 1e6,
        layout=f"{layout}, {span} tokens", trl_tokens=trl_log["completions/mean_length"] * rows,
        **callback.counted, **_medians(callback),
    )  # fmt: skip


def _medians(callback: Interleave) -> dict:
    """Medians over the timed steps: steps/s, speed-ups, our FLOP/s and where our step's time goes."""
    mine, trl_cpu, trl_wall = callback.mine, [t[0] for t in callback.trl], [t[1] for t in callback.trl]
    ours_cpu = statistics.median(m["cpu_s"] for m in mine)

    def med(fn) -> float:
        return statistics.median(fn(m) for m in mine)

    return dict(
        ours_steps_s=1 / ours_cpu, trl_steps_s=1 / statistics.median(trl_cpu),
        # paired: TRL's step k and ours run back to back, so load drift cancels out of their ratio
        ratio=statistics.median(t / m["cpu_s"] for t, m in zip(trl_cpu, mine)),
        wall_ratio=statistics.median(t / m["wall_s"] for t, m in zip(trl_wall, mine)),
        ours_tokens=mine[-1]["completion_tokens"],
        update_flops_per_s=med(lambda m: m["flops_update"] / m["pg_step"]),
        step_flops_per_s=med(lambda m: sum(v for k, v in m.items() if k.startswith("flops_")) / m["cpu_s"]),
        split={k: med(lambda m: m.get(k, 0.0) / m["cpu_s"]) for k in ("rollout", "score", "pg_step")},
    )  # fmt: skip


HEADER = (
    "| method | model | params | prompts | ours steps/s | TRL steps/s | speed-up (CPU) | speed-up (wall) "
    "| GFLOP/step ours ledger / ours counted / TRL counted | completion tokens ours / TRL "
    "| ours update GFLOP/s (% of peak) | ours step GFLOP/s | ours step: rollout / score / update |"
)


def row(r: dict, peak: float) -> str:
    g = 1e9
    return (
        f"| {r['method']} | {r['model']} | {r['params_m']:.2f}M | {r['layout']} | {r['ours_steps_s']:.3f} "
        f"| {r['trl_steps_s']:.3f} | {r['ratio']:.2f}x | {r['wall_ratio']:.2f}x "
        f"| {r['ours_ledger'] / g:.2f} / {r['ours_instrumented'] / g:.2f} / {r['trl_instrumented'] / g:.2f} "
        f"| {r['ours_tokens']:.0f} / {r['trl_tokens']:.0f} "
        f"| {r['update_flops_per_s'] / g:.2f} ({r['update_flops_per_s'] / peak:.0%}) "
        f"| {r['step_flops_per_s'] / g:.2f} | {' / '.join(f'{v:.0%}' for v in r['split'].values())} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="tiny-llama,small-llama")
    parser.add_argument("--methods", default="grpo,opd")
    parser.add_argument("--layouts", default="equal,mixed")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8, help="GRPO samples per prompt")
    parser.add_argument("--samples", type=int, default=4, help="OPD samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (the first is FLOP-counted)")
    parser.add_argument("--steps", type=int, default=7, help="timed steps of each side")
    parser.add_argument("--out", type=Path, help="also write the table as markdown here")
    args = parser.parse_args()
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1")
    peaks = [matmul_peak_flops()]
    print(f"fp32 matmul peak {peaks[0] / 1e9:.1f} GFLOP/s; rows as they finish (% of that peak):", flush=True)
    print(HEADER + "\n|" + "---|" * (HEADER.count("|") - 1), flush=True)
    results = []
    for method in args.methods.split(","):
        for model_name in args.models.split(","):
            for layout in args.layouts.split(","):
                results.append(compare(method, model_name, layout, args))
                print(row(results[-1], peaks[0]), flush=True)
                # On a shared machine the measured peak moves with the load: the best measurement is the peak.
                peaks.append(matmul_peak_flops())
    peak = max(peaks)
    lines = [
        f"{args.prompts} prompts x {args.group} (GRPO) / x {args.samples} (OPD) samples, {args.new_tokens} "
        f"completion tokens, 1 thread, median of {args.steps} interleaved steps after {args.warmup} warm-up; "
        f"torch {torch.__version__}, trl {trl.__version__}; fp32 matmul peak {peak / 1e9:.1f} GFLOP/s "
        f"(best square torch.mm, 1024-2048, of {len(peaks)} measurements between the rows)",
        "", HEADER, "|" + "---|" * (HEADER.count("|") - 1), *(row(r, peak) for r in results),
    ]  # fmt: skip
    print("\n" + "\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
