"""Independent phases of one run (opd-multi's experts) in child contexts, optionally as Ray tasks.

`RunContext.map_phases(fn, keys)` calls `fn(ctx, key)` once per key. How depends on the run's
`phase_executor` (`RunConfig.phase_executor`, set to "ray" by `bench sweep --executor ray`), which the
runner hands the context as `phase_runner(executor)`:

- `sequential` (default): each call on the run's own context, one after another.
- `ray`: each call is a Ray task (1 CPU; on CUDA the run task's GPU share) with a child context: a copy
  of the student, its own in-memory ledger, and its own sampling generator seeded from (seed, key).
  The task hands back its new ledger rows, the weights and optimiser state of the policies it
  created, its sampler positions and its `ctx.state`; the parent merges them in key order, so every
  FLOP is booked in the run's ledger under the phase the call charged it to (`expert:math`, ...).
- `processes` (`bench run`'s default on CPU): the same child contexts in a pool of local processes,
  one per key up to the CPU count, each on one torch thread, as the `ray` executor's tasks:
  opd-multi's two experts train side by side on a 2-core machine. Their numbers are the `ray`
  executor's, whatever the number of cores (each child's depend only on its seed and key). The
  parent shows their spend on its progress bar and logs each one's end; Ctrl-C stops them, and a
  worker that dies (killed, say, for memory) stops the run. Where the budget ends inside a phase (a
  child spent its whole share: budgets of a few steps), the children's work is discarded, as a
  killed run's work since its last checkpoint is (the record says how much:
  `parallel_discarded_flops` among its method metrics), and the phases run again one after another
  on the run's context (the `sequential` numbers), so that the run still ends at most one step past
  its budget.
- `isolated`: the same child contexts, run one after another in this process, each through a pickle
  round trip as Ray would ship it. It gives the numbers the `ray` executor gives at the parent's
  thread count (a check without Ray) and is where a phase that cannot run remotely fails first.

Why child contexts differ from `sequential` in their numbers: sequential phases share one sampling
generator, so the second expert's samples depend on how much the first one drew; parallel phases
cannot, and each gets its own. FLOP totals per phase are then equal in kind (same keys, same budget
per phase) but not to the FLOP. The record says which the run had (`phase_streams`: `shared`,
`own`, `mixed` where calls differed, null where the method never split), and `bench compare` and
the site's plan check read it as an input. A child's steps are traced after the merge, in key
order, each at the run's counted FLOPs before the phases plus those of the children merged before
it. What a child
may use: its student (the parent's current student, copied), `clone` / `snapshot` of it, samplers,
rollout, updates and `step_done` (recorded there for that trace: the runner evaluates and
checkpoints once, after the merge). Teachers are not available in a child. Each child may spend an
equal share of the budget left when the phases start (so under `ray` and `isolated`, where the
budget ends inside the phases, each may end one step past its share). Policies a child creates must
be clones or snapshots of the student; state it writes should sit under its own keys (children's
states are merged key by key, the later key winning on a clash).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import os
import pickle
import queue as queues
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from bench.accounting.ledger import Ledger, current_phase
from bench.context import PhaseRunner, RunContext
from bench.errors import RunError
from bench.policy import Policy, rebuilt
from bench.registry import file_plugins, load_file_plugins
from bench.run.pools import kill_workers
from bench.run.ray_support import import_ray

EXECUTORS = ("sequential", "processes", "isolated", "ray")
POLL_S = 0.5  # how often the parent of `processes` children reads their progress


@dataclass
class PolicySpec:
    """What rebuilds a policy elsewhere: architecture, weights (CPU), tokenizer; never its hooks."""

    name: str
    model_config: Any
    weights: dict[str, torch.Tensor]
    tokenizer: Any
    chat: bool
    device: str

    @classmethod
    def of(cls, policy: Policy) -> PolicySpec:
        weights = {k: v.detach().cpu() for k, v in policy._model.state_dict().items()}
        return cls(policy.name, policy._model.config, weights, policy._tokenizer, policy._chat, str(policy.device))

    def build(self, ledger: Ledger) -> Policy:
        # on the policy's own device (a run on `cuda:1` keeps its phases there), where this process has CUDA
        device = self.device if self.device.startswith("cuda") and torch.cuda.is_available() else "cpu"
        model = rebuilt(self.model_config, self.weights, device=device, dtype=next(iter(self.weights.values())).dtype)
        return Policy(self.name, model, self.tokenizer, ledger=ledger, chat=self.chat)


@dataclass
class ChildSpec:
    """Everything the phases of one `map_phases` call share, picklable (one object-store copy)."""

    fn: Callable[[Any, str], Any]
    suite: Any
    seed: int
    budget_flops: float  # the parent's spend so far plus one child's share of what is left
    prior_rows: list[dict]  # the parent's ledger: a resumed phase sees what it already spent
    student: PolicySpec
    backend: Any
    max_new_tokens: int
    state: dict
    policy_states: dict[str, dict]  # checkpointed policies the parent has not re-created yet
    sampler_positions: dict[str, int]
    eval_max_new_tokens: int | None = None
    # the parent's fp32 matmul precision (`gpu-small`'s TF32), which a fresh process would not have
    matmul_precision: str = "highest"


@dataclass
class ChildResult:
    key: str
    value: Any
    rows: list[dict]  # the child's own charges, never the prior rows it was given
    policies: dict[str, dict]  # name -> Policy.state() of each policy the child created
    sampler_positions: dict[str, int]
    state: dict
    reports: dict
    # (the child's own counted FLOPs after the step, its ledger phase, its stats), one per step_done
    steps: list[tuple[float, str, dict]] = field(default_factory=list)


def phase_runner(executor: str) -> PhaseRunner | None:
    """How a context runs `map_phases` under `executor`: None (in order, on the run's own context)
    for `sequential`, else in child contexts (`processes` in local worker processes, `isolated` here,
    `ray` as Ray tasks)."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown phase executor {executor!r}; known: {', '.join(EXECUTORS)}")
    return None if executor == "sequential" else functools.partial(run_phases, executor=executor)


def run_phases(ctx: RunContext, fn: Callable[[Any, str], Any], keys: list[str], *,
               executor: str) -> list[ChildResult] | None:
    """One child context per key, each with an equal share of the budget left; their results in key
    order, or None (`processes` only) when the budget ended inside one of them: then the phases must
    run again one after another on `ctx`, so that the run ends at most one step past its budget."""
    spec = child_spec(ctx, fn, len(keys))
    results = run_children(spec, keys, executor, progress=ctx._progress)
    if executor == "processes" and any(_reached_share(spec, r) for r in results):
        discarded = sum(counted_flops(result.rows) for result in results)
        ctx.report("parallel_discarded_flops", ctx._reports.get("parallel_discarded_flops", 0.0) + discarded)
        ctx._progress(0.0, "the budget ended inside a parallel phase: their work is discarded, uncounted, "
                           "and they run again one after another")
        return None
    return results


def _reached_share(spec: ChildSpec, result: ChildResult) -> bool:
    """Whether a child spent its whole share of the budget: its stop was the budget's, not its own."""
    return counted_flops(spec.prior_rows) + counted_flops(result.rows) >= spec.budget_flops


def counted_flops(rows: Sequence[dict]) -> float:
    """The counted FLOPs of ledger rows (a child's, or the prior rows it was given)."""
    return sum(r["flops"] for r in rows if r["category"] == "counted")


def refuse_past_budget(what: str, spent: float, last: float, budget: float) -> None:
    """A step may end past the budget, none may begin there: counted work (`spent` now) after a step
    that ended (at `last`) with the budget spent is refused (a method or phase that does not stop at
    `ctx.should_stop()`)."""
    if last >= budget and spent > last:
        raise RunError(f"{what} went on past its budget: {spent - last:.3e} counted FLOPs after a step that "
                       f"ended at {last:.3e} of {budget:.3e}; a method stops when ctx.should_stop() is True")


def child_seed(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:phase:{key}".encode()).digest()[:8], "little") % 2**63


def run_child(spec: ChildSpec, key: str) -> ChildResult:
    """Run `spec.fn(child_ctx, key)` in a fresh context; the body of each worker process and Ray task."""
    ledger = Ledger()
    ledger.merge(spec.prior_rows)
    ledger.flush()  # an in-memory ledger forgets pending rows: only the child's own charges remain
    seed = child_seed(spec.seed, key)
    steps: list[tuple[float, str, dict]] = []
    start = ledger.total("counted")

    def within_share() -> None:  # no counted work after a step that ended with the share spent
        spent = ledger.total("counted")
        refuse_past_budget(f"phase {key!r}", spent, start + (steps[-1][0] if steps else 0.0), spec.budget_flops)

    def on_step(stats: dict) -> None:
        within_share()
        own = ledger.total("counted") - start
        steps.append((own, current_phase(), dict(stats)))
        if _PROGRESS is not None:
            _PROGRESS.put((key, own))

    with torch.random.fork_rng(devices=[]):  # `isolated` runs in the parent's process: keep its RNG
        torch.manual_seed(seed)
        ctx = RunContext(
            suite=spec.suite, seed=spec.seed, budget_flops=spec.budget_flops, ledger=ledger,
            student=spec.student.build(ledger), backend=spec.backend, teacher_loader=_no_teacher,
            max_new_tokens=spec.max_new_tokens, on_step=on_step, state=spec.state,
            policy_states=spec.policy_states, sampler_positions=spec.sampler_positions,
            generator=torch.Generator().manual_seed(seed), eval_max_new_tokens=spec.eval_max_new_tokens,
        )
        with ledger.method_runs():
            value = spec.fn(ctx, key)
    within_share()
    created = {name: p._state() for name, p in ctx._policies.items() if name != spec.student.name}
    for state in created.values():
        state["model"] = {k: v.detach().cpu() for k, v in state["model"].items()}
    return ChildResult(key, value, ledger.pending_rows(), created, ctx._sampler_positions(), ctx.state,
                       ctx._reports, steps)


def _remote_child(spec: ChildSpec, key: str) -> ChildResult:
    """A child in a worker process or a Ray task: one CPU each, as a sweep's runs; its fp32 matmuls as
    precise as the parent's; on CUDA, on the GPU it was given (a Ray task sees it as its first)."""
    if not torch.cuda.is_available():
        torch.set_num_threads(1)
    torch.set_float32_matmul_precision(spec.matmul_precision)
    if spec.student.device.startswith("cuda"):
        spec = replace(spec, student=replace(spec.student, device="cuda"))
    return run_child(spec, key)


_PROGRESS: Any = None  # in a `processes` worker: the queue that takes (key, own counted FLOPs) per step


def _init_worker(progress: Any, plugins: dict[str, str]) -> None:
    global _PROGRESS
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the pool
    _PROGRESS = progress
    load_file_plugins(plugins)  # before a child's spec, which may refer to them, is unpickled


def _ray_child(plugins: dict[str, str], spec: ChildSpec | bytes, key: str) -> ChildResult:
    """A Ray task's child. Where the parent loaded file plugins, they are loaded here first and the
    spec, which may refer to them, comes pickled by the parent, to be unpickled after them."""
    load_file_plugins(plugins)
    return _remote_child(pickle.loads(spec) if isinstance(spec, bytes) else spec, key)


def _no_teacher(name: str) -> Policy:
    raise RuntimeError(f"teacher {name!r} is not available inside a parallel phase (map_phases)")


def child_spec(ctx: RunContext, fn: Callable[[Any, str], Any], n_keys: int) -> ChildSpec:
    """The shared spec from the parent context `ctx`; each of `n_keys` children gets an equal share
    of the budget left."""
    return ChildSpec(
        fn, ctx._suite, ctx._seed, ctx.spent_flops + ctx.remaining_flops / max(1, n_keys), ctx._ledger.rows(),
        PolicySpec.of(ctx.student), ctx._backend, ctx.max_new_tokens, ctx.state, dict(ctx._policy_states),
        ctx._sampler_positions(), ctx._eval_max_new_tokens, torch.get_float32_matmul_precision(),
    )


Progress = Callable[[float, "str | None"], None]  # (children's counted FLOPs so far, a line to log or None)


def run_children(spec: ChildSpec, keys: Sequence[str], executor: str,
                 progress: Progress | None = None) -> list[ChildResult]:
    """Run one child per key: in local worker processes (`processes`), one after another here
    (`isolated`) or as parallel Ray tasks (`ray`); `progress` hears of the processes' spend."""
    if executor == "isolated":
        # The pickle round trip gives each child its own copy, exactly as a Ray task would get.
        return [run_child(pickle.loads(pickle.dumps(spec)), key) for key in keys]
    if executor == "processes":
        return _in_processes(spec, list(keys), progress or (lambda spent, line: None))
    ray = import_ray()
    from ray.exceptions import RayTaskError

    task = ray.remote(num_cpus=1, num_gpus=_child_gpus(ray, spec), max_retries=0)(_ray_child)
    plugins = file_plugins()
    shared = ray.put(pickle.dumps(spec) if plugins else spec)  # one copy of the weights, whatever the keys
    try:
        return ray.get([task.remote(plugins, shared, key) for key in keys])
    except RayTaskError as exc:
        raise (exc.cause if isinstance(exc.cause, Exception) else exc) from None


def _in_processes(spec: ChildSpec, keys: list[str], progress: Progress) -> list[ChildResult]:
    """One child per key in a pool of spawned processes (at most one per core); results in key order.

    A child's exception is raised here, and a worker that dies (killed, e.g. for memory) fails the
    call at once; on any exception (Ctrl-C included) the workers are killed.
    """
    if spec.student.device.startswith("cuda"):
        raise RuntimeError("the processes phase executor runs on CPU; on a GPU use sequential or ray")
    mp = multiprocessing.get_context("spawn")  # a forked child would inherit the parent's torch threads
    updates, own = mp.Queue(), dict.fromkeys(keys, 0.0)
    pool = ProcessPoolExecutor(max(1, min(len(keys), os.cpu_count() or 1)), mp_context=mp,
                               initializer=_init_worker, initargs=(updates, file_plugins()))
    ended = False
    try:
        pending = {key: pool.submit(_remote_child, spec, key) for key in keys}
        results: dict[str, ChildResult] = {}
        while len(results) < len(keys):
            try:
                key, spent = updates.get(timeout=POLL_S)
                own[key] = spent
            except queues.Empty:
                pass
            for key, job in pending.items():
                if key not in results and job.done():
                    results[key] = _result(job, [k for k in keys if k not in results])
                    own[key] = counted_flops(results[key].rows)
                    progress(sum(own.values()), f"{key}: done, {len(results[key].steps)} steps, "
                                                f"{own[key]:.2e} counted FLOPs")
            progress(sum(own.values()), None)
        ended = True
        return [results[key] for key in keys]
    finally:
        if not ended:
            kill_workers(pool)
        pool.shutdown(wait=True, cancel_futures=True)


def _result(job: Future, unfinished: list[str]) -> ChildResult:
    """A finished child's result; its exception raised as it is, or one line if a worker died."""
    try:
        return job.result()
    except BrokenProcessPool:
        raise RunError(
            f"a worker process of the parallel phases died (killed from outside, or out of memory?) before "
            f"{', '.join(unfinished)} ended; the run stops at its last checkpoint, if it has one (--resume "
            "goes on from there); --phase-executor sequential runs the phases in the run's own process"
        ) from None


def _child_gpus(ray: Any, spec: ChildSpec) -> float:
    """GPUs per child task: none on CPU, one on CUDA. A run that is itself a Ray task holding GPUs is
    refused: it keeps them while it waits for its children, and where every run of a sweep holds GPUs
    no child can get one (a sweep's runs on a GPU run their phases `isolated` instead)."""
    if not spec.student.device.startswith("cuda"):
        return 0.0
    in_task = ray.get_runtime_context().worker.mode == ray.WORKER_MODE
    if in_task and ray.get_runtime_context().get_assigned_resources().get("GPU", 0.0):
        raise RuntimeError("a Ray task that holds GPUs cannot wait for phases that need GPUs of their own (they "
                           "could wait forever): run its phases with --phase-executor isolated or sequential")
    if float(ray.cluster_resources().get("GPU", 0.0)) < 1.0:
        raise RuntimeError("parallel phases on CUDA need a GPU each, and the Ray cluster has none: they would "
                           "wait forever")
    return 1.0
