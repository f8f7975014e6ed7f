"""The runner: one method, one suite, one seed, one FLOP budget -> a run directory (DESIGN sections 3, 7).

It owns what a method must not: evaluations at FLOP milestones (the start; 1%, 2% and 5% of the
budget; then every tenth), at phase boundaries (a phase's start or end, once FLOPs moved) and every
few steps of a distillation; checkpoints at each milestone; the per-step trace (`steps.jsonl`, each
step's statistics with the counted FLOPs after it); `--resume` to the same ledger, trace and curve;
the budget stop; the progress bar; and the `summary.json` result record written last.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from bench import evaluation, store
from bench.progress import progress
from bench.context import RunContext
from bench.errors import CorruptRunError, RunError, unknown
from bench.accounting.ledger import Ledger, current_phase
from bench.phases import EXECUTORS
from bench.policy import Policy
from bench.world.profiles import PROFILES, Profile
from bench.registry import get_method, get_suite
from bench.rollout.engines import ROLLOUT_BACKENDS, make_backend, vllm_missing

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class RunConfig:
    method: str
    suite: str = "math_code"
    difficulty: str = "easy"
    profile: str = "tiny"
    seed: int = 0
    budget_flops: float | None = None  # None: the profile's default
    eval_every: float = 0.1  # evaluate at each multiple of this fraction of the budget...
    eval_early: tuple[float, ...] = (0.01, 0.02, 0.05)  # ...and at these fractions, to resolve early learning
    distill_eval_every: int = 5  # inside a `distill` phase, also evaluate every this many steps (0: off)
    eval_size: int | None = None  # held-out prompts per domain (None: the profile's)
    overrides: tuple[tuple[str, str], ...] = ()  # method config key=value
    runs_dir: Path = Path("runs")
    run_name: str | None = None
    # hf profile: local model folders (student, external teacher, named teachers) and the device
    model: str | None = None
    external: str | None = None
    teachers: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"
    max_new_tokens: int | None = None  # None: the profile's
    # How a method's independent phases (opd-multi's experts) run: sequential | isolated | ray
    # (bench.phases). `bench sweep --executor ray` sets ray. Not part of the fingerprint: a run may be
    # resumed under another executor and its ledger stays whole; the record says which one finished it.
    expert_executor: str = "sequential"
    # The rollout engine of methods and evaluations: torch | vllm (bench.rollout.engines).
    # Not part of the fingerprint either: both sample the same distribution and charge the same
    # analytic FLOPs for the same tokens (torch adds its padded keys, under 1%); the record says which
    # one finished the run.
    rollout: str = "torch"

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise unknown("profile", self.profile, list(PROFILES))
        if PROFILES[self.profile].task_format == "hf" and not self.model:
            raise RunError(f"the {self.profile} profile needs --model PATH (a local Hugging Face model folder)")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise RunError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.budget_flops is not None and not (self.budget_flops > 0 and self.budget_flops < float("inf")):
            raise RunError(f"budget must be a positive number of FLOPs, got {self.budget_flops!r}")
        if not 0 < self.eval_every <= 1:
            raise RunError(f"eval_every must be in (0, 1], got {self.eval_every!r}")
        if not all(0 < f <= 1 for f in self.eval_early):
            raise RunError(f"eval_early fractions must be in (0, 1], got {self.eval_early!r}")
        if self.distill_eval_every < 0:
            raise RunError(f"distill_eval_every must be >= 0, got {self.distill_eval_every!r}")
        if self.expert_executor not in EXECUTORS:
            raise unknown("expert executor", self.expert_executor, list(EXECUTORS))
        if self.rollout not in ROLLOUT_BACKENDS:
            raise unknown("rollout backend", self.rollout, list(ROLLOUT_BACKENDS))
        if self.rollout == "vllm" and (missing := vllm_missing()):
            raise RunError(missing)

    @property
    def resolved_profile(self) -> Profile:
        return PROFILES[self.profile]

    @property
    def budget(self) -> float:
        return float(self.budget_flops or self.resolved_profile.budget_flops)

    @property
    def milestones(self) -> list[float]:
        """Budget fractions at which the runner evaluates: `eval_early`, then every `eval_every`."""
        tenths = [round(k * self.eval_every, 12) for k in range(1, int(round(1 / self.eval_every + 1e-9)) + 1)]
        return sorted({*self.eval_early, *tenths, 1.0})


def method_config(cls: type, overrides: tuple[tuple[str, str], ...]) -> Any:
    """The method's frozen config with `key=value` overrides checked against its fields."""
    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    values: dict[str, Any] = {}
    for key, raw in overrides:
        if key not in fields:
            raise unknown(f"{cls.name} config key", key, list(fields))
        default = getattr(cls.Config(), key)
        values[key] = _coerce(key, raw, default)
    try:
        return cls.Config(**values)
    except (TypeError, ValueError) as exc:
        raise RunError(f"invalid {cls.name} config: {exc}") from exc


def _coerce(key: str, raw: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        if isinstance(default, int):
            return int(raw)
        if isinstance(default, float):
            return float(raw)
        if isinstance(default, tuple):
            return tuple(x for x in raw.split(",") if x)
        return raw
    except ValueError:
        raise RunError(f"{key}={raw!r}: expected {type(default).__name__}") from None


class Runner:
    """Runs one configuration into `runs_dir/<run_id>/`."""

    def __init__(self, config: RunConfig, *, resume: bool = False, progress: bool = True) -> None:
        self.config = config
        self.method_cls = get_method(config.method)
        self.method_config = method_config(self.method_cls, config.overrides)
        self.profile = config.resolved_profile
        self.suite = get_suite(config.suite, config.difficulty, self.profile.task_format)
        self.run_id = self.run_id_for(config, self.method_cls.name)
        self.dir = Path(config.runs_dir) / self.run_id
        self.resume = resume
        self.show_progress = progress
        self.curve: list[dict] = []
        self._milestones = config.milestones
        self._next_milestone = 0  # index into self._milestones
        self._wall_offset = 0.0
        # per-step trace (steps.jsonl): rows written, steps per ledger phase, the largest step's FLOPs
        self._trace = {"rows": 0, "phase_steps": {}, "max_step_flops": 0.0, "last_flops": 0.0}

    @staticmethod
    def run_id_for(config: RunConfig, method_name: str | None = None) -> str:
        """`<method>__<suite>-<difficulty>__<profile>__s<seed>`, or the configured run name."""
        if config.run_name:
            return config.run_name
        name = method_name or get_method(config.method).name
        return f"{_slug(name)}__{config.suite}-{config.difficulty}__{config.profile}__s{config.seed}"

    # -- entry ----------------------------------------------------------------------------------
    def run(self) -> dict:
        from bench.world import prepare

        self._check_dir()
        prepared = self._models(prepare)
        self._open_dir()
        checkpoint = self._load_checkpoint() if self.resume else None
        if checkpoint is None:
            self.ledger = Ledger(self.dir / "ledger.jsonl")
            self._book_preparation(prepared)
        chat = self.profile.task_format == "hf"
        student = Policy("student", *prepared.load_student(), ledger=self.ledger, chat=chat)
        backend = make_backend(self.config.rollout)
        self.evaluator = evaluation.Evaluator(
            self.suite,
            self.config.eval_size or self.profile.eval_size,
            self.config.max_new_tokens or self.profile.eval_max_new_tokens,
            backend=backend,
        )
        ctx = RunContext(
            suite=self.suite,
            seed=self.config.seed,
            budget_flops=self.config.budget,
            ledger=self.ledger,
            student=student,
            backend=backend,
            teacher_loader=lambda name: prepared.load_teacher(name, self.ledger),
            max_new_tokens=self.config.max_new_tokens or self.profile.max_new_tokens,
            on_step=lambda stats: self._after_step(ctx, stats),
            on_boundary=lambda edge, phase: self._boundary(ctx, edge, phase),
            phase_executor=self.config.expert_executor,
            eval_max_new_tokens=self.config.max_new_tokens or self.profile.eval_max_new_tokens,
            **(checkpoint or {}),
        )
        self.ctx = ctx
        self._t0 = time.perf_counter()
        with progress(self.config.budget, enabled=self.show_progress) as bar:
            self.bar = bar
            if not self.curve:
                self._evaluate(ctx, "start")
            method = self.method_cls(self.method_config)
            method.run(ctx)
            ctx.finished = True
            if self.curve[-1]["flops"] < ctx.spent_flops:
                self._evaluate(ctx, "final")
        self.ledger.flush()
        self._save_final(ctx.student)
        summary = self._summary(prepared)
        store.write_json(self.dir / "summary.json", summary)
        return summary

    def _save_final(self, student: Policy) -> None:
        """The deliverable as a Hugging Face folder (`final/`): loadable by transformers, lm-eval,
        or `bench run --teacher NAME=RUN/final` (a calibration's expert as a teacher)."""
        from bench.world.models import save_model

        save_model(student.model, student.tokenizer, self.dir / "final")

    def _models(self, prepare: Any) -> Any:
        """The tiny profile builds its models (`bench prepare`); hf runs use the folders given."""
        if self.profile.task_format == "hf":
            from bench.world.hf import local_models

            c = self.config
            return local_models(c.model, c.external, c.teachers, c.device)
        from bench.world.models import resolve_model

        teachers = {name: resolve_model(path) for name, path in self.config.teachers}
        prepared = prepare.prepare(self.profile, progress=self.show_progress, teacher=False)  # teacher: on first use
        prepared.extra_teachers = teachers
        return prepared

    # -- run directory --------------------------------------------------------------------------
    def _check_dir(self) -> None:
        """Refuse, before any work, to overwrite a run or to resume one that is not there."""
        if self.resume:
            if not (self.dir / "config.json").exists():
                raise RunError(f"nothing to resume: {self.dir} has no config.json")
            if (self.dir / "summary.json").exists():
                raise RunError(f"nothing to resume: {self.dir} is complete (summary.json is written)")
        elif self.dir.exists() and any(self.dir.iterdir()):
            raise RunError(f"{self.dir} already exists; pass --resume to continue it or choose --runs elsewhere")

    def _open_dir(self) -> None:
        config_path = self.dir / "config.json"
        record = self._config_record()
        if self.resume:
            old = store.read_json(config_path)
            if old.get("fingerprint") != record["fingerprint"]:
                raise RunError(f"{self.dir} was started with a different configuration; not resuming")
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        store.write_json(config_path, record)

    def _config_record(self) -> dict:
        fingerprint = {
            "method": self.method_cls.name,
            "method_config": dataclasses.asdict(self.method_config),
            "suite": self.config.suite,
            "difficulty": self.config.difficulty,
            "suite_hash": self.suite.content_hash,
            "profile": self.config.profile,
            "seed": self.config.seed,
            "budget_flops": self.config.budget,
            "eval_every": self.config.eval_every,
            "eval_early": list(self.config.eval_early),
            "distill_eval_every": self.config.distill_eval_every,
            "eval_size": self.config.eval_size or self.profile.eval_size,
            "max_new_tokens": self.config.max_new_tokens or self.profile.max_new_tokens,
            "models": {"student": self.config.model, "external": self.config.external,
                       "teachers": dict(self.config.teachers)} if self.config.model
            else ({"teachers": dict(self.config.teachers)} if self.config.teachers else None),
        }
        return {
            "run_id": self.run_id,
            "fingerprint": fingerprint,
            **fingerprint,
            "suite_version": self.suite.version,
            "provenance": self._provenance(),
        }

    def _provenance(self) -> dict:
        return {
            "code_hash": store.code_hash(),
            "git_commit": store.git_commit(),
            "suite_hash": self.suite.content_hash,
            "world_version": self.profile.world_version,
            "packages": store.package_versions(),
            "hardware": store.hardware(),
            "created": store.now_iso(),
        }

    def _book_preparation(self, prepared: Any) -> None:
        """Copy the shared base's and external teacher's training costs in: recorded, not counted."""
        for row in prepared.ledger_rows():
            self.ledger.charge(**row)
        self.ledger.flush()

    # -- milestones -----------------------------------------------------------------------------
    def _after_step(self, ctx: RunContext, stats: dict) -> None:
        spent = ctx.spent_flops
        phase = current_phase()
        self._trace_step(spent, phase, stats)
        self.bar.update(spent, self.curve[-1]["accuracy"] if self.curve else None)
        if self._next_milestone < len(self._milestones) and spent >= self._milestone_flops(self._next_milestone):
            self._evaluate(ctx, "milestone")
            while self._next_milestone < len(self._milestones) and spent >= self._milestone_flops(self._next_milestone):
                self._next_milestone += 1
            if not ctx.should_stop():
                self._save_checkpoint(ctx)
        elif phase == "distill" and self.config.distill_eval_every and \
                self._trace["phase_steps"][phase] % self.config.distill_eval_every == 0:
            self._evaluate(ctx, "distill")

    def _milestone_flops(self, index: int) -> float:
        return self._milestones[index] * self.config.budget

    def _boundary(self, ctx: RunContext, edge: str, phase: str) -> None:
        """A phase starts or ends: evaluate there if counted FLOPs moved since the last evaluation."""
        if self.curve and ctx.spent_flops > self.curve[-1]["flops"]:
            self._evaluate(ctx, "boundary", boundary=f"{edge} {phase}")

    def _trace_step(self, spent: float, phase: str, stats: dict) -> None:
        """Append the step's stats to steps.jsonl with the counted FLOPs after it."""
        trace = self._trace
        trace["rows"] += 1
        trace["phase_steps"][phase] = trace["phase_steps"].get(phase, 0) + 1
        trace["max_step_flops"] = max(trace["max_step_flops"], spent - trace["last_flops"])
        trace["last_flops"] = spent
        row = {"step": trace["rows"], "flops": spent, "phase": phase}
        for key, value in stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                row[key] = float(value) if math.isfinite(value) else None
        store.append_row(self.dir / "steps.jsonl", row)

    def _evaluate(self, ctx: RunContext, label: str, **extra: str) -> None:
        result = self.evaluator.evaluate(ctx.student)
        point = {
            "flops": ctx.spent_flops,
            "wall_s": round(self._wall_offset + time.perf_counter() - self._t0, 3),
            "phase": label,
            **extra,
            "ledger_phase": current_phase(),
            "phase_flops": self.ledger.by_phase("counted"),
            **result,
        }
        self.curve.append(point)
        store.append_jsonl(self.dir / "curve.jsonl", point)
        self.bar.update(ctx.spent_flops, point["accuracy"])

    # -- checkpoints ----------------------------------------------------------------------------
    def _save_checkpoint(self, ctx: RunContext) -> None:
        rows = self.ledger.flush()
        final = self.dir / "checkpoints" / "latest"
        tmp = self.dir / "checkpoints" / "latest.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        torch.save({name: p.state() for name, p in ctx.policies.items() if name != "external"}, tmp / "policies.pt")
        torch.save({"generator": ctx.generator.get_state(), "torch": torch.get_rng_state()}, tmp / "rng.pt")
        store.write_json(
            tmp / "state.json",
            {
                "state": ctx.state,
                "samplers": ctx.sampler_positions(),
                "ledger_rows": rows,
                "curve_rows": len(self.curve),
                "next_milestone": self._next_milestone,
                "trace": self._trace,
                "reports": ctx.reports,
                "wall_s": self._wall_offset + time.perf_counter() - self._t0,
            },
        )
        if final.exists():
            old = final.with_name("latest.old")
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
            tmp.rename(final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(final)

    def _load_checkpoint(self) -> dict | None:
        folder = self.dir / "checkpoints" / "latest"
        if not folder.exists():
            # Killed before the first checkpoint: start over, keeping the config.
            for name in ("ledger.jsonl", "curve.jsonl", "steps.jsonl", "summary.json"):
                (self.dir / name).unlink(missing_ok=True)
            return None
        try:
            meta = store.read_json(folder / "state.json")
            policies = torch.load(folder / "policies.pt", weights_only=False)
            rng = torch.load(folder / "rng.pt", weights_only=False)
        except (OSError, RuntimeError, CorruptRunError) as exc:
            raise RunError(f"checkpoint in {folder} is unreadable ({exc}); cannot resume") from exc
        self.ledger = Ledger(self.dir / "ledger.jsonl", keep_rows=meta["ledger_rows"])
        self.curve = store.read_jsonl(self.dir / "curve.jsonl", keep=meta["curve_rows"])
        store.rewrite_jsonl(self.dir / "curve.jsonl", self.curve)
        (self.dir / "summary.json").unlink(missing_ok=True)
        self._next_milestone = meta["next_milestone"]
        self._trace = meta["trace"]
        steps = store.read_jsonl(self.dir / "steps.jsonl", keep=self._trace["rows"])
        store.rewrite_jsonl(self.dir / "steps.jsonl", steps)
        self._wall_offset = meta["wall_s"]
        torch.set_rng_state(rng["torch"])
        generator = torch.Generator()
        generator.set_state(rng["generator"])
        return {
            "state": meta["state"],
            "policy_states": policies,
            "sampler_positions": meta["samplers"],
            "generator": generator,
            "reports": meta["reports"],
        }

    def _throughput(self, provenance: dict) -> dict:
        """Counted work by kind: FLOPs, wall seconds, achieved FLOP/s and, on a GPU whose peak is
        known and that the run used, model FLOP utilisation (achieved / dense bf16 peak)."""
        out = self.ledger.throughput("counted")
        peak = (provenance.get("hardware") or {}).get("gpu_peak_bf16_flops")
        if peak and self.ctx.student.device.type == "cuda":
            for row in out.values():
                row["mfu"] = row["flop_per_s"] / peak
        return out

    # -- result ---------------------------------------------------------------------------------
    def _summary(self, prepared: Any) -> dict:
        base, final = self.curve[0], self.curve[-1]
        record = store.read_json(self.dir / "config.json")
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "method": self.method_cls.name,
            "method_config": dataclasses.asdict(self.method_config),
            "suite": self.config.suite,
            "difficulty": self.config.difficulty,
            "domains": list(self.suite.domains),
            "suite_version": self.suite.version,
            "suite_hash": self.suite.content_hash,
            "profile": self.config.profile,
            "seed": self.config.seed,
            "budget_flops": self.config.budget,
            "status": "complete",
            "base_accuracy": base["accuracy"],
            "final_accuracy": final["accuracy"],
            "base_domain_accuracy": base["domain_accuracy"],
            "final_domain_accuracy": final["domain_accuracy"],
            "final_mean_length": final["mean_length"],
            "curve": self.curve,
            "ledger": self.ledger.rows(),
            "flops": self.ledger.by_category(),
            "recovery": self.ctx.reports.get("recovery"),
            "method_metrics": {k: v for k, v in self.ctx.reports.items() if k != "recovery"},
            "eval_size": self.config.eval_size or self.profile.eval_size,
            "steps": store.read_jsonl(self.dir / "steps.jsonl"),
            "max_step_flops": self._trace["max_step_flops"],
            "throughput": self._throughput(record["provenance"]),
            "provenance": {**record["provenance"], "model_hashes": prepared.model_hashes(),
                           "expert_executor": self.config.expert_executor, "rollout": self.config.rollout},
            "wall_s": round(self._wall_offset + time.perf_counter() - self._t0, 3),
        }


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:60]
