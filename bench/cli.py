"""The `bench` command line: the composition root, the one engine module that names tasks and reports
(docs/design.md, Layers and lines).

    bench run --method opd-multi --suite math_code [--seed 0] [--budget 2e13] [--profile tiny] [--resume]
              [--rollout torch|vllm]
    bench prepare [--profile tiny]
    bench list methods|suites|profiles
    bench flops MODEL_OR_SPEC
    bench report [--runs runs/] [--out leaderboard/]
    bench check-adapter PLUGIN
    bench compare RUN_OR_RUNS... [--against leaderboard/records]
    bench export-lm-eval SUITE --out DIR
    bench export-hf SUITE --out DIR
    bench eval MODEL_DIR|RUN_DIR [--suite S] [--profile P] [--limit N] [--task LM_EVAL_TASK ...]
    bench sweep --methods A,B [--suites S] [--seeds N] [--executor local|ray [--address HOST:6379]] [--rollout ...]
    bench reproduce [--profile tiny] [--executor local|ray ...] [--rollout torch|vllm]

Bad input gets one line on stderr saying what was wrong and what is allowed, and exit status 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

import bench  # noqa: F401  (sets OMP_WAIT_POLICY before torch loads)
from bench.errors import USER_ERRORS, ReferenceError, os_error_message, unknown

app = typer.Typer(add_completion=False, no_args_is_help=True, help="OPD-Bench: post-training methods per FLOP.")
console = Console(soft_wrap=True)  # a long line stays one line in a log, a pipe or a terminal
err = Console(stderr=True, soft_wrap=True)
# The command line's world: the worked world, whose base and teacher are shipped, so a first
# `bench run` takes minutes.
DEFAULT_PROFILE = "tiny"
PROFILE_ORDER = ("tiny", "direct")  # the worlds `bench reproduce` runs by default, when shipped
ROLLOUT_HELP = "rollout engine of methods and evaluations: torch, or vllm (the `vllm` extra)"
PHASES_HELP = ("how a method's independent phases (opd-multi's experts) run: processes (side by side, one "
               "core each; the default on CPU with torch rollouts), sequential (one after another, here; the "
               "default otherwise, and what sweeps do), isolated, or ray")


def default_phase_executor(device: str, rollout: str) -> str:
    """`bench run`'s phase executor unless told: worker processes where they are cheap (CPU, torch
    rollouts), else in order (a GPU, or a vLLM engine, per process would be duplicated)."""
    return "processes" if device == "cpu" and rollout == "torch" else "sequential"


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


def _resume_command() -> str:
    """The command that continues an interrupted run: this one with --resume."""
    args = sys.argv[1:]
    if args[:1] != ["run"]:
        return "the same bench run command with --resume"
    return shlex.join(["bench", *args, *([] if "--resume" in args else ["--resume"])])


def _budget(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        budget = float(value)
    except ValueError:
        _fail(f"--budget must be a number of FLOPs such as 2e13, got {value!r}")
    if not (budget > 0 and budget != float("inf")):
        _fail(f"--budget must be a positive, finite number of FLOPs, got {value!r}")
    return budget


def _device(value: str) -> str:
    import torch

    if value == "cpu":
        return value
    if not value.startswith("cuda"):
        _fail(f"--device must be cpu, cuda or cuda:N, got {value!r}")
    if not torch.cuda.is_available():
        _fail(f"--device {value}: no CUDA device is available here")
    return value


def _fractions(value: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in value.split(",") if v.strip())
    except ValueError:
        _fail(f"--eval-early must be comma-separated budget fractions such as 0.01,0.02,0.05, got {value!r}")


def _overrides(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _fail(f"expected key=value, got {item!r}")
        out.append((key.strip(), value.strip()))
    return tuple(out)


@app.command()
def run(
    method: str = typer.Option(..., help="method name, entry-point plugin, or path/to/file.py:Class"),
    suite: str = typer.Option("math_code", help="task suite"),
    difficulty: str = typer.Option("easy", help="easy, medium or hard"),
    seed: int = typer.Option(0),
    budget: Optional[str] = typer.Option(None, help="counted training FLOPs (default: the profile's)"),
    profile: str = typer.Option(DEFAULT_PROFILE, help="world: tiny (worked answers), direct (short answers), smoke, ..."),
    runs: Path = typer.Option(Path("runs"), "--out", "--runs", help="folder that holds run directories (--runs: the old name)"),
    resume: bool = typer.Option(False, help="continue a killed run from its last checkpoint"),
    set_: list[str] = typer.Option([], "--set", help="method config override key=value (repeatable)"),
    eval_size: Optional[int] = typer.Option(None, help="held-out prompts per domain at each evaluation"),
    progress: bool = typer.Option(True, help="show the progress bar"),
    model: Optional[str] = typer.Option(None, help="hf profile: the student, a local HF model folder or a hub id in the local HF cache"),
    external: Optional[str] = typer.Option(None, help="hf profile: the external teacher's folder"),
    teacher: list[str] = typer.Option([], help="a named teacher NAME=PATH, a local model folder, for ctx.teacher(NAME) (repeatable)"),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N"),
    max_new_tokens: Optional[int] = typer.Option(None, help="generation limit (default: the profile's)"),
    eval_every: float = typer.Option(0.1, help="evaluate at each multiple of this fraction of the budget"),
    eval_early: str = typer.Option("0.01,0.02,0.05", help="also evaluate at these budget fractions (comma-separated)"),
    distill_eval_every: int = typer.Option(5, help="inside distillation, also evaluate every N steps (0: off)"),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
    phase_executor: Optional[str] = typer.Option(None, help=PHASES_HELP),
    report_to: list[str] = typer.Option([], help="mirror the run live to a tracker: tensorboard or wandb (offline unless WANDB_MODE is set; repeatable)"),
    save_milestones: bool = typer.Option(False, help="also save the student at every evaluation as a HF folder (milestones/)"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON (no progress bar)"),
) -> None:
    """Train one method on one suite under a FLOP budget; writes runs/<run_id>/."""
    _names([method], [suite], difficulty, profile)
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    # SIGTERM ends a run as Ctrl-C does: with the command that resumes it.
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with _one_line():
            config = RunConfig(
                method=method, suite=suite, difficulty=difficulty, profile=profile, seed=seed,
                budget_flops=_budget(budget), overrides=_overrides(set_), runs_dir=runs, eval_size=eval_size,
                model=model, external=external, teachers=_overrides(teacher), device=_device(device),
                max_new_tokens=max_new_tokens, eval_every=eval_every, eval_early=_fractions(eval_early),
                distill_eval_every=distill_eval_every, rollout=rollout,
                phase_executor=phase_executor or default_phase_executor(device, rollout),
                report_to=tuple(report_to),
                save_milestones=save_milestones,
            )
            run = Runner(config, resume=resume, progress=progress and not as_json)
            summary = run.run()
    except KeyboardInterrupt:
        _fail(f"interrupted; the run keeps its last checkpoint: continue with {_resume_command()}", code=130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if as_json:
        keys = ("run_id", "method", "suite", "profile", "seed", "budget_flops", "base_accuracy", "final_accuracy",
                "final_domain_accuracy", "final_mean_length", "flops", "wall_s")
        return _print_json({**{k: summary.get(k) for k in keys}, "run_dir": str(config.runs_dir / summary["run_id"])})
    if run.already_complete and not as_json:
        console.print(f"already complete, nothing to do: {config.runs_dir / summary['run_id']} (its record below)")
    table = Table(title=f"{summary['run_id']}")
    for col in ("base acc", "final acc", "counted FLOPs", "mean length", "wall s"):
        table.add_column(col, justify="right")
    table.add_row(
        f"{100 * summary['base_accuracy']:.1f}%", f"{100 * summary['final_accuracy']:.1f}%",
        f"{summary['flops']['counted']:.3e}", f"{summary['final_mean_length']:.2f}", f"{summary['wall_s']:.0f}",
    )
    console.print(table)
    console.print(f"run directory: {config.runs_dir / summary['run_id']}")


@app.command()
def prepare(
    profile: str = typer.Option(DEFAULT_PROFILE, help="world: tiny (worked answers), direct (short answers), smoke, ..."),
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
    checkpoints: dict[str, Path] = {}
    for item in from_checkpoint:
        part, sep, folder = item.partition("=")
        if not sep or part not in ("base", "external") or not folder:
            _fail(f"--from-checkpoint takes base=DIR or external=DIR, got {item!r}")
        if not Path(folder).is_dir():
            _fail(f"--from-checkpoint {part}: no such folder {folder}")
        checkpoints[part] = Path(folder)
    if checkpoints and (rebuild or check):
        _fail("--from-checkpoint installs a trained checkpoint; --rebuild and --check train from scratch")
    if write_reference and not (rebuild or checkpoints):
        _fail("--write-reference needs --rebuild or --from-checkpoint: the reference is what a build from scratch "
              "gives (a checkpoint at the recipe's last step has its bytes; --check verifies them)")
    try:
        with _one_line():
            # what it reports as ready loads and hashes as recorded; the base before the teacher is built
            prepared = prep.prepare(PROFILES[profile], rebuild=rebuild or check, teacher=False,
                                    checkpoints=checkpoints)
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
    except ReferenceError as exc:
        _fail(str(exc))
    teacher = prepared.teacher_info()
    shipped = {} if prepared.rebuilt or reference.manifest(profile) is None else _shipped_hashes(profile)
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
        shipped = reference.manifest(profile)
        if shipped is None:
            _fail(f"no shipped reference for profile {profile} to check against", code=1)
        ours, theirs = prepared.model_hashes(), _shipped_hashes(profile)
        names = [n for n in ("base", "external") if n in ours and n in theirs]  # built here and shipped
        for name in names:
            same = ours.get(name) == theirs.get(name)
            console.print(f"{name}: rebuilt {ours.get(name)}, shipped {theirs.get(name)}: "
                          f"{'identical' if same else 'DIFFERENT'}")
        if any(ours.get(n) != theirs.get(n) for n in names):
            _fail("the rebuilt models differ from the shipped ones (see docs/world.md, Reproducibility)", code=1)


def _shipped_hashes(profile: str) -> dict:
    import json

    from bench.world import reference

    root = reference.ROOT / profile
    hashes = {"base": json.loads((root / "prepared.json").read_text())["model_hashes"]["base"]}
    if (root / "external.json").exists():  # a world may ship its base before its teacher
        hashes["external"] = json.loads((root / "external.json").read_text())["model_hash"]
    return hashes


def _plain() -> bool:
    """stdout is not a terminal (a pipe, a file, a log): plain lines, never a table cut to 80 columns."""
    return not console.is_terminal


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=1, default=str))


@app.command("list")
def list_(
    what: str = typer.Argument(..., help="methods, suites or profiles"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="methods: each one's config fields, types and defaults"),
) -> None:
    """List methods (with --verbose, their --set keys), suites or profiles."""
    if what == "methods":
        from bench.registry import get_method, method_names
        from bench.run.config import config_fields

        rows = []
        for name in method_names():
            row: dict[str, Any] = {"name": name}
            if verbose or as_json:
                cls = get_method(name)
                row["summary"] = (cls.__doc__ or "").strip().partition("\n")[0]
                row["config"] = config_fields(cls.Config())
            rows.append(row)
        if as_json:
            return _print_json(rows)
        for row in rows:
            print(row["name"] + (f": {row['summary']}" if verbose and row.get("summary") else ""))
            for field in row.get("config", []) if verbose else []:
                print(f"    --set {field['name']}=...  ({field['type']}, default {field['default']!r})")
    elif what == "profiles":
        from bench.world.profiles import PROFILES

        rows = [{"name": p.name, "description": p.description, "budget_flops": p.budget_flops,
                 "eval_size": p.eval_size} for p in PROFILES.values()]
        if as_json:
            return _print_json(rows)
        for row in rows:
            print(f"{row['name']}: {row['description']}")
    elif what == "suites":
        import tasks

        if as_json or _plain():
            rows = tasks.describe_suites()
        else:  # a cold cache generates every held-out split first: seconds
            with console.status("generating the held-out splits (cached after the first listing)"):
                rows = tasks.describe_suites()
        if as_json:
            return _print_json(rows)
        if _plain():
            print("\t".join(rows[0]))
            for row in rows:
                print("\t".join(_cell(v).replace("\n", "\\n") for v in row.values()))
            return
        table = Table()  # a terminal's width: the main columns (every column: --json, or piped)
        for col in ("suite", "difficulty", "domains", "held out", "version", "hash", "data"):
            table.add_column(col, overflow="fold")
        for row in rows:
            table.add_row(row["suite"], _cell(row["difficulty"]), ",".join(row["domains"]), _cell(row["heldout_size"]),
                          _cell(row["version"]), (row["content_hash"] or "")[:12], row["data"])
        console.print(table)
        console.print("standard benchmarks (gsm8k, ...: --profile hf) read local files: docs/ecosystem.md",
                      soft_wrap=True, highlight=False)
    else:
        _fail(str(unknown("listing", what, ["methods", "suites", "profiles"])))


def _cell(value: Any) -> str:
    """A listing's cell: empty for a value that does not apply (None)."""
    return "" if value is None else str(value)


@app.command()
def flops(
    model: str = typer.Argument(..., help="tiny spec name or local HF model folder"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per-token FLOPs from the analytic formula, audited against torch's instrumented counter."""
    from bench.accounting import audit
    from bench.world.models import load_model

    with _one_line():
        loaded, _ = load_model(model)
    report = audit.flops_report(loaded)
    if as_json:
        return _print_json(report)
    console.print(audit_table(report))


def audit_table(report: dict) -> Table:
    """A `flops_report` as a rich table: one row per audited pass, per-token costs in the caption."""
    from rich import box

    from bench.accounting.audit import TOLERANCE, AuditRow

    rows = [AuditRow(**r) for r in report["audit"]]
    attention = ", ".join(sorted({row.attention for row in rows}))
    table = Table(title=f"FLOP audit ({attention} attention, tolerance {TOLERANCE:.0%})", box=box.SIMPLE)
    for name in ("phase", "charged", "analytic", "instrumented", "diff", "fvcore diff"):
        phase = name == "phase"
        table.add_column(name, justify="left" if phase else "right", min_width=16 if phase else len(name))
    for row in rows:
        fv = row.fvcore_flops
        table.add_row(
            row.phase,
            *(f"{n:.4g}" for n in (row.charged_flops, row.analytic_flops, row.instrumented_flops)),
            f"{row.rel_diff:+.2%}",
            "-" if fv is None else f"{(fv - row.analytic_flops) / row.analytic_flops:+.2%}",
            style=None if row.ok else "bold red",
        )
    table.caption = (
        f"{report['model_type']}, {report['matmul_params']:,} matmul params. Per token at context "
        f"{report['context_tokens']}: forward {report['forward_flops_per_token']:.4g}, train "
        f"{report['train_flops_per_token_mean']:.4g} (mean over a full pass)."
    )
    return table


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _seeds(value: int) -> int:
    if not 1 <= value <= 1000:
        _fail(f"--seeds must be from 1 to 1000, got {value}")
    return value


@app.command()
def sweep(
    methods: str = typer.Option(..., help="comma-separated method names"),
    suites: str = typer.Option("math_code", help="comma-separated suites"),
    seeds: int = typer.Option(3, help="seeds 0..N-1"),
    difficulty: str = typer.Option("easy"),
    budget: Optional[str] = typer.Option(None, help="counted training FLOPs (default: the profile's)"),
    profile: str = typer.Option(DEFAULT_PROFILE, help="world: tiny (worked answers), direct (short answers), smoke, ..."),
    runs: Path = typer.Option(Path("runs"), "--out", "--runs", help="folder that holds run directories (--runs: the old name)"),
    jobs: Optional[int] = typer.Option(None, help="parallel runs (default: CPU cores; ray: CPUs of a local instance)"),
    executor: str = typer.Option("local", help="local (processes) or ray (one Ray task per run)"),
    address: Optional[str] = typer.Option(None, help="ray: an existing cluster, e.g. HOST:6379 (default: start one here)"),
    gpus_per_run: float = typer.Option(0.0, help="ray: GPUs each run's task asks for"),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
) -> None:
    """Run methods x suites x seeds (skips complete runs, resumes interrupted ones)."""
    _names(_split(methods), _split(suites), difficulty, profile)
    from bench.run.config import RunConfig
    from bench.run.sweep import plan, run_sweep

    with _one_line():
        base = RunConfig(method="", suite="", difficulty=difficulty, profile=profile,
                         budget_flops=_budget(budget), runs_dir=runs, rollout=rollout)
        configs = plan(_split(methods), _split(suites), _seeds(seeds), base)
        _validate(configs)
        result = run_sweep(configs, jobs, console, _executor(executor, jobs, address, gpus_per_run))
    _sweep_outcome(result)


@app.command()
def reproduce(
    profile: list[str] = typer.Option([], help="worlds to run, each on both suites (repeatable; default: every "
                                      "world whose base and teacher are shipped in bench/reference)"),
    seeds: int = typer.Option(1, help="seeds 0..N-1 per method and suite"),
    runs: Path = typer.Option(Path("runs"), help="folder that holds run directories"),
    out: Path = typer.Option(Path("leaderboard"), help="site folder; records are copied to OUT/records"),
    jobs: Optional[int] = typer.Option(None, help="parallel runs (default: CPU cores; ray: CPUs of a local instance)"),
    executor: str = typer.Option("local", help="local (processes) or ray (one Ray task per run)"),
    address: Optional[str] = typer.Option(None, help="ray: an existing cluster, e.g. HOST:6379 (default: start one here)"),
    gpus_per_run: float = typer.Option(0.0, help="ray: GPUs each run's task asks for"),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
    force: bool = typer.Option(False, help="replace a site in OUT even if it holds records these runs do not"),
) -> None:
    """Every method on math_code and four_domain at each world's budget, the recovery protocol, then the report."""
    from bench.world.regime import shipped_worlds
    from bench.run.config import RunConfig
    from bench.run.sweep import reproduce_plan, run_sweep
    from reports.site import SiteOverwriteError, build_site

    profile = profile or shipped_profiles()
    if not profile:
        _fail("no world has shipped reference models (bench/reference/<profile>/); name one with --profile")
    with _one_line():
        configs = [c for name in profile for c in reproduce_plan(
            _seeds(seeds), RunConfig(method="", suite="", profile=name, runs_dir=runs, rollout=rollout))]
        _validate(configs)
        result = run_sweep(configs, jobs, console, _executor(executor, jobs, address, gpus_per_run),
                           expected_s=_record_wall_times(out))
    # copies each record it uses to OUT/records: the site rebuilds from itself
    try:
        with _one_line():
            summary = build_site([runs], out, worlds=shipped_worlds(), force=force)
    except SiteOverwriteError as exc:
        _sweep_outcome(result, fail=False)
        _fail(f"{exc} The runs are in {runs}: `bench report --runs {runs} --out {out} --force` builds the site from them.")
    console.print(f"leaderboard: {summary.n_records} records -> {out / 'index.html'}; findings: {out / 'findings.html'}")
    _sweep_outcome(result)


def _record_wall_times(site: Path) -> dict[str, float]:
    """Run id -> wall seconds of the records a site already holds (none for a new site)."""
    from reports.records import load_records

    records, _ = load_records(site / "records")  # a folder that is not there gives no records
    return {r["run_id"]: float(r["wall_s"]) for r in records if r.get("wall_s")}


def shipped_profiles() -> list[str]:
    """The worlds `bench reproduce` runs by default: those whose base and teacher are shipped."""
    from bench.world import reference

    # a world may ship its base before its teacher
    return [name for name in PROFILE_ORDER if all(reference.ships(name, part) for part in reference.PARTS)]


def _executor(name: str, jobs: Optional[int], address: Optional[str], gpus_per_run: float):
    """The sweep executor; checked (Ray installed, options that apply) before any run starts."""
    from bench.run.executors import make_executor

    return make_executor(name, jobs=jobs, address=address, gpus_per_run=gpus_per_run)


def _names(methods: list[str], suites: list[str], difficulty: str, profile: str) -> None:
    """Names checked before torch is imported, so that a typo is answered in well under a second."""
    import tasks
    from bench.registry import method_names
    from bench.world.profiles import PROFILES

    checks = [("method", m, method_names()) for m in methods if ".py:" not in m]
    checks += [("suite", s, tasks.list_suites()) for s in suites]
    checks += [("difficulty level", difficulty, list(tasks.DIFFICULTIES)), ("profile", profile, list(PROFILES))]
    for kind, name, known in checks:
        if name not in known:
            _fail(str(unknown(kind, name, known)))


def _validate(configs: list) -> None:
    """Resolve every method and suite before any run starts, so a typo fails fast."""
    from bench.registry import get_method, get_suite
    from bench.world.profiles import PROFILES

    for config in configs:
        get_method(config.method)
        get_suite(config.suite, config.difficulty, PROFILES[config.profile].task_format)


def _sweep_outcome(result, fail: bool = True) -> None:
    console.print(f"{len(result.done)} runs done, {len(result.skipped)} already complete, {len(result.failed)} failed")
    if result.failed and fail:
        _fail("; ".join(f"{name}: {why}" for name, why in result.failed), code=1)


@app.command()
def report(
    runs: list[Path] = typer.Option([Path("runs")], help="runs folder(s) or folders of record JSON files"),
    out: Path = typer.Option(Path("site"), help="where the static site is written (the committed reference is leaderboard/)"),
    force: bool = typer.Option(False, help="replace a site in OUT even if it holds records these runs do not"),
) -> None:
    """Build the static HTML leaderboard from run records."""
    from reports.site import SiteOverwriteError, build_site

    from bench.world.regime import shipped_worlds

    missing = [str(r) for r in runs if not r.is_dir()]
    if missing:
        _fail(f"no such runs folder: {', '.join(missing)}")
    try:
        with _one_line():
            summary = build_site(runs, out, worlds=shipped_worlds(), force=force)
    except SiteOverwriteError as exc:
        _fail(str(exc))
    for path, reason in summary.skipped:
        err.print(f"skipped {path}: {reason}", highlight=False, soft_wrap=True)
    console.print(
        f"leaderboard: {summary.n_records} records, {summary.n_skipped} skipped, "
        f"{len(summary.pages)} pages -> {out / 'index.html'} ({summary.wall_s:.1f} s)"
    )
    if summary.n_records == 0:
        _fail("no valid run records found", code=1)


@app.command()
def compare(
    runs: list[Path] = typer.Argument(..., help="run directories, runs folders or record files"),
    against: list[Path] = typer.Option([Path("leaderboard/records")], help="the reference records (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print every comparison as JSON"),
) -> None:
    """Does each run reproduce its reference record (same method, suite, difficulty, profile, seed)?

    Exit status 0 when every run with a reference equals it (times aside), 1 when one differs or
    was another experiment (its inputs differ), 2 when no run has a reference.
    """
    from rich.markup import escape

    from reports.compare import ABSENT, label, match, short, summary_line
    from reports.records import load_many

    records, skipped = load_many(runs)
    references, ref_skipped = load_many(against)
    for path, reason in [*skipped, *ref_skipped]:
        err.print(f"skipped {path}: {reason}", highlight=False, soft_wrap=True)
    if not references:
        _fail(f"no reference records in {', '.join(map(str, against))}")
    if not records:
        _fail(f"no run records in {', '.join(map(str, runs))}")
    comparisons, unmatched = match(records, references)
    if not comparisons:
        _fail(f"none of the {len(records)} records read has a reference in {', '.join(map(str, against))}")
    if as_json:
        _print_json([{"run": c.label, "verdict": c.verdict, **{part: [dataclasses.asdict(d) for d in getattr(c, part)]
                      for part in ("inputs", "environment", "outcome", "unshared")}} for c in comparisons]
                    + [{"run": label(r), "verdict": "no reference"} for r in unmatched])
    else:
        colour = {"equal": "green", "differs": "red", "other inputs": "yellow"}
        for c in comparisons:
            console.print(f"[{colour[c.verdict]}]{c.verdict:<12}[/] {escape(f'{c.label}: {summary_line(c)}')}",
                          highlight=False)
            if c.environment:
                where = ", ".join(f"{d.path.removeprefix('provenance.')} {short(d.here, 30)} here, "
                                  f"{short(d.reference, 30)} in the reference" for d in c.environment)
                console.print(f"{'':<13}environment: {where}", markup=False, highlight=False)
            if c.unshared:
                only = ", ".join(f"{d.path} ({'here' if d.reference == ABSENT else 'the reference'})"
                                 for d in c.unshared)
                console.print(f"{'':<13}in one record only: {only}", markup=False, highlight=False)
        for r in unmatched:
            console.print(f"{'no reference':<12} {label(r)}", markup=False, highlight=False)
        verdicts = [c.verdict for c in comparisons]
        console.print(f"{len(comparisons)} compared: {verdicts.count('equal')} equal, {verdicts.count('differs')} "
                      f"differ, {verdicts.count('other inputs')} with other inputs; {len(unmatched)} without a reference")
    if any(c.verdict != "equal" for c in comparisons):
        raise typer.Exit(1)


@app.command("check-adapter")
def check_adapter(
    plugin: str = typer.Argument(..., help="method name, entry-point plugin, or path/to/file.py:Class"),
    suite: str = typer.Option("math_code"),
    budget: Optional[str] = typer.Option(None, help="counted FLOPs of the run (default: the smoke world's 4e11); "
                                                    "a smaller one is quicker but may end before a method's later phases"),
    set_: list[str] = typer.Option([], "--set", help="method config override key=value (repeatable)"),
    teacher: list[str] = typer.Option([], help="as bench run's: a named teacher NAME=PATH (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON (no progress)"),
) -> None:
    """Run a method briefly under the instrumented FLOP counter; fail if any compute went unmetered."""
    from bench.run.conformance import check_adapter as check

    budget_flops, overrides, teachers = _budget(budget), _overrides(set_), _overrides(teacher)
    if not as_json:
        console.print(f"checking {plugin}: a short run on the smoke world under torch's FLOP counter", highlight=False)
    with _one_line():
        result = check(plugin, suite=suite, budget_flops=budget_flops, progress=not as_json, overrides=overrides,
                       teachers=teachers)
    if as_json:
        _print_json({**dataclasses.asdict(result), "rel_diff": result.rel_diff, "ok": result.ok,
                     "unchecked_kinds": result.unchecked_kinds})
        if not result.ok:
            raise typer.Exit(1)
        return
    verdict = "[green]PASS[/green]" if result.ok else "[red]FAIL[/red]"
    console.print(
        f"{verdict} {result.method}: metered {result.metered_flops:.4e} FLOPs, instrumented "
        f"{result.instrumented_flops:.4e} ({100 * result.rel_diff:+.2f}%), counted {result.steps_flops:.3e} "
        f"({', '.join(f'{kind} {flops:.2e}' for kind, flops in result.counted_by_kind.items())})"
    )
    phases = ", ".join(f"{phase} {flops:.2e}" for phase, flops in result.counted_by_phase.items())
    console.print(f"phases reached: {phases}", highlight=False)
    if result.unchecked_kinds:
        console.print(f"[yellow]note[/yellow]: the run took no {' or '.join(result.unchecked_kinds)} step within "
                      f"{result.budget_flops:.1e} FLOPs, so the check says nothing of that code; a larger --budget, "
                      "or --set/--teacher that reach it (a teacher that finishes answers, say), would")
    if not result.ok:
        why = "it spent no counted FLOPs" if result.steps_flops <= 0 else "compute outside the ledger"
        _fail(f"{result.method} is not conformant: {why}", code=1)


@app.command("export-lm-eval")
def export_lm_eval(
    suite: str = typer.Argument(..., help="suite name"),
    out: Path = typer.Option(..., help="folder for the lm-eval task files"),
    difficulty: str = typer.Option("easy"),
    fmt: str = typer.Option("hf", "--format", help="prompt format: hf (chat, real models) or tiny"),
) -> None:
    """Write a suite's held-out split as a self-contained lm-eval task folder (`lm_eval --include_path OUT`)."""
    from bench.registry import get_suite
    from tasks.lm_eval_export import export, lm_eval_command

    with _one_line():
        chosen = get_suite(suite, difficulty, fmt)
        path = export(chosen, out)
    console.print(f"wrote {path}; score a model folder with:", soft_wrap=True)
    console.print(lm_eval_command(chosen, out.resolve()), highlight=False, soft_wrap=True, markup=False)


@app.command("export-hf")
def export_hf(
    suite: str = typer.Argument(..., help="suite name"),
    out: Path = typer.Option(..., help="folder for the dataset (parquet splits and a README.md card)"),
    difficulty: str = typer.Option("easy"),
    fmt: str = typer.Option("hf", "--format", help="prompt format: hf (chat, real models), tiny or worked"),
    train_size: int = typer.Option(1000, help="problems in the train split (a sample of the endless train stream)"),
    seed: int = typer.Option(0, help="seed of the train stream the sample is drawn from"),
) -> None:
    """Write a suite's train sample, validation and held-out splits as a Hugging Face dataset with a card."""
    from bench.registry import get_suite
    from tasks.hf_datasets import export

    if train_size < 0:
        _fail(f"--train-size must be at least 0, got {train_size}")
    with _one_line():
        card = export(get_suite(suite, difficulty, fmt), out, train_size=train_size, seed=seed)
    console.print(f"wrote {card.parent}; load it with datasets.load_dataset({str(out)!r}) "
                  f"or tasks.hf_datasets.load({str(out)!r})", highlight=False, soft_wrap=True, markup=False)


@app.command("eval")
def eval_(
    model: str = typer.Argument(..., help="a run directory (scores its final/), a local HF model folder or a cached hub id"),
    suite: Optional[str] = typer.Option(None, help="suite (default: the run's, else math_code)"),
    difficulty: Optional[str] = typer.Option(None, help="easy, medium or hard (default: the run's, else easy)"),
    profile: Optional[str] = typer.Option(None, help="prompt format and token cap (default: the run's, else hf)"),
    limit: Optional[int] = typer.Option(None, help="first N held-out problems per domain (default: all)"),
    task: list[str] = typer.Option([], help="also run this lm-eval task, e.g. gsm8k (repeatable; data must be cached)"),
    include_path: list[Path] = typer.Option([], help="extra folder of lm-eval task YAMLs (repeatable)"),
    max_new_tokens: Optional[int] = typer.Option(None, help="generation cap (default: the profile's evaluation cap)"),
    device: str = typer.Option("cpu", help="cpu, cuda or cuda:N"),
    batch_size: int = typer.Option(16),
    out: Optional[Path] = typer.Option(None, help="also write the scores and each prompt's completion as JSON here"),
) -> None:
    """Score a model with lm-evaluation-harness on a suite's held-out split (and any lm-eval task), offline."""
    import os
    import tempfile

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from bench.registry import get_suite
    from bench.run.harness import evaluate, metric_rows, resolve_target, scores_record, uses_chat_template
    from bench.store import write_json
    from bench.world.profiles import PROFILES
    from tasks.lm_eval_export import export, task_name

    if limit is not None and limit < 1:
        _fail(f"--limit must be at least 1, got {limit}")
    try:
        target = resolve_target(model, suite=suite, difficulty=difficulty, profile=profile)
        if target.profile not in PROFILES:
            raise unknown("profile", target.profile, list(PROFILES))
        chosen = PROFILES[target.profile]
        problems = get_suite(target.suite, target.difficulty, chosen.task_format)
        group = task_name(problems)
        with tempfile.TemporaryDirectory(prefix="opd-bench-lm-eval-") as tmp:
            export(problems, tmp, max_gen_toks=max_new_tokens or chosen.eval_max_new_tokens)
            output = evaluate(
                target.model, [group, *task], [Path(tmp), *include_path], limit=limit, device=_device(device),
                chat=uses_chat_template(target.model, chosen.task_format), batch_size=batch_size,
                include_defaults=any(not p.startswith("opd_bench_") for p in task),
            )
    except USER_ERRORS as exc:
        _fail(str(exc))
    results = output["results"]
    table = Table(title=f"{target.run_id or target.model}: {problems.id}" + (f", first {limit} per domain" if limit else ""))
    for col in ("task", "metric", "value"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for name, metric, value in metric_rows(results):
        table.add_row(name, metric, f"{value:.4f}")
    console.print(table)
    console.print(f"suite accuracy ({problems.id}): {100 * results[group]['acc,none']:.2f}%")
    if out is not None:
        with _one_line():
            write_json(out, scores_record(target, problems.id, group, problems.domains, limit, output))
        console.print(f"wrote {out}")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted; the run directory keeps its last checkpoint (use --resume)")
        sys.exit(130)


if __name__ == "__main__":
    main()
