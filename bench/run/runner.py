"""The runner: one method, one suite, one seed, one FLOP budget -> a run directory (docs/design.md, The run).

It owns what a method must not: evaluations at FLOP milestones (the start; 1%, 2% and 5% of the
budget; then every tenth), at phase boundaries (a phase's start or end, once FLOPs moved) and every
few steps of a distillation; checkpoints at each milestone (`bench.run.checkpoint`); the per-step
trace (`steps.jsonl`, each step's statistics with the counted FLOPs after it); `--resume` to the
same ledger, trace and curve; the budget stop; the progress bar; and the `summary.json` result
record written last (`bench.run.record`). Of the method it reads only what it reported
(`ctx.report`); its `ctx.state` is saved with checkpoints, never read.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger, current_phase
from bench.context import RunContext
from bench.errors import RunError, no_space
from bench.evaluation import Evaluator
from bench.policy import Policy
from bench.progress import news_line, progress
from bench.registry import builtin_methods, get_method, get_suite
from bench.run.tracking import make_tracker
from bench.rollout.engines import make_backend
from bench.run import checkpoint, record
from bench.run import provenance as prov
from bench.run.config import ABSENT, RunConfig, dotted, method_config
from bench.run.phases import phase_runner, refuse_past_budget
from bench.world import prepare
from bench.world.hf import local_models
from bench.world.models import resolve_model, save_model, state_digest

# Held-out problems per domain whose completions every evaluation keeps (the record's `samples`):
# the same fixed prompts each time, so a reader can watch one answer change over training.
SAMPLES_PER_DOMAIN = 3


class Runner:
    """Runs one configuration into `runs_dir/<run_id>/`."""

    def __init__(self, config: RunConfig, *, resume: bool = False, progress: bool = True) -> None:
        self.config = config
        self.method_cls = get_method(config.method)
        self.profile = config.resolved_profile
        # the world's calibrated defaults first, the user's `--set` over them
        self.method_config = method_config(self.method_cls,
                                           self.profile.defaults_for(self.method_cls.name) + config.overrides)
        self.suite = get_suite(config.suite, config.difficulty, self.profile.task_format)
        self.run_id = self.run_id_for(config, self.method_cls.name)
        self.method_code = None if config.method in builtin_methods() else prov.method_code(self.method_cls)
        self.dir = Path(config.runs_dir) / self.run_id
        self.resume = resume
        self.show_progress = progress
        self.curve: list[dict] = []
        self._milestones = config.milestones
        self._next_milestone = 0  # index into self._milestones
        self._wall_offset = 0.0
        self._last_eval: tuple[str, dict] | None = None  # (weights digest, result) of the last evaluation
        # per-step trace (steps.jsonl): rows written, steps per ledger phase, the largest step's FLOPs
        self._trace = {"rows": 0, "phase_steps": {}, "max_step_flops": 0.0, "last_flops": 0.0}
        self.ctx: RunContext | None = None  # the method's context, kept after the run (its student, reports)

    @staticmethod
    def run_id_for(config: RunConfig, method_name: str | None = None) -> str:
        """`<method>__<suite>-<difficulty>__<profile>__s<seed>`, or the configured run name."""
        if config.run_name:
            return config.run_name
        name = method_name or get_method(config.method).name
        return f"{_slug(name)}__{config.suite}-{config.difficulty}__{config.profile}__s{config.seed}"

    # -- entry ----------------------------------------------------------------------------------
    def run(self) -> dict:
        """Run (or resume) under the run directory's lock; a fresh run that fails before its first
        checkpoint leaves no directory behind, so the corrected command starts cleanly. A run that is
        already complete with this configuration is not run again: its record is returned as it is
        (`self.already_complete`)."""
        self.already_complete = False
        if (done := self._complete_record()) is not None:
            self.already_complete = True
            return done
        self._check_dir(probe=True)
        self._check_eval_size()
        prepared = self.models()
        model, tokenizer = prepared.load_student()
        FlopSpec.from_config(model.config)  # an architecture the ledger cannot meter: refused before the directory
        self._check_positions(model)
        cuda = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []  # each reseeded
        with store.locked(self.dir / store.LOCK, what=f"run directory {self.dir}"):
            self._check_dir()  # again, under the lock: another writer may have finished meanwhile
            # torch's global RNG (a plugin's torch.rand, dropout in its own module) starts from the run's
            # seed, as a resumed run's starts from its checkpoint's; the caller's is left as it was
            with torch.random.fork_rng(devices=cuda):
                torch.manual_seed(self.config.seed)
                try:
                    return self._run(prepared, model, tokenizer)
                except Exception as exc:
                    kept = checkpoint.folder(self.dir).exists()
                    if not self.resume and not kept:
                        shutil.rmtree(self.dir, ignore_errors=True)
                    if kept and isinstance(exc, OSError) and no_space(exc):  # the final model, a trace, a log
                        where = f" writing {exc.filename}" if exc.filename else ""
                        raise RunError(f"no space left on device{where}: free disk space, then continue with "
                                       "--resume (the run keeps its last checkpoint)") from exc
                    raise
                finally:
                    if self.ctx is not None:  # it keeps no callback into this runner, so both are freed at once
                        self.ctx._detach()

    def _complete_record(self) -> dict | None:
        """The record of this very run when it is already complete (same fingerprint, made from the
        models the world holds now), else None; a complete run of another configuration, or made from
        other models, under the same name is an error."""
        summary_path, config_path = self.dir / "summary.json", self.dir / "config.json"
        if not (summary_path.is_file() and config_path.is_file()):
            return None
        try:
            written = store.read_json(config_path)
            summary = store.read_json(summary_path)
        except (OSError, ValueError, AttributeError) as exc:
            raise RunError(f"{self.dir} is complete but its config.json or summary.json cannot be read ({exc}); "
                           "move it away or choose another --out") from exc
        if why := record.record_damage(summary, self.run_id):
            raise RunError(f"{self.dir}/summary.json is not this run's record ({why}); move the run directory away "
                           "or choose another --out")
        if why := self.difference(written):
            raise RunError(f"{self.dir} is a complete run of another configuration ({why}); choose another --out "
                           "(or --seed), or move it away")
        if why := record.models_difference(summary, self.models().model_hashes()):
            raise RunError(f"{self.dir} is a complete run made from other models ({why}); choose another --out "
                           "(or --seed), or move it away")
        if why := record.code_difference(summary, self.method_code):
            raise RunError(f"{self.dir} is a complete run made by other code of the plugin ({why}); choose another "
                           "--out (or --seed), or move it away")
        return summary

    def difference(self, written: Any) -> str | None:
        """How the run a `config.json` describes (`written`, as read) differs from this one: its first
        value that differs, "KEY is X there, Y here", or None where it is this very run. Its fingerprint
        and its world's version (a world whose models the code now builds otherwise) must both match."""
        def what(config: Any, world_version: Any) -> dict[str, Any]:
            return dotted({**(config if isinstance(config, dict) else {}), "world_version": world_version})

        if not isinstance(written, dict):
            written = {}
        theirs = what(written.get("fingerprint"), (written.get("provenance") or {}).get("world_version", ABSENT))
        mine = what(self.fingerprint(), self.profile.world_version)
        if "device" not in theirs:  # a GPU run begun before fingerprints named the device: as it was
            mine.pop("device", None)
        if theirs == mine:
            return None
        key = next(k for k in [*mine, *theirs] if theirs.get(k, ABSENT) != mine.get(k, ABSENT))
        return f"{key} is {theirs.get(key, ABSENT)} there, {mine.get(key, ABSENT)} here"

    def _check_positions(self, model: Any) -> None:
        """Generation past the model's positions would fail late or, with a KV buffer sized to it,
        exhaust memory: refuse it before any work, and refuse a length whose KV cache for a single
        sequence would not fit in half the memory available (a batch needs many times that)."""
        c = model.config
        positions = getattr(c, "max_position_embeddings", None)
        wanted = max(self.config.rollout_tokens, self.config.eval_tokens)
        if positions and wanted >= positions:
            raise RunError(f"max_new_tokens {wanted} leaves no room for a prompt in the model's "
                           f"{positions} positions; use at most {positions // 2}")
        try:
            head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
            kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
            layers = c.num_hidden_layers
        except AttributeError:  # an architecture that names its sizes otherwise: positions are checked
            return
        kv_bytes = 2 * layers * kv_heads * head_dim * wanted * next(model.parameters()).element_size()
        available = available_bytes(next(model.parameters()).device)
        if kv_bytes > available / 2:
            raise RunError(f"max_new_tokens {wanted} needs {kv_bytes / 2**30:.1f} GiB of KV cache per sequence, "
                           f"more than half the {available / 2**30:.1f} GiB of memory available; use fewer")

    def _check_eval_size(self) -> None:
        """An `--eval-size` larger than every domain's held-out split is refused before any work: the
        record would say more prompts were scored than were (a standard benchmark's smaller test split,
        HumanEval's 164 beside MBPP's 500, is scored whole under a size that another domain fills)."""
        if self.config.eval_size is None:
            return
        sizes = {d: len(self.suite.heldout(d)) for d in self.suite.domains}
        if self.config.eval_size > max(sizes.values()):
            held = ", ".join(f"{d} {n}" for d, n in sizes.items())
            raise RunError(f"--eval-size {self.config.eval_size} is more held-out prompts per domain than "
                           f"{self.config.suite} has ({held}); use at most {max(sizes.values())}")

    def _run(self, prepared: Any, model: Any, tokenizer: Any) -> dict:
        self._open_dir(prepared)
        restored = self._load_checkpoint() if self.resume else None
        if restored is None:
            self.ledger = Ledger(self.dir / "ledger.jsonl")
            self._book_preparation(prepared)
        chat = self.profile.task_format == "hf"
        student = Policy("student", model, tokenizer, ledger=self.ledger, chat=chat)
        backend = make_backend(self.config.rollout)
        self.evaluator = Evaluator(self.suite, self.config.heldout_size, self.config.eval_tokens, backend=backend)
        ctx = RunContext(
            suite=self.suite,
            seed=self.config.seed,
            budget_flops=self.config.budget,
            ledger=self.ledger,
            student=student,
            backend=backend,
            teacher_loader=lambda name: self._load_teacher(prepared, name),
            max_new_tokens=self.config.rollout_tokens,
            on_step=lambda stats: self._after_step(ctx, stats),
            on_boundary=lambda edge, phase: self._boundary(ctx, edge, phase),
            phase_runner=phase_runner(self.config.phase_executor),
            on_progress=self._phase_progress,
            on_replay=self._trace_step,
            eval_max_new_tokens=self.config.eval_tokens,
            heldout_size=self.config.heldout_size,
            reads_heldout=getattr(self.method_cls, "reads_heldout", None),
            **(restored or {}),
        )
        self.ctx = ctx
        self.tracker = make_tracker(self.config.report_to, self.dir, name=self.run_id, config=self._config_record())
        try:
            return self._train(ctx, prepared)
        except BaseException as exc:
            self.tracker.close(None)  # a failed run's writer threads and files end with it
            self._log_end(exc)
            raise

    def _train(self, ctx: RunContext, prepared: Any) -> dict:
        self._t0 = self._last_checkpoint = time.perf_counter()
        with progress(self.config.budget, enabled=self.show_progress, log=self.dir / "progress.log",
                      since=ctx.spent_flops) as bar:
            self.bar = bar
            bar.line(f"resumed from its checkpoint at {ctx.spent_flops:.3e} counted FLOPs" if ctx.spent_flops > 0
                     else f"{self.run_id}: a budget of {self.config.budget:.1e} counted FLOPs")
            if not self.curve:
                self._evaluate(ctx, "start")
            with self.ledger.method_runs():
                self._run_method(ctx)
            ctx._finish()
            self._within_budget(ctx.spent_flops)
            if ctx.spent_flops == 0:
                raise RunError(f"method {self.method_cls.name} returned without spending a counted FLOP: its record "
                               "would be the base model's, ranked as a method; a method trains before it stops")
            if not self._trace["rows"]:
                raise RunError(f"method {self.method_cls.name} spent {ctx.spent_flops:.3e} counted FLOPs without "
                               "calling ctx.step_done(): the runner evaluates, checkpoints and stops a run at its "
                               "steps")
            # the deliverable as it is: after the last step's FLOPs, or a student declared (`set_student`) since
            # the last evaluation (known where it was made here or its checkpoint kept it)
            changed = self._last_eval is not None and self._last_eval[0] != state_digest(ctx.student._model)
            if self.curve[-1]["flops"] < ctx.spent_flops or changed:
                self._evaluate(ctx, "final")
        self.ledger.flush()
        self._save_final(ctx.student)
        summary = self._summary(prepared)
        store.write_json(self.dir / "summary.json", summary)
        spent, budget = ctx.spent_flops, self.config.budget
        early = "; the method stopped before its budget" if spent < budget else ""
        self.bar.line(f"complete: {spent:.3e} counted FLOPs, {spent / budget:.0%} of the budget{early}; last "
                      f"accuracy {100 * self.curve[-1]['accuracy']:.1f}%")
        self.tracker.close(summary)
        return summary

    def _log_end(self, exc: BaseException) -> None:
        """The log of a run that stopped once it had begun says how (a refusal before that leaves its
        directory untouched)."""
        detail = (str(exc).splitlines() or [""])[0]
        how = "interrupted" if isinstance(exc, KeyboardInterrupt) else \
            f"failed ({type(exc).__name__}{': ' + detail if detail else ''})"
        news_line(f"{how}; the run keeps its last checkpoint, if it has one (--resume continues from it)",
                  self.dir / "progress.log", None)

    def _load_teacher(self, prepared: Any, name: str) -> Policy:
        """A teacher for the method. The external one is built here if it is neither built nor shipped, and
        the run's log says so (its warm-up's own lines go to the world's `prepare.log`)."""
        def building() -> None:
            self.bar.line(f"building the external teacher ({prepared.profile.warmup.teacher_steps} warm-up steps, "
                          f"recorded, not counted); its progress: {prepared.folder / prepare.PREPARE_LOG}")

        return prepared.load_teacher(name, self.ledger, on_build=building)

    def _run_method(self, ctx: RunContext) -> None:
        """Make the method and run it. A plugin's exception (in `__init__` or `run`) is the plugin's
        fault: one line naming it; a built-in's keeps its traceback."""
        if self.config.method in builtin_methods():
            self.method_cls(self.method_config).run(ctx)
            return
        try:
            self.method_cls(self.method_config).run(ctx)
        except (RunError, KeyboardInterrupt):
            raise
        except Exception as exc:
            raise RunError(f"method {self.method_cls.name} ({self.config.method}) failed: "
                           f"{type(exc).__name__}: {exc}") from exc

    def _save_final(self, student: Policy) -> None:
        """The deliverable as a Hugging Face folder (`final/`): loadable by transformers, lm-eval,
        or `bench run --teacher NAME=RUN/final` (a calibration's expert as a teacher)."""
        save_model(student._model, student._tokenizer, self.dir / "final")

    def models(self) -> Any:
        """The tiny profile builds its models (`bench prepare`); hf runs use the folders given."""
        if self.profile.task_format == "hf":
            c = self.config
            return local_models(c.model, c.external, c.teachers, c.device)
        teachers = {name: resolve_model(path) for name, path in self.config.teachers}
        prepared = prepare.prepare(self.profile, progress=self.show_progress, teacher=False)  # teacher: on first use
        prepared.extra_teachers = teachers
        return prepared

    # -- run directory --------------------------------------------------------------------------
    def _check_dir(self, probe: bool = False) -> None:
        """Refuse, before any work, to overwrite a run or to resume one that is not there. `probe` (when
        this process does not hold the directory's lock): a run another process is writing is named as
        such, with its PID, rather than sent to `--resume`."""
        if self.resume:
            if not (self.dir / "config.json").exists():
                raise RunError(f"nothing to resume: {self.dir} has no config.json")
            if (self.dir / "summary.json").exists():
                raise RunError(f"nothing to resume: {self.dir} is complete (summary.json is written)")
        elif self.dir.is_dir() and any(p.name != store.LOCK for p in self.dir.iterdir()):
            if probe:
                with store.locked(self.dir / store.LOCK, what=f"run directory {self.dir}"):
                    pass
            raise RunError(f"{self.dir} already exists; pass --resume to continue it or choose --runs elsewhere")

    def _open_dir(self, prepared: Any) -> None:
        """Write `config.json`, with the weights hashes of the models the run starts from; or, resuming,
        check that the run was started with this configuration and from the models the world holds now."""
        config_path = self.dir / "config.json"
        hashes = prepared.model_hashes()
        if self.resume:
            written = store.read_json(config_path)
            if why := self.difference(written):
                raise RunError(f"{self.dir} was started with a different configuration ({why}); not resuming")
            if why := record.models_difference(written, hashes):
                raise RunError(f"{self.dir} was started from other models ({why}); not resuming")
            changed = record.note_code(written)  # the project's code changed since the run began
            if why := record.code_difference(written, self.method_code):  # a plugin fixed before resuming
                made = written["provenance"]
                made.setdefault("method_code_at_start", made["method_code"])
                made["method_code"] = self.method_code  # the code that finishes the run, and the code it began with
                changed = True
            if self.method_code and written["provenance"].get("method_source") != self.config.method:
                made = written["provenance"]  # the fix may be in another file: the one that finishes the run
                made.setdefault("method_source_at_start", made.get("method_source"))
                made["method_source"] = self.config.method
                changed = True
            if changed:
                store.write_json(config_path, written)
            return
        written = self._config_record()
        written["provenance"]["model_hashes"] = hashes
        self.dir.mkdir(parents=True, exist_ok=True)
        store.write_json(config_path, written)

    def fingerprint(self) -> dict:
        """What makes this run (config.json's fingerprint): its method and resolved config, suite and its
        hash, profile, seed, budget and evaluation settings. Nothing is built or written."""
        return record.fingerprint(self.method_cls.name, self.method_config, self.config, self.suite)

    def _config_record(self) -> dict:
        return record.config_record(self.run_id, self.method_cls.name, self.method_config, self.config,
                                    self.profile, self.suite, self.method_code)

    def _book_preparation(self, prepared: Any) -> None:
        """Copy the shared base's and external teacher's training costs in: recorded, not counted."""
        for row in prepared.ledger_rows():
            self.ledger.charge(**row)
        self.ledger.flush()

    # -- milestones -----------------------------------------------------------------------------
    def _after_step(self, ctx: RunContext, stats: dict) -> None:
        spent = ctx.spent_flops
        self._within_budget(spent)
        phase = current_phase()
        self._trace_step(spent, phase, stats)
        due = time.perf_counter() - self._last_checkpoint >= self.config.checkpoint_every_s
        if self._next_milestone < len(self._milestones) and spent >= self._milestone_flops(self._next_milestone):
            self._evaluate(ctx, "milestone")
            while self._next_milestone < len(self._milestones) and spent >= self._milestone_flops(self._next_milestone):
                self._next_milestone += 1
            due = True
        elif phase == "distill" and self.config.distill_eval_every and \
                self._trace["phase_steps"][phase] % self.config.distill_eval_every == 0:
            self._evaluate(ctx, "distill")
        if due and not ctx.should_stop():  # at each milestone, and every few minutes whatever the budget
            self._save_checkpoint(ctx)
        # after any evaluation, whose line is this step's: a quiet minute's line never doubles it
        self.bar.update(spent, self.curve[-1]["accuracy"] if self.curve else None)

    def _within_budget(self, spent: float) -> None:
        """A step may end past the budget, none may begin there (`refuse_past_budget`)."""
        refuse_past_budget(f"method {self.method_cls.name}", spent, self._trace["last_flops"], self.config.budget)

    def _phase_progress(self, spent: float, line: str | None) -> None:
        """Parallel phases' progress: the bar, and a line in the log when one of them ends."""
        self.bar.update(spent, self.curve[-1]["accuracy"] if self.curve else None)
        if line is not None:
            self.bar.line(line)

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
        for key, value in stats.items():  # numbers (`RunContext.step_done` refuses anything else)
            row[key] = float(value) if math.isfinite(value) else None
        store.append_row(self.dir / "steps.jsonl", row)
        self.tracker.step(row)

    def _evaluate(self, ctx: RunContext, label: str, **extra: str) -> None:
        # Greedy evaluation is a function of the weights: while they are unchanged (opd-multi's student
        # during its experts' training) the last result stands for this point too.
        digest = state_digest(ctx.student._model)
        if self._last_eval is not None and self._last_eval[0] == digest:
            result = self._last_eval[1]
        else:
            # the point keeps its sample completions in curve.jsonl; the record lists them apart (`samples`)
            with self.ledger.engine_booking():
                result = self.evaluator.evaluate(ctx.student, samples_per_domain=SAMPLES_PER_DOMAIN)
            self._last_eval = (digest, result)
        point = {
            "flops": ctx.spent_flops,
            "wall_s": round(self._wall_offset + time.perf_counter() - self._t0, 3),
            "phase": label,
            **extra,
            "ledger_phase": current_phase(),
            "phase_flops": self.ledger.by_phase("counted"),
            **result,
        }
        if self.config.save_milestones:
            folder = f"milestones/{len(self.curve):03d}_{ctx.spent_flops:.3e}"
            save_model(ctx.student._model, ctx.student._tokenizer, self.dir / folder)
            point["model_dir"] = folder
        self.curve.append(point)
        store.append_row(self.dir / "curve.jsonl", point)
        self.tracker.evaluation(point)
        self.bar.update(ctx.spent_flops, point["accuracy"], evaluated=True)

    # -- checkpoints ----------------------------------------------------------------------------
    def _save_checkpoint(self, ctx: RunContext) -> None:
        self._last_checkpoint = time.perf_counter()
        rows = self.ledger.flush()
        checkpoint.save(self.dir, ctx._checkpoint(), ledger_rows=rows, curve_rows=len(self.curve),
                        next_milestone=self._next_milestone, trace=self._trace,
                        wall_s=self._wall_offset + time.perf_counter() - self._t0, last_eval=self._last_eval)

    def _load_checkpoint(self) -> dict | None:
        """The context's keyword arguments from the last checkpoint, with the ledger, curve and step
        trace cut back to it; None (and the run's files removed) if it was killed before one."""
        restored = checkpoint.load(self.dir)
        if restored is None:
            # Killed before the first checkpoint: start over, keeping the config.
            for name in ("ledger.jsonl", "curve.jsonl", "steps.jsonl", "summary.json"):
                (self.dir / name).unlink(missing_ok=True)
            return None
        self.ledger = Ledger(self.dir / "ledger.jsonl", keep_rows=restored.ledger_rows)
        self.curve = store.read_jsonl(self.dir / "curve.jsonl", keep=restored.curve_rows)
        store.rewrite_jsonl(self.dir / "curve.jsonl", self.curve)
        (self.dir / "summary.json").unlink(missing_ok=True)
        self._next_milestone = restored.next_milestone
        self._trace = restored.trace
        steps = store.read_jsonl(self.dir / "steps.jsonl", keep=self._trace["rows"])
        store.rewrite_jsonl(self.dir / "steps.jsonl", steps)
        self._wall_offset = restored.wall_s
        self._last_eval = restored.last_eval  # a resumed run skips the same evaluations as a whole one
        torch.set_rng_state(restored.torch_rng)
        return restored.context

    # -- result ---------------------------------------------------------------------------------
    def _summary(self, prepared: Any) -> dict:
        wall_s = round(self._wall_offset + time.perf_counter() - self._t0, 3)
        provenance = store.read_json(self.dir / "config.json")["provenance"]
        return record.summary(
            run_id=self.run_id, method=self.method_cls.name, method_config=self.method_config, config=self.config,
            suite=self.suite, curve=self.curve, ledger=self.ledger, reports=self.ctx._reports,
            phase_streams=self.ctx._phase_streams, heldout_reads=self.ctx._heldout_reads,
            steps=store.read_jsonl(self.dir / "steps.jsonl"),
            max_step_flops=self._trace["max_step_flops"],
            provenance=provenance, model_hashes=prepared.model_hashes(), device_type=self.ctx.student.device.type,
            wall_s=wall_s,
        )


def available_bytes(device: torch.device) -> float:
    """Free memory on `device`: the GPU's, or the host's available memory."""
    if device.type == "cuda":
        return float(torch.cuda.mem_get_info(device)[0])
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return math.inf


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)[:60]
