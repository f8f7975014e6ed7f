"""`bench run` (one method, one suite, one seed, one budget) and `bench prepare` (a world's shipped
or rebuilt base and teacher, with its regime table)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from bench.cli.common import (
    DEFAULT_PROFILE, DEVICE_HELP, DISTILL_EVAL_HELP, EVAL_EARLY_HELP, EVAL_EVERY_HELP, EVAL_SIZE_HELP, EXTERNAL_HELP,
    MAX_NEW_TOKENS_HELP, MILESTONES_HELP, MODEL_HELP, PHASES_HELP, PROFILE_HELP, ROLLOUT_HELP, RUNS_HELP,
    TEACHER_HELP, _budget, _fail, _interruptible, _names, _one_line, _overrides, _print_json, _run_fields, app,
    console, default_phase_executor, interrupts,
)
from bench.errors import unknown


PANEL = "Prepare and run"  # the heading these commands are listed under in `bench --help`


def _built_in(info: dict, part: str, shipped: bool = False) -> str:
    """How `part` was had: trained here in so many seconds, taken from a warm-up checkpoint, or
    installed from the shipped reference (whose build time is the one where it was made)."""
    if shipped:
        how = (f"taken from warm-up checkpoint {info['from_checkpoint']}" if "from_checkpoint" in info
               else f"built in {info.get('wall_s', '?')} s where it was made")
        return f"{part} as shipped ({how})"
    if "from_checkpoint" in info:
        return f"{part} taken from warm-up checkpoint {info['from_checkpoint']} in {info.get('wall_s', '?')} s"
    return f"built in {info.get('wall_s', '?')} s for {part}"


def _resume_command() -> str:
    """The command that continues an interrupted run: this one with --resume."""
    args = sys.argv[1:]
    if args[:1] != ["run"]:
        return "the same bench run command with --resume"
    return shlex.join(["bench", *args, *([] if "--resume" in args else ["--resume"])])


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted before the run began; nothing was written")  # the run itself says how to resume
def run(
    method: str = typer.Option(..., help="method name (bench list methods), entry-point plugin, or "
                                "path/to/file.py:Class"),
    suite: str = typer.Option("math_code", help="task suite (bench list suites)"),
    difficulty: str = typer.Option("easy", help="easy, medium or hard"),
    seed: int = typer.Option(0, help="the run's seed: its sampling, data order and torch's global RNG"),
    budget: Optional[str] = typer.Option(None, help="counted training FLOPs (default: the profile's)"),
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP),
    runs: Path = typer.Option(Path("runs"), "--out", "--runs", help=RUNS_HELP),
    resume: bool = typer.Option(False, help="continue a killed run from its last checkpoint"),
    set_: list[str] = typer.Option([], "--set", help="method config override key=value (repeatable)"),
    eval_size: Optional[int] = typer.Option(None, help=EVAL_SIZE_HELP),
    progress: bool = typer.Option(True, help="show the progress bar"),
    model: Optional[str] = typer.Option(None, help=MODEL_HELP),
    external: Optional[str] = typer.Option(None, help=EXTERNAL_HELP),
    teacher: list[str] = typer.Option([], help=TEACHER_HELP),
    device: str = typer.Option("cpu", help=DEVICE_HELP),
    max_new_tokens: Optional[int] = typer.Option(None, help=MAX_NEW_TOKENS_HELP),
    eval_every: float = typer.Option(0.1, help=EVAL_EVERY_HELP),
    eval_early: str = typer.Option("0.01,0.02,0.05", help=EVAL_EARLY_HELP),
    distill_eval_every: int = typer.Option(5, help=DISTILL_EVAL_HELP),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
    phase_executor: Optional[str] = typer.Option(None, help=PHASES_HELP),
    report_to: list[str] = typer.Option(
        [], help="mirror the run live to a tracker: tensorboard or wandb (offline unless WANDB_MODE is set; "
                 "repeatable)"),
    save_milestones: bool = typer.Option(False, help=MILESTONES_HELP),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON (no progress bar)"),
) -> None:
    """Train one method on one suite under a FLOP budget; writes runs/<run_id>/."""
    with _one_line():
        _names([method], [suite], difficulty, profile)  # before torch loads: a typo is answered at once
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    # SIGTERM ends a run as Ctrl-C does: with the command that resumes it.
    with _interruptible(f"interrupted; the run keeps its last checkpoint: continue with {_resume_command()}"):
        with _one_line():
            config = RunConfig(
                method=method, suite=suite, difficulty=difficulty, profile=profile, seed=seed,
                budget_flops=_budget(budget), overrides=_overrides(set_), runs_dir=runs, rollout=rollout,
                phase_executor=phase_executor or "sequential", report_to=tuple(report_to),
                **_run_fields(eval_size, model, external, teacher, device, max_new_tokens, eval_every, eval_early,
                              distill_eval_every, save_milestones),
            )
            if phase_executor is None:
                config = replace(config, phase_executor=default_phase_executor(config.on_gpu, rollout))
            run = Runner(config, resume=resume, progress=progress and not as_json)
            summary = run.run()
    if as_json:
        keys = ("run_id", "method", "suite", "profile", "seed", "budget_flops", "base_accuracy", "final_accuracy",
                "final_domain_accuracy", "final_mean_length", "flops", "wall_s")
        return _print_json({**{k: summary.get(k) for k in keys}, "run_dir": str(config.runs_dir / summary["run_id"])})
    if run.already_complete and not as_json:
        console.print(f"already complete, nothing to do: {config.runs_dir / summary['run_id']} (its record below)")
    table = Table(title=f"{summary['run_id']}")
    # the last evaluation's (at most one step past the budget); a board reads its curve at the budget itself
    for col in ("base acc", "last eval acc", "counted FLOPs", "mean length", "wall s"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{100 * summary['base_accuracy']:.1f}%", f"{100 * summary['final_accuracy']:.1f}%",
        f"{summary['flops']['counted']:.3e}", f"{summary['final_mean_length']:.2f}", f"{summary['wall_s']:.0f}",
    )
    console.print(table)
    console.print(f"run directory: {config.runs_dir / summary['run_id']}")


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted; the parts already built are kept, the one under way is lost: the same command "
            "builds what is missing")
def prepare(
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP),
    check: bool = typer.Option(False, help="rebuild from scratch and compare weights hashes with the shipped models"),
    rebuild: bool = typer.Option(False, help="train from scratch, whatever is shipped or cached"),
    write_reference: bool = typer.Option(False, help="with --rebuild or --from-checkpoint: replace the shipped "
                                          "reference models"),
    teacher: Optional[bool] = typer.Option(None, "--teacher/--no-teacher",
                                           help="also the external teacher (default: where it is shipped or "
                                           "already built; --teacher builds it if not)"),
    from_checkpoint: list[str] = typer.Option([], help="PART=DIR: take base or external from a warm-up checkpoint "
                                              "at its recipe's last step (benchmarks/warmup_curve.py) instead of "
                                              "training it again (repeatable)"),
) -> None:
    """Install (or build) the profile's shared base student and external teacher; print its regime table."""
    from bench.world import prepare as prep
    from bench.world import reference
    from bench.world.profiles import PROFILES
    from bench.world.regime import format_regime

    if profile not in PROFILES:
        _fail(str(unknown("profile", profile, list(PROFILES))))
    if PROFILES[profile].task_format == "hf":
        _fail(f"the {profile} profile builds nothing: its runs take local model folders (bench run --profile "
              f"{profile} --model DIR); bench prepare builds the worlds whose models it trains")
    if check and reference.manifest(profile) is None:  # before the rebuild, not after it
        _fail(f"no shipped reference for profile {profile} to check against; the worlds that ship one: "
              f"{', '.join(n for n in PROFILES if reference.manifest(n) is not None)}")
    checkpoints = _checkpoints(from_checkpoint, rebuild or check)
    if write_reference and not (rebuild or checkpoints):
        _fail("--write-reference needs --rebuild or --from-checkpoint: the reference is what a build from scratch "
              "gives (a checkpoint at the recipe's last step has its bytes; --check verifies them)")
    with _one_line():  # a shipped file that does not match its manifest too
        # what it reports as ready loads and hashes as recorded; the base before the teacher is built
        prepared = prep.prepare(PROFILES[profile], rebuild=rebuild or check, teacher=False, checkpoints=checkpoints)
        prepared.verify()
        if teacher is None:  # an unshipped teacher is hours of training: only when asked for
            teacher = (reference.ships(profile, "external") or prepared.teacher_info() is not None
                       or (rebuild and not check) or "external" in checkpoints)
            if not teacher:
                console.print(f"{profile}'s external teacher is not shipped: `bench prepare --profile {profile} "
                              f"--teacher` builds it (opd-external and sft also build it on first use)",
                              highlight=False, soft_wrap=True)
        if teacher:
            prepared.ensure_teacher(progress=True)
            prepared.verify()
    teacher = prepared.teacher_info()
    shipped = {} if prepared.rebuilt else reference.shipped_hashes(profile)
    built = (_built_in(teacher, "the external teacher", shipped.get("external") == teacher["model_hash"])
             if teacher is not None else "the external teacher not built")
    base = _built_in(prepared.info, "the base", shipped.get("base") == prepared.info["model_hashes"]["base"])
    console.print(f"prepared {profile}: {prepared.folder} ({base}, {built})", soft_wrap=True)
    for line in prep.format_calibration(prepared.calibration()) + format_regime(PROFILES[profile], prepared):
        console.print(line, highlight=False, soft_wrap=True)
    if write_reference:
        world, suite_hash = PROFILES[profile], prepared.info["suite_hash"]
        target = reference.write(profile, prep.world_key(world, world.warmup, suite_hash), world.world_version,
                                 prepared.folder, prep.part_keys(world, suite_hash))
        console.print(f"wrote the reference models to {target}")
    if check:
        _compare_with_shipped(profile, prepared.model_hashes())


def _checkpoints(items: list[str], from_scratch: bool) -> dict[str, Path]:
    """`--from-checkpoint PART=DIR`s, checked: PART -> DIR."""
    checkpoints: dict[str, Path] = {}
    for item in items:
        part, sep, folder = item.partition("=")
        if not sep or part not in ("base", "external") or not folder:
            _fail(f"--from-checkpoint takes base=DIR or external=DIR, got {item!r}")
        if not Path(folder).is_dir():
            _fail(f"--from-checkpoint {part}: no such folder {folder}")
        checkpoints[part] = Path(folder)
    if checkpoints and from_scratch:
        _fail("--from-checkpoint installs a trained checkpoint; --rebuild and --check train from scratch")
    return checkpoints


def _compare_with_shipped(profile: str, ours: dict[str, str]) -> None:
    """`--check`: each model rebuilt here against the shipped one's hash; exit 1 where any differs."""
    from bench.world import reference

    theirs = reference.shipped_hashes(profile)
    names = [n for n in ("base", "external") if n in ours and n in theirs]  # built here and shipped
    for name in names:
        same = ours.get(name) == theirs.get(name)
        console.print(f"{name}: rebuilt {ours.get(name)}, shipped {theirs.get(name)}: "
                      f"{'identical' if same else 'DIFFERENT'}")
    if any(ours.get(n) != theirs.get(n) for n in names):
        _fail("the rebuilt models differ from the shipped ones (see docs/world.md, Reproducibility)", code=1)
