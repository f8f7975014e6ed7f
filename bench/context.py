"""RunContext: the one object a method works through (samplers, policies, rollout, updates, budget).

The runner builds it; `bench.api` re-exports it. Every model a method can reach is a metered
`Policy`, every update goes through `update` / `pg_step` / `sft_step` (the update engine of
`bench.update`), and `step_done()` hands control back to the runner after each step so that it can
evaluate at FLOP milestones, checkpoint, and stop at the budget.

The public surface (docs/design.md, The method contract) is everything without a leading
underscore. The ledger, the rollout engine, the suite, the generator and the registered policies
are the engine's: the runner and the phase executors reach them through the `_`-prefixed members.
"""

from __future__ import annotations

import contextlib
import hashlib
import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from bench.accounting.ledger import Ledger, ledger_context
from bench.evaluation import Evaluator
from bench.policy import Policy
from bench.rollout.base import RolloutBackend, Rollouts, padded_logprobs, to_padded
from bench.update import LossFn, completion_width, length_buckets, pg_update, run_update, sft_step


# How `map_phases` runs its calls when not in order on the run's own context (`bench.run.phases`):
# (context, fn, keys) -> one result per key, each with the child's ledger rows, policies and state,
# or None: run them in order on the context after all.
PhaseRunner = Callable[["RunContext", Callable[["RunContext", str], Any], list[str]], "list[Any] | None"]
TRACE_KEYS = ("step", "flops", "phase")  # a step's trace row's own fields, set by the runner (`step_done`)


class Sampler:
    """A named, deterministic stream of training problems; its position survives a resume."""

    def __init__(self, suite: Any, seed: int, name: str, domains: Sequence[str] | None, skip: int = 0) -> None:
        self.domains = tuple(domains) if domains else None
        digest = hashlib.sha256(f"{seed}:{name}:{','.join(domains or [])}".encode()).digest()
        self._it: Iterator[Any] = suite.train_sampler(int.from_bytes(digest[:4], "little"), domains)
        self.drawn = 0
        for _ in range(skip):
            next(self._it)
            self.drawn += 1

    def next(self, k: int) -> list[Any]:
        out = [next(self._it) for _ in range(k)]
        self.drawn += k
        return out


class RunContext:
    """What a method may use. Built by `bench.run.runner`; see `bench.api` for the adapter contract."""

    def __init__(
        self,
        *,
        suite: Any,
        seed: int,
        budget_flops: float,
        ledger: Ledger,
        student: Policy,
        backend: RolloutBackend,
        teacher_loader: Callable[[str], Policy],
        max_new_tokens: int,
        on_step: Callable[[dict], None],
        state: dict | None = None,
        policy_states: dict[str, dict] | None = None,
        sampler_positions: dict[str, int] | None = None,
        generator: torch.Generator | None = None,
        phase_runner: PhaseRunner | None = None,
        on_boundary: Callable[[str, str], None] | None = None,
        eval_max_new_tokens: int | None = None,
        heldout_size: int | None = None,
        reports: dict | None = None,
        student_name: str | None = None,
        phase_streams: str | None = None,
        on_progress: Callable[[float, str | None], None] | None = None,
        on_replay: Callable[[float, str, dict], None] | None = None,
        reads_heldout: str | None = None,
        heldout_reads: int = 0,
    ) -> None:
        self._suite = suite
        self._seed = seed
        self._budget_flops = float(budget_flops)
        self._ledger = ledger
        self._backend = backend
        self._max_new_tokens = max_new_tokens
        self.state: dict = state if state is not None else {}  # the method's own, saved with checkpoints
        self._generator = generator or torch.Generator().manual_seed(seed)
        self._teacher_loader = teacher_loader
        self._on_step = on_step
        self._on_boundary = on_boundary or (lambda edge, phase: None)
        # parallel phases (`map_phases`): their progress (counted FLOPs in all, a line to log or None)
        # while they run, and each of their steps (counted FLOPs after it, phase, stats) once merged
        self._on_progress = on_progress or (lambda spent, line: None)
        self._on_replay = on_replay or (lambda spent, phase, stats: None)
        self._eval_max_new_tokens = eval_max_new_tokens or max_new_tokens
        self._heldout_size = heldout_size
        # why the method reads held-out accuracy (its `reads_heldout`; None: it may not), and how often it has
        self._reads_heldout = reads_heldout
        self._heldout_reads = heldout_reads
        self._evaluators: dict[tuple, Any] = {}
        self._reports: dict[str, Any] = reports if reports is not None else {}
        self._policy_states = policy_states or {}  # checkpointed policies not re-created yet
        self._teachers: set[str] = set()  # policies loaded by `teacher`: made outside, never checkpointed
        # teachers and the clones and snapshots made from them: trained outside the budget (`external`),
        # so never the deliverable (`set_student`)
        self._from_teacher: set[str] = set()
        self._restored_positions = sampler_positions or {}  # until their sampler is re-created
        self._samplers: dict[str, Sampler] = {}
        self._student_name = student_name  # the deliverable, when the method chose another (set_student)
        self._policies: dict[str, Policy] = {}
        self._student = self._register(student)
        self._phase_runner = phase_runner  # how `map_phases` runs; None: in order, on this context
        self._phase_streams = phase_streams  # how its phases drew their samples (`map_phases`); None: no phases
        self._finished = False

    # -- problems -------------------------------------------------------------------------------
    @property
    def domains(self) -> tuple[str, ...]:
        """The suite's domains, in order."""
        return tuple(self._suite.domains)

    @property
    def max_new_tokens(self) -> int:
        """The run's rollout limit (tokens per completion), the default of `rollout`."""
        return self._max_new_tokens

    def sampler(self, name: str = "train", domains: Sequence[str] | None = None) -> Sampler:
        """A deterministic training-problem stream (uniform over `domains`, default all); the same
        name gives the same stream, so it must be asked for with the same domains."""
        if name not in self._samplers:
            self._samplers[name] = Sampler(
                self._suite, self._seed, name, domains, skip=self._restored_positions.get(name, 0)
            )
        made = self._samplers[name]
        if made.domains != (tuple(domains) if domains else None):
            raise ValueError(f"sampler {name!r} draws from {', '.join(made.domains or ('every domain',))}, not "
                             f"{', '.join(domains or ('every domain',))}: name another sampler for other domains")
        return made

    # -- policies -------------------------------------------------------------------------------
    @property
    def student(self) -> Policy:
        """The run's deliverable: the policy the runner evaluates at milestones (see `set_student`)."""
        return self._student

    def _descends(self, source: Policy, name: str) -> None:
        """Note that policy `name` is made from `source`, one of this run's: a teacher's descendant stays one."""
        self._made_here(source, "clone and snapshot")
        if source.name in self._from_teacher:
            self._from_teacher.add(name)

    def _register(self, policy: Policy) -> Policy:
        saved = self._policy_states.pop(policy.name, None)
        if saved is not None:
            policy._load_state(saved)
        self._policies[policy.name] = policy
        if policy.name == self._student_name:
            # A resumed run's deliverable comes back when the method re-creates it (set_student).
            self._student = policy
        return policy

    def clone(self, policy: Policy, name: str) -> Policy:
        """A trainable copy of `policy` (e.g. a domain expert), metered and checkpointed as `name`."""
        if name in self._policies:
            return self._policies[name]
        self._descends(policy, name)
        return self._register(policy._clone(name))

    def snapshot(self, policy: Policy, name: str) -> Policy:
        """A frozen copy of `policy` (e.g. a self-teacher), metered and checkpointed as `name`."""
        if name in self._policies:
            return self._policies[name]
        self._descends(policy, name)
        return self._register(policy._clone(name, trainable=False))

    def teacher(self, name: str = "external") -> Policy:
        """A frozen teacher prepared outside the run (its own training is not counted; its use is)."""
        if name not in self._policies:
            with self._ledger.engine_booking():  # its training is booked `external` once, as it is loaded
                self._policies[name] = self._teacher_loader(name)
            self._teachers.add(name)
            self._from_teacher.add(name)
        return self._policies[name]

    def _made_here(self, policy: Any, what: str) -> None:
        """Refuse a policy this context did not make: only its own policies are metered and booked
        as their calls say (an object that stands in for one could train inside an evaluation)."""
        if not any(policy is mine for mine in self._policies.values()):
            raise ValueError(f"{what} takes a policy of this run (ctx.student, ctx.clone, ctx.snapshot or "
                             f"ctx.teacher), got {type(policy).__name__}")

    def set_student(self, policy: Policy) -> None:
        """Declare which policy is the run's deliverable (evaluated at milestones): the student or a
        policy made from it, never a teacher or a copy of one (a teacher's training is not counted)."""
        self._made_here(policy, "set_student")
        if policy.name in self._from_teacher:
            raise ValueError(f"set_student takes the student or a policy made from it; {policy.name!r} is a teacher "
                             "or made from one, whose training is not counted toward the budget")
        self._student = policy
        self._student_name = policy.name

    # -- compute --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Book everything inside to ledger phase `name` (`train`, `expert:math`, `distill`, ...).

        Entering and leaving a phase are boundaries: the runner evaluates the student there (when
        counted FLOPs moved since its last evaluation), so a phased method's curve has a point at the
        end of each expert and at the start of distillation.
        """
        with ledger_context(phase=name):
            self._on_boundary("start", name)
            yield
            self._on_boundary("end", name)

    def rollout(
        self,
        policy: Policy,
        problems: Sequence[Any],
        n: int = 1,
        *,
        temperature: float = 1.0,
        max_new_tokens: int | None = None,
        greedy: bool = False,
    ) -> Rollouts:
        """Sample `n` completions per problem and score them with the suite's verifiers.

        The returned tensors live on the CPU whatever the model's device (the update moves them).
        """
        prompts = [policy.encode_prompt(p.prompt) for p in problems]
        with policy._clock("rollout"):
            batch = self._backend.generate(
                policy._model,
                prompts,
                n=n,
                max_new_tokens=max_new_tokens or self._max_new_tokens,
                temperature=temperature,
                eos_id=policy.stop_ids,
                greedy=greedy,
                generator=self._generator,
            )
        input_ids, attention_mask, completion_mask = to_padded(batch, policy.pad_id)
        completions = [policy.decode(ids) for ids in batch.completion_ids]
        rows = [p for p in problems for _ in range(n)]
        rewards = torch.tensor(self._suite.score_many(rows, completions), dtype=torch.float32)
        return Rollouts(
            problems=list(problems),
            n=n,
            input_ids=input_ids,
            attention_mask=attention_mask,
            completion_mask=completion_mask,
            completions=completions,
            rewards=rewards,
            lengths=torch.as_tensor(batch.lengths, dtype=torch.float32),
            logprobs=padded_logprobs(batch).cpu() if batch.logprobs else None,
        )

    def score(self, policy: Policy, rollouts: Rollouts) -> torch.Tensor:
        """Per-token log-probs [B, T] (CPU, fp32) of the rollouts under `policy`, no grad (kind `score`)."""
        out = torch.zeros(rollouts.input_ids.shape)  # [B, T]
        with torch.no_grad(), ledger_context(kind="score"), policy._clock("score"):
            for rows, width in length_buckets(rollouts.attention_mask, vocab=policy.vocab_size):
                out[rows, :width] = policy.logprobs(
                    rollouts.input_ids[rows, :width], rollouts.attention_mask[rows, :width],
                    keep=completion_width(rollouts.completion_mask[rows, :width]),
                ).float().cpu()
        return out

    def update(
        self,
        policy: Policy,
        rollouts: Any,
        loss_fn: LossFn,
        *,
        lr: float,
        epochs: int = 1,
        weighting: str = "rows",
        warmup_updates: int = 0,
    ) -> dict[str, float]:
        """`epochs` optimiser steps of `policy` on `rollouts` under a loss of the method's own.

        `loss_fn(bucket)` gets one length bucket (`bench.api.Bucket`: its rows, the policy's
        log-probs [b, width] with gradients, the completion mask, `take()` to cut batch tensors to
        it) and returns the bucket's loss, or the loss and a dict of float statistics. Losses are
        combined across buckets by `weighting`: `rows` when the loss is a mean over rows, `tokens`
        when it is a mean over completion tokens. Bucketing by length, the cap on logits per micro-
        batch, the update's FLOPs and its wall clock are the engine's, as for `pg_step`.
        Returns {"loss", <the loss function's statistics>, "grad_norm"} (of the last epoch).
        """
        self._trains(policy, "update")
        return run_update(policy, rollouts, loss_fn, lr=lr, epochs=epochs, weighting=weighting,
                          warmup_updates=warmup_updates)

    def pg_step(
        self,
        policy: Policy,
        rollouts: Rollouts,
        advantages: torch.Tensor,
        *,
        lr: float,
        loss_type: str = "grpo",
        epochs: int = 1,
        clip_eps: float = 0.2,
        ref: Policy | None = None,
        kl_coef: float = 0.0,
        warmup_updates: int = 0,
    ) -> dict[str, float]:
        """Policy-gradient update(s) on the rollouts; advantages [B] or per-token [B, T].

        The first epoch's log-probs (detached) are the old policy: with one epoch the ratio is 1 and
        the loss is plain REINFORCE with group baselines; more epochs clip the ratio at `clip_eps`.
        `loss_type` (`LOSS_TYPES`) is the normalisation; with `ref` and `kl_coef`, a k3 KL term to
        `ref` (scored here, kind `score`). Returns {"loss", "clip_frac", "clip_region", "grad_norm"}
        (`bench.losses.policy_gradient_loss` defines the two clip shares).
        """
        self._trains(policy, "pg_step")
        ref_logprobs = self.score(ref, rollouts) if ref is not None and kl_coef else None
        return pg_update(policy, rollouts, advantages, lr=lr, loss_type=loss_type, epochs=epochs,
                         clip_eps=clip_eps, ref_logprobs=ref_logprobs, kl_coef=kl_coef,
                         warmup_updates=warmup_updates, max_completion_tokens=self._max_new_tokens)

    def sft_step(self, policy: Policy, prompts: Sequence[str], targets: Sequence[str], *, lr: float) -> float:
        """One supervised step: maximise log p(target + EOS | prompt). Returns the loss."""
        self._trains(policy, "sft_step")
        return sft_step(policy, prompts, targets, lr=lr)

    def _trains(self, policy: Policy, what: str) -> None:
        """Refuse to train a policy this run did not make, or a frozen one, before any work is done."""
        self._made_here(policy, what)
        if not policy.trainable:
            raise ValueError(f"{what}: {policy.name!r} is frozen (a teacher or a snapshot); train ctx.student or a "
                             "ctx.clone")

    def evaluate(
        self, policy: Policy, *, split: str = "validation", domains: Sequence[str] | None = None, size: int = 200
    ) -> dict:
        """Greedy pass@1 of `policy` on the first `size` prompts per domain of `split`.

        `validation` (default) is a fixed sample of the training distribution, disjoint from the
        held-out split: what a method may stop on (an expert's plateau). Deciding when to stop is part
        of making the student, so its FLOPs are counted, in the current phase, as rollouts. `heldout`
        is the split the leaderboard reports, for measurement protocols (a recovery target): booked
        `eval`, recorded, never counted; only a method that says why (its class's `reads_heldout`)
        may read it, outside `map_phases`, and its record counts the reads (`heldout_reads`).
        Returns {accuracy, domain_accuracy, mean_length, ...}.
        """
        if split not in ("validation", "heldout"):
            raise ValueError(f"split must be 'validation' or 'heldout', got {split!r}")
        self._made_here(policy, "evaluate")
        if split == "heldout":
            if self._reads_heldout is None:
                raise ValueError("evaluate(split='heldout') reads the accuracy the run is scored on: a method that "
                                 "stops or chooses by it chooses on the test set. Stop on split='validation' "
                                 "(counted); a measurement protocol says why it reads held-out accuracy in its "
                                 "class attribute `reads_heldout`, and reads it outside ctx.map_phases")
            self._heldout_reads += 1
        chosen = tuple(domains or self.domains)
        key = (split, chosen, size)
        if key not in self._evaluators:
            self._evaluators[key] = Evaluator(self._suite, size, self._eval_max_new_tokens, backend=self._backend,
                                              split=split, domains=chosen, counted=split == "validation")
        # a validation check is the method's work, where it stands; a held-out one is the engine's
        with contextlib.nullcontext() if split == "validation" else self._ledger.engine_booking():
            return self._evaluators[key].evaluate(policy)

    @property
    def heldout_size(self) -> int | None:
        """Held-out prompts per domain the runner scores the student on (None: not known here, as in a
        parallel phase's child): `evaluate(..., split="heldout", size=ctx.heldout_size)` scores another
        policy on exactly the student's held-out prompts."""
        return self._heldout_size

    def report(self, name: str, value: Any) -> None:
        """Record a method-specific result in the run's record (`method_metrics`), e.g. the FLOPs an
        expert spent after it stopped improving. `recovery` fills the record's recovery block.
        The runner reads nothing else of a method: `state` is saved with checkpoints, never read."""
        self._reports[name] = value

    # -- budget and control ---------------------------------------------------------------------
    @property
    def budget_flops(self) -> float:
        """The run's counted-FLOP budget; read-only: the runner, not the method, owns it."""
        return self._budget_flops

    @property
    def spent_flops(self) -> float:
        """Counted FLOPs so far (everything toward the budget)."""
        return self._ledger.counted_flops

    def phase_flops(self, prefix: str) -> float:
        """Counted FLOPs of phases starting with `prefix` (e.g. `expert:` or `distill`)."""
        return self._ledger.total("counted", phase_prefix=prefix)

    @property
    def remaining_flops(self) -> float:
        """What is left of the budget (never negative)."""
        return max(0.0, self.budget_flops - self.spent_flops)

    def should_stop(self) -> bool:
        """True once the counted FLOPs reach the budget (or the method has returned)."""
        return self._finished or self.spent_flops >= self.budget_flops

    def step_done(self, **stats: float) -> None:
        """Tell the runner a step ended: it may evaluate, checkpoint and update progress here. `stats`
        are the step's numbers for its trace (`reward=0.4, loss=...`); `step`, `flops` and `phase`
        are the runner's, and a value that is not a number (a tensor: `.item()` it) is refused."""
        for name, value in stats.items():
            if name in TRACE_KEYS:
                raise ValueError(f"step_done: {name!r} is the runner's own field of a step's trace; name the "
                                 "statistic otherwise")
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise ValueError(f"step_done: {name}={type(value).__name__} is not a number; a step's statistics "
                                 "are numbers (a tensor's `.item()`)")
        self._on_step(stats)

    # -- independent phases ---------------------------------------------------------------------
    def map_phases(self, fn: Callable[[RunContext, str], Any], keys: Sequence[str]) -> dict[str, Any]:
        """`fn(ctx, key)` for each key, e.g. one expert per domain; returns {key: fn's result}.

        Sequential on this context by default; with the run's phase executor `ray` (or `isolated`)
        each call runs in a child context, as a parallel Ray task, and its ledger rows, the policies
        it created, its sampler positions and state are merged back here in key order; then the
        runner gets one `step_done` (it evaluates and checkpoints after the merge). `fn` must be
        picklable (a module-level function or a `functools.partial` of one). See `bench.run.phases`.
        """
        # None: in order on this context, by default or where the executor could not keep to the budget
        results = None if self._phase_runner is None else self._phase_runner(self, fn, list(keys))
        if results is None:
            self._phases_drew("shared")
            reads, self._reads_heldout = self._reads_heldout, None  # as in a child: no held-out reads
            try:
                return {key: fn(self, key) for key in keys}
            finally:
                self._reads_heldout = reads
        self._phases_drew("own")
        start = self.spent_flops
        for result in results:
            before = self.spent_flops
            self._merge_child(result)
            for own, phase, stats in result.steps:  # traced as if the phases had run in key order
                self._on_replay(before + own, phase, stats)
        if self.spent_flops > start:  # phases a resumed run finds done add nothing: no step, no trace row
            self.step_done()
        return {r.key: r.value for r in results}

    # -- engine side: the runner's and the phase executors' access ------------------------------
    def _phases_drew(self, streams: str) -> None:
        """Note how a `map_phases` call's phases drew samples: `shared` (in order on this context, one
        stream) or `own` (child contexts, one stream each); `mixed` once two calls differ. The numbers
        of a method that splits depend on it, so its record keeps it (`phase_streams`)."""
        known = self._phase_streams
        self._phase_streams = streams if known in (None, streams) else "mixed"

    def _finish(self) -> None:
        """The method returned: `should_stop()` is True from now on."""
        self._finished = True

    def _detach(self) -> None:
        """The run ended: drop the runner's callbacks, which keep it (and through it this context, its
        models and their memory) alive until the garbage collector finds the cycle."""
        self._teacher_loader = self._on_step = self._phase_runner = None
        self._on_boundary = self._on_progress = self._on_replay = None

    def _progress(self, children_flops: float, line: str | None) -> None:
        """Parallel phases' news: their counted FLOPs so far (beyond this context's), a line or None."""
        self._on_progress(self.spent_flops + children_flops, line)

    def _sampler_positions(self) -> dict[str, int]:
        """Problems drawn per sampler; restored or merged positions stay until their sampler is re-created."""
        return {**self._restored_positions, **{name: s.drawn for name, s in self._samplers.items()}}

    def _checkpoint(self) -> dict[str, Any]:
        """What a checkpoint saves of this context (`bench.run.checkpoint`)."""
        return {
            # with the restored states of policies the method has not re-created yet (a resumed run's); not
            # the teachers, which a resumed run loads again as they were (a named hf teacher may be 7B)
            "policies": {**self._policy_states,
                         **{name: p._state() for name, p in self._policies.items() if name not in self._teachers}},
            "generator": self._generator.get_state(),
            "state": self.state,
            "samplers": self._sampler_positions(),
            "reports": self._reports,
            "student": self._student_name,
            "phase_streams": self._phase_streams,
            "heldout_reads": self._heldout_reads,
        }

    def _merge_child(self, result: Any) -> None:
        self._ledger.merge(result.rows)
        for name, state in result.policies.items():
            make = self.clone if state["trainable"] else self.snapshot
            make(self._student, name)._load_state(state)
        for name, drawn in result.sampler_positions.items():
            if name in self._samplers and self._samplers[name].drawn != drawn:
                raise RuntimeError(f"sampler {name!r} was drawn from by a parallel phase and by the run")
            self._restored_positions[name] = drawn
        _merge_state(self.state, result.state)
        self._reports.update(result.reports)


def _merge_state(into: dict, update: dict) -> None:
    """Merge a child's `state` into the parent's, dict by dict; on a clash the child's value wins."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge_state(into[key], value)
        else:
            into[key] = value

