"""What the `bench` commands share: the Typer app, the consoles, and the checks of arguments that end
in one line on stderr and exit status 2 (bad input) before any work starts.

The checks of a run's options (`_budget`, `_seeds`, `_names`, `_run_fields`, ...) raise a user error
(bench.errors) rather than exit: a command turns it into its one line (`_one_line`), and `bench report`
names the study whose recorded sweep command holds the bad option."""

from __future__ import annotations

import contextlib
import functools
import json
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, Optional

import typer
from rich.console import Console

import bench  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
from bench.errors import USER_ERRORS, RunError, os_error_message, unknown
from bench.progress import PipeConsole

app = typer.Typer(add_completion=False, no_args_is_help=True, help="OPD-Bench: post-training methods per FLOP.")
# a long line stays one line in a log, a pipe or a terminal; text such as "file.py:X:" is not an emoji code
console = PipeConsole(soft_wrap=True, emoji=False)
err = Console(stderr=True, soft_wrap=True, emoji=False)
# The command line's world: the worked world, whose base and teacher are shipped, so a first
# `bench run` takes minutes.
DEFAULT_PROFILE = "tiny"
PROFILE_ORDER = ("tiny", "direct")  # the worlds `bench reproduce` runs by default, when shipped
ROLLOUT_HELP = "rollout engine of methods and evaluations: torch, or vllm (the `vllm` extra)"
PROFILE_HELP = "world: tiny (worked answers), direct (short answers), smoke, ..."
RUNS_HELP = "folder that holds run directories (--runs: the old name)"
ADDRESS_HELP = "ray: an existing cluster, e.g. HOST:6379 (default: start one here)"
PHASES_HELP = ("how a method's independent phases (opd-multi's experts) run: processes (side by side, one "
               "core each; the default on CPU with torch rollouts), sequential (one after another, here; the "
               "default otherwise, and what sweeps do), isolated, or ray")


def default_phase_executor(on_gpu: bool, rollout: str) -> str:
    """`bench run`'s phase executor unless told: worker processes where they are cheap (CPU, torch
    rollouts), else in order (a GPU, or a vLLM engine, per process would be duplicated). `on_gpu`:
    `RunConfig.on_gpu` (`--device`, or a world whose models live on a GPU)."""
    return "processes" if not on_gpu and rollout == "torch" else "sequential"


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            print(f"opd-bench {version('opd-bench')}")
        except PackageNotFoundError:  # pragma: no cover - a checkout that was never installed
            print("opd-bench (not installed)")
        raise typer.Exit()


@app.callback()
def _main(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit")) -> None:
    """OPD-Bench: post-training methods per FLOP."""


def _fail(message: str, code: int = 2) -> None:
    from rich.markup import escape

    # Escaped: a message such as "pip install 'opd-bench[ray]'" is text, not rich markup.
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _one_line() -> Iterator[None]:
    """Bad input, a bad run directory or a file that cannot be read or written: one line, exit 2."""
    try:
        yield
    except USER_ERRORS as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(os_error_message(exc))


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def _interruptible(message: str) -> Iterator[None]:
    """SIGTERM (a scheduler, `kill`) ends the command as Ctrl-C does: `message` on one line, exit 130.
    Off the main thread (the command line driven from a thread), where no signal handler can be set,
    only Ctrl-C's message."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt) if main else None
    try:
        yield
    except KeyboardInterrupt:
        _fail(message, code=130)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)


def interrupts(message: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A command that ends on Ctrl-C or SIGTERM with `message` (what is kept) on one line, exit 130:
    typer would end it silently."""
    def wrap(command: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(command)
        def interruptible(*args: Any, **kwargs: Any) -> Any:
            with _interruptible(message):
                return command(*args, **kwargs)
        return interruptible
    return wrap


def _budget(value: Optional[str]) -> Optional[float]:
    """`--budget`, a positive finite number of FLOPs (RunError if not)."""
    if value is None:
        return None
    try:
        budget = float(value)
    except ValueError:
        raise RunError(f"--budget must be a number of FLOPs such as 2e13, got {value!r}") from None
    if not (budget > 0 and budget != float("inf")):
        raise RunError(f"--budget must be a positive, finite number of FLOPs, got {value!r}")
    return budget


def _device(value: str, available: bool = True) -> str:
    """`--device`: cpu, cuda or cuda:N (RunError if not); with `available`, a CUDA device must be here. A
    command only planned, to compare it with its records, runs nowhere: it needs no device."""
    if value == "cpu":
        return value
    if not value.startswith("cuda"):
        raise RunError(f"--device must be cpu, cuda or cuda:N, got {value!r}")
    if available:
        import torch

        if not torch.cuda.is_available():
            raise RunError(f"--device {value}: no CUDA device is available here")
    return value


def _fractions(value: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise RunError(f"--eval-early must be comma-separated budget fractions such as 0.01,0.02,0.05, "
                       f"got {value!r}") from None


# The options of a run that `bench run` takes and `bench sweep` gives every run alike (`_run_fields`).
EVAL_SIZE_HELP = "held-out prompts per domain at each evaluation"
MODEL_HELP = "hf profile: the student, a local HF model folder or a hub id in the local HF cache"
EXTERNAL_HELP = "hf profile: the external teacher's folder"
TEACHER_FORM = "--teacher NAME=PATH"
TEACHER_HELP = ("NAME=PATH: a teacher for ctx.teacher(NAME), PATH a local model folder or a run directory (its "
                "final/) (repeatable)")
DEVICE_HELP = "cpu, cuda or cuda:N"
MAX_NEW_TOKENS_HELP = "generation limit (default: the profile's)"
EVAL_EVERY_HELP = "evaluate at each multiple of this fraction of the budget"
EVAL_EARLY_HELP = "also evaluate at these budget fractions (comma-separated)"
DISTILL_EVAL_HELP = "inside distillation, also evaluate every N steps (0: off)"
MILESTONES_HELP = "also save the student at every evaluation as a HF folder (milestones/)"
RUN_OPTIONS = ("eval_size", "model", "external", "teacher", "device", "max_new_tokens", "eval_every", "eval_early",
               "distill_eval_every", "save_milestones")


def _run_fields(eval_size: Optional[int], model: Optional[str], external: Optional[str], teacher: list[str],
                device: str, max_new_tokens: Optional[int], eval_every: float, eval_early: str,
                distill_eval_every: int, save_milestones: bool, planning: bool = False) -> dict[str, Any]:
    """`RUN_OPTIONS` as the command line gives them, as `RunConfig` fields, each checked (a user error,
    bench.errors). `planning`: the runs are only planned, not run: a `--device cuda` need not be here."""
    return {"eval_size": eval_size, "model": model, "external": external, "teachers": _overrides(teacher, TEACHER_FORM),
            "device": _device(device, available=not planning), "max_new_tokens": max_new_tokens,
            "eval_every": eval_every, "eval_early": _fractions(eval_early),
            "distill_eval_every": distill_eval_every, "save_milestones": save_milestones}


def _overrides(items: list[str], option: str = "--set KEY=VALUE") -> tuple[tuple[str, str], ...]:
    """`KEY=VALUE` items as pairs; `option` (its name and form) names the option in the refusal."""
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RunError(f"{option.split()[0]} takes {option.split()[1]}, got {item!r}")
        out.append((key.strip(), value.strip()))
    return tuple(out)


def _plain() -> bool:
    """stdout is not a terminal (a pipe, a file, a log): plain lines, never a table cut to 80 columns."""
    return not console.is_terminal


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


def _split(value: str, option: str) -> list[str]:
    """A comma-separated list of names, each once, in the order given; one that names nothing is refused."""
    names = list(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if not names:
        raise RunError(f"{option} names nothing; give one or more names, comma-separated")
    return names


SEEDS_HELP = "N (seeds 0..N-1), A-B (A to B) or a list such as 0,4,7"
MAX_SEEDS, MAX_SEED = 1000, 10**6


def _seeds(value: str) -> list[int]:
    """`--seeds`: a count N (seeds 0..N-1), a range A-B (both included) or a comma-separated list."""
    text = value.strip()
    try:
        if "-" in text:
            first, last = (int(part) for part in text.split("-"))
            seeds = list(range(first, last + 1))
        elif "," in text:
            seeds = list(dict.fromkeys(int(part) for part in text.split(",")))
        else:
            seeds = list(range(int(text)))
    except ValueError:
        seeds = []
    if not 1 <= len(seeds) <= MAX_SEEDS or not all(0 <= s < MAX_SEED for s in seeds):
        raise RunError(f"--seeds must be a count from 1 to {MAX_SEEDS}, a range A-B or a list of seeds, each from "
                       f"0 to {MAX_SEED - 1}; got {value!r}")
    return seeds


def _names(methods: list[str], suites: list[str], difficulty: str, profile: str) -> None:
    """Names checked before torch is imported, so that a typo is answered in well under a second
    (UnknownNameError, with the known names and a did-you-mean)."""
    import tasks
    from bench.registry import method_names, unknown_method
    from bench.world.profiles import PROFILES

    named = [m for m in methods if ".py:" not in m]
    known_methods = method_names() if named else []
    for method in named:
        if method not in known_methods:
            raise unknown_method(method)
    checks = [("suite", s, tasks.list_suites()) for s in suites]
    checks += [("difficulty level", difficulty, list(tasks.DIFFICULTIES)), ("profile", profile, list(PROFILES))]
    for kind, name, known in checks:
        if name not in known:
            raise unknown(kind, name, known)
