"""Many runs and what is made of their records: `bench sweep`, `bench reproduce` (the reference
board's whole sweep, then its site), `bench report` (the static site) and `bench compare` (does a
run reproduce its reference record?)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import typer

from bench.cli.common import (
    ADDRESS_HELP, DEFAULT_PROFILE, DEVICE_HELP, DISTILL_EVAL_HELP, EVAL_EARLY_HELP, EVAL_EVERY_HELP, EVAL_SIZE_HELP,
    EXTERNAL_HELP, MAX_NEW_TOKENS_HELP, MILESTONES_HELP, MODEL_HELP, PROFILE_HELP, PROFILE_ORDER, ROLLOUT_HELP,
    RUN_OPTIONS, RUNS_HELP, SEEDS_HELP, TEACHER_HELP, _budget, _fail, _interruptible, _names, _one_line, _overrides,
    _print_json, _run_fields, _seeds, _split, app, console, err, interrupts,
)
from bench.errors import USER_ERRORS


PANEL = "Many runs and the leaderboard"  # the heading these commands are listed under in `bench --help`


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted before the sweep began; nothing was written")  # the sweep itself says how to go on
def sweep(
    methods: str = typer.Option(..., help="comma-separated method names"),
    suites: str = typer.Option("math_code", help="comma-separated suites"),
    seeds: str = typer.Option("3", help=SEEDS_HELP),
    difficulty: str = typer.Option("easy", help="easy, medium or hard"),
    budget: Optional[str] = typer.Option(None, help="counted training FLOPs (default: the profile's)"),
    profile: str = typer.Option(DEFAULT_PROFILE, help=PROFILE_HELP),
    runs: Path = typer.Option(Path("runs"), "--out", "--runs", help=RUNS_HELP),
    jobs: Optional[int] = typer.Option(
        None, help="parallel runs (default: CPU cores, 1 on a GPU; ray: CPUs of a local instance)"),
    executor: str = typer.Option("local", help="local (processes) or ray (one Ray task per run)"),
    address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
    gpus_per_run: float = typer.Option(0.0, help="ray: GPUs each run's task asks for (runs on a GPU only)"),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
    set_: list[str] = typer.Option([], "--set", help="method config override key=value for every run (repeatable)"),
    eval_size: Optional[int] = typer.Option(None, help=EVAL_SIZE_HELP),
    model: Optional[str] = typer.Option(None, help=MODEL_HELP),
    external: Optional[str] = typer.Option(None, help=EXTERNAL_HELP),
    teacher: list[str] = typer.Option([], help=TEACHER_HELP),
    device: str = typer.Option("cpu", help=DEVICE_HELP),
    max_new_tokens: Optional[int] = typer.Option(None, help=MAX_NEW_TOKENS_HELP),
    eval_every: float = typer.Option(0.1, help=EVAL_EVERY_HELP),
    eval_early: str = typer.Option("0.01,0.02,0.05", help=EVAL_EARLY_HELP),
    distill_eval_every: int = typer.Option(5, help=DISTILL_EVAL_HELP),
    save_milestones: bool = typer.Option(False, help=MILESTONES_HELP),
) -> None:
    """Run methods x suites x seeds, each run with the same `bench run` options (skips complete runs, resumes
    interrupted ones)."""
    with _interruptible(INTERRUPTED), _one_line():
        fields = _run_fields(eval_size, model, external, teacher, device, max_new_tokens, eval_every, eval_early,
                             distill_eval_every, save_milestones)
        configs = _sweep_configs(methods, suites, seeds, difficulty, budget, profile, runs, rollout, set_, fields)
        from bench.run.sweep import run_sweep

        on_gpu = any(c.on_gpu for c in configs)
        result = run_sweep(configs, jobs, console, _executor(executor, jobs, address, gpus_per_run, on_gpu))
    _sweep_outcome(result)


def _sweep_configs(methods: str, suites: str, seeds: str, difficulty: str, budget: Optional[str], profile: str,
                   runs: Path, rollout: str, set_: list[str], fields: dict[str, Any]) -> list:
    """The runs `bench sweep` plans from its options (`fields`: the `RunConfig` fields every run has, from
    `_run_fields`), each checked (`_validate`) before any starts."""
    methods_, suites_ = _split(methods, "--methods"), _split(suites, "--suites")
    _names(methods_, suites_, difficulty, profile)  # before torch loads: a typo is answered at once
    from bench.run.config import RunConfig
    from bench.run.sweep import plan

    base = RunConfig(method="", suite="", difficulty=difficulty, profile=profile,
                     budget_flops=_budget(budget), overrides=_overrides(set_), runs_dir=runs, rollout=rollout, **fields)
    configs = plan(methods_, suites_, _seeds(seeds), base)
    _validate(configs)
    return configs


# Ctrl-C or SIGTERM: the sweep stops its runs (`run_sweep`) and says so on one line.
INTERRUPTED = ("interrupted; the runs that ended are kept and each run under way keeps its last checkpoint: "
               "the same command continues")


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted before the sweep began; nothing was written")
def reproduce(
    profile: list[str] = typer.Option([], help="worlds to run, each on both suites (repeatable; default: every "
                                      "world whose base and teacher are shipped in bench/reference)"),
    seeds: str = typer.Option("1", help=f"per method and suite: {SEEDS_HELP}"),
    runs: Path = typer.Option(Path("runs"), help="folder that holds run directories"),
    out: Path = typer.Option(Path("leaderboard"), help="site folder; records are copied to OUT/records"),
    jobs: Optional[int] = typer.Option(None, help="parallel runs (default: CPU cores; ray: CPUs of a local instance)"),
    executor: str = typer.Option("local", help="local (processes) or ray (one Ray task per run)"),
    address: Optional[str] = typer.Option(None, help=ADDRESS_HELP),
    rollout: str = typer.Option("torch", help=ROLLOUT_HELP),
    force: bool = typer.Option(False, help="build in OUT even where that drops records these runs do not hold, or "
                               "writes over files of a site's names in a folder that holds no built site"),
) -> None:
    """Every method on math_code and four_domain at each world's budget, the recovery protocol, then the report."""
    from bench.world.regime import shipped_worlds
    from bench.run.sweep import run_sweep
    from reports.output import SiteBusyError, check_site_folder
    from reports.site import SiteOverwriteError, build_site

    with _one_line():
        studies = _studies(out, [])  # the site's studies, read and checked before any run starts
    if not (force and out.is_dir()):
        try:  # a file, or a folder of other files: found before any run, not after them
            check_site_folder(out)
        except SiteOverwriteError as exc:
            _fail(str(exc))
    checks = _BoardCheck(studies)
    with _interruptible(INTERRUPTED), _one_line():
        configs = _reproduce_configs(profile, seeds, runs, rollout)
        result = run_sweep(configs, jobs, console, _executor(executor, jobs, address),
                           expected_s=_record_wall_times(out) or _record_wall_times(REFERENCE_SITE))
    # copies each record it uses to OUT/records: the site rebuilds from itself
    try:
        with _interruptible(f"interrupted while the site was built, after the sweep: `bench report --runs {runs} "
                            f"--out {out}{' --force' if force else ''}` builds it"), _one_line():
            summary = build_site([runs], out, worlds=shipped_worlds(), force=force, studies=studies,
                                 board_check=checks)
    except SiteOverwriteError as exc:
        _sweep_outcome(result, fail=False)
        flag = "" if isinstance(exc, SiteBusyError) else " --force"  # busy: the same command, once it is free
        _fail(f"{exc} The runs are in {runs}: `bench report --runs {runs} --out {out}{flag}` builds the site "
              "from them.")
    checks.say()
    console.print(f"leaderboard: {summary.n_records} records -> {out / 'index.html'}; "
                  f"findings: {out / 'findings.html'}")
    _sweep_outcome(result)


REFERENCE_SITE = Path("leaderboard")  # the reference board, in a checkout of this repository


def _reproduce_configs(profile: list[str], seeds: str, runs: Path, rollout: str) -> list:
    """The runs `bench reproduce` plans from its options, each checked (`_validate`) before any starts."""
    from bench.run.config import RunConfig
    from bench.run.sweep import reproduce_plan

    profile = profile or shipped_profiles()
    if not profile:
        _fail("no world has shipped reference models (bench/reference/<profile>/); name one with --profile")
    configs = [c for name in profile for c in reproduce_plan(
        _seeds(seeds), RunConfig(method="", suite="", profile=name, runs_dir=runs, rollout=rollout))]
    _validate(configs)
    return configs


def _record_wall_times(site: Path) -> dict[str, float]:
    """Run id -> wall seconds of the records a site already holds (none for a new site or no folder).

    `bench reproduce` orders its runs and estimates their time from its site's records, or from the
    reference board's (run from a checkout) when it builds a new site."""
    from reports.records import load_records

    records, _ = load_records(site / "records")  # a folder that is not there gives no records
    return {r["run_id"]: float(r["wall_s"]) for r in records if r.get("wall_s")}


def shipped_profiles() -> list[str]:
    """The worlds `bench reproduce` runs by default: those whose base and teacher are shipped."""
    from bench.world import reference

    # a world may ship its base before its teacher
    return [name for name in PROFILE_ORDER if all(reference.ships(name, part) for part in reference.PARTS)]


def _executor(name: str, jobs: Optional[int], address: Optional[str], gpus_per_run: float = 0.0, gpu: bool = False):
    """The sweep executor, for runs on a GPU or not; checked (Ray installed, options that apply) before
    any run starts."""
    from bench.run.executors import make_executor

    return make_executor(name, jobs=jobs, address=address, gpus_per_run=gpus_per_run, gpu=gpu)


def _validate(configs: list) -> None:
    """Resolve every method, suite and `--set` override before any run starts, so a typo fails fast."""
    from bench.registry import get_method, get_suite
    from bench.run.config import method_config
    from bench.world.profiles import PROFILES

    for config in configs:
        method_config(get_method(config.method), config.overrides)
        get_suite(config.suite, config.difficulty, PROFILES[config.profile].task_format)


def _sweep_outcome(result, fail: bool = True) -> None:
    console.print(f"{len(result.done)} runs done, {len(result.skipped)} already complete, {len(result.failed)} failed")
    if result.failed and fail:
        _fail("; ".join(f"{name}: {why}" for name, why in result.failed), code=1)


def _studies(out: Path, folders: list[Path]) -> list:
    """The studies a site shows: those it already holds (OUT/studies/*) and `folders`, each loaded and its
    sweep command checked against its records at this code (`plan_check`); a study that cannot be
    read or whose command cannot be parsed stops the build with one line."""
    from reports.studies import StudyError, load_study, site_studies

    from bench.run.plan_check import plan_check

    chosen: dict[str, Path] = {}
    for folder in [*site_studies(out), *folders]:
        if folder.name in chosen and chosen[folder.name].resolve() != folder.resolve():
            _fail(f"two studies named {folder.name}: {chosen[folder.name]} and {folder} (a study's name is its "
                  "folder's)")
        chosen[folder.name] = folder
    studies, commit = [], _built_at()
    for folder in chosen.values():
        try:
            study = load_study(folder)
            configs = study_configs(study)
            check = plan_check(configs, study.records)
        except StudyError as exc:
            _fail(str(exc))
        except USER_ERRORS as exc:  # a sweep command that names an unknown method, key or value
            _fail(f"study {folder}: {exc}")
        study.plan = {**commit, "runs": len(configs), **check}
        studies.append(study)
    return studies


def _built_at() -> dict:
    """The commit a site is built at, and whether the code has changes not yet committed beyond it."""
    from bench.run.provenance import git_commit, uncommitted_code

    return {"commit": git_commit(), "uncommitted": uncommitted_code()}


def _differs(where: str, check: dict, plural: bool = False) -> str:
    n = len(check["differences"])
    verb, whose = ("do", "their") if plural else ("does", "its")
    return (f"{where} {verb} not make exactly {whose} records ({n} difference{'s' if n != 1 else ''}; first: "
            f"{check['differences'][0]})")


class _BoardCheck:
    """build_site's `board_check`: whether the site's own command (`bench reproduce ...`,
    reports.reproduce.site_command), resolved by today's code, plans exactly the board's records
    (`plan_check`); None where it cannot be planned here (no records, or a world that needs local
    models). What to say of it and of the studies waits in `lines` until the site is built, so that a
    build that fails says one line."""

    def __init__(self, studies: list) -> None:
        self.lines = [_differs(f"study {s.folder}: its sweep command{'s' if len(s.sweep) > 1 else ''}", s.plan,
                               plural=len(s.sweep) > 1) for s in studies if s.plan and s.plan["differences"]]

    def __call__(self, records: list[dict], command: str) -> dict | None:
        from bench.run.plan_check import plan_check

        if not records:
            return None
        params = _parsed(command, "reproduce", "the site")
        try:
            configs = _as_run(_reproduce_configs(params["profile"], params["seeds"], params["runs"], params["rollout"]),
                              params["executor"])
            check = plan_check(configs, records)
        except USER_ERRORS as exc:
            self.lines.append(f"the site's command `{command}` was not checked against its records: {exc}")
            return None
        if check["differences"]:
            self.lines.append(_differs(f"the site's command `{command}`", check))
        return {**_built_at(), "runs": len(configs), **check}

    def say(self) -> None:
        for line in self.lines:
            err.print(line, highlight=False, soft_wrap=True)


def _parsed(text: str, command: str, where: str) -> dict:
    """The options of a `bench <command> ...` command line, parsed by that command's own options."""
    import shlex

    from typer.exceptions import TyperException  # what typer's own click raises on bad options
    from typer.main import get_command

    try:
        words = shlex.split(text)
        if words[:2] != ["bench", command]:
            raise ValueError(f"it does not start with `bench {command}`")
        return get_command(app).commands[command].make_context(f"bench {command}", words[2:]).params
    except (ValueError, TyperException) as exc:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        _fail(f"{where}: its {command} command cannot be read: {message}")
        raise  # pragma: no cover  (_fail raises)


def study_configs(study) -> list:
    """The runs a study's sweep commands plan together, in order (reports.studies.Study)."""
    return [c for command in study.sweep for c in _parsed_sweep(command, f"study {study.folder}")]


def _parsed_sweep(text: str, where: str) -> list:
    """The runs a `bench sweep ...` command line plans, to compare with records: none is run, so a
    `--device cuda` needs no GPU here. Raises a user error (bench.errors) for a bad option's value."""
    params = _parsed(text, "sweep", where)
    return _as_run(_sweep_configs(*(params[k] for k in ("methods", "suites", "seeds", "difficulty", "budget",
                                                        "profile", "runs", "rollout", "set_")),
                                  _run_fields(*(params[k] for k in RUN_OPTIONS), planning=True)), params["executor"])


def _as_run(configs: list, executor: str) -> list:
    """The planned runs as the sweep's executor runs them: under Ray each run's phases are Ray tasks
    (`isolated` on a GPU), which changes how they draw their samples (`phase_streams`)."""
    from dataclasses import replace

    from bench.run.executors import task_config

    if executor != "ray":
        return configs
    return [replace(c, phase_executor=task_config(c).phase_executor) for c in configs]


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted; the same command builds the site again (it is built aside and moved into --out at the end)")
def report(
    runs: list[Path] = typer.Option([Path("runs")], help="runs folder, or folder of record JSON files (repeatable)"),
    out: Path = typer.Option(
        Path("site"), help="where the static site is written (the committed reference is leaderboard/)"),
    force: bool = typer.Option(False, help="build in OUT even where that drops records these runs do not hold, or "
                               "writes over files of a site's names in a folder that holds no built site"),
    study: list[Path] = typer.Option(
        [], help="a study folder (study.json and records/) to show beside the board and copy into OUT/studies/ "
                 "(repeatable; the studies OUT already holds are always shown)"),
) -> None:
    """Build the static HTML leaderboard from run records (and the studies beside it)."""
    from reports.records import load_many
    from reports.site import SiteOverwriteError, build_site

    from bench.world.regime import shipped_worlds

    missing = [str(r) for r in runs if not r.exists()]
    if missing:
        _fail(f"no such runs folder: {', '.join(missing)}")
    files = [str(r) for r in runs if not r.is_dir()]
    if files:
        _fail(f"--runs {', '.join(files)} {'is a file' if len(files) == 1 else 'are files'}, not a folder; give a "
              "folder of runs (or one run's directory) or of record JSON files")
    records, skipped = load_many(runs)
    if not records:  # found before anything is written
        why = f" ({len(skipped)} files skipped; the first, {skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        _fail(f"no valid run records in {', '.join(map(str, runs))}{why}; nothing written")
    with _one_line():
        studies = _studies(out, study)
    checks = _BoardCheck(studies)
    try:
        with _one_line():
            summary = build_site(runs, out, worlds=shipped_worlds(), force=force, studies=studies, board_check=checks)
    except SiteOverwriteError as exc:
        _fail(str(exc))
    checks.say()
    for path, reason in summary.skipped:
        err.print(f"skipped {path}: {reason}", highlight=False, soft_wrap=True)
    console.print(
        f"leaderboard: {summary.n_records} records, {summary.n_skipped} skipped, "
        f"{len(summary.pages)} pages -> {out / 'index.html'} ({summary.wall_s:.1f} s)"
    )


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted")
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
                      f"differ, {verdicts.count('other inputs')} with other inputs; "
                      f"{len(unmatched)} without a reference")
    if any(c.verdict != "equal" for c in comparisons):
        raise typer.Exit(1)
