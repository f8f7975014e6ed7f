"""The commands around a run: `bench list`, `bench flops` (the FLOP audit), `bench check-adapter` (is
every FLOP of a method metered?), `bench export-lm-eval`, `bench export-hf` and `bench eval`."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from bench.cli.common import (
    DEFAULT_PROFILE, TEACHER_FORM, _budget, _device, _fail, _names, _one_line, _overrides, _plain, _print_json,
    app, console, interrupts,
)
from bench.errors import USER_ERRORS, AdapterError, RunError, unknown


PANEL = "Look up, check, export"  # the heading these commands are listed under in `bench --help`
FORMAT_HELP = ("prompt format: hf (chat prompts, real models: --profile hf), tiny (short answers: the direct "
               "world's) or worked (worked answers: the tiny world's)")


@app.command("list", rich_help_panel=PANEL)
@interrupts("interrupted")
def list_(
    what: str = typer.Argument(..., help="methods, suites or profiles"),
    names: Optional[list[str]] = typer.Argument(
        None, help="methods: only these (a name, an entry point or path/to/file.py:Class)", show_default=False),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="methods: each one's config fields, types and defaults"),
    profile: str = typer.Option(DEFAULT_PROFILE, help="methods: the defaults a run in this world gets (a world "
                                "sets some of its own)"),
) -> None:
    """List methods (with --verbose, their --set keys), suites or profiles."""
    if names and what != "methods":
        _fail(f"bench list {what} takes no names (only bench list methods does)")
    if what == "methods":
        from bench.registry import get_method, method_names
        from bench.world.profiles import PROFILES

        if profile not in PROFILES:
            _fail(str(unknown("profile", profile, list(PROFILES))))
        loaded = {}  # asked for by name: one that cannot be loaded is an error, not a row; each loaded once
        for name in names or []:
            with _one_line():
                loaded[name] = get_method(name)
        rows = []
        for name in names or method_names():
            row: dict[str, Any] = {"name": name}
            if verbose or as_json:
                from bench.run.config import config_fields, method_config  # imports torch: only here

                try:  # an installed plugin that fails to load is listed with its error, the others as ever
                    cls = loaded[name] if name in loaded else get_method(name)
                    world = dict(PROFILES[profile].defaults_for(name))
                    row["config"] = [{**f, "world_default": f["name"] in world}
                                     for f in config_fields(method_config(cls, tuple(world.items())))]
                    row["summary"] = (cls.__doc__ or "").strip().partition("\n")[0]
                except (AdapterError, RunError) as exc:
                    row["error"] = str(exc)
            rows.append(row)
        if as_json:
            return _print_json(rows)
        for row in rows:
            if verbose and "error" in row:
                print(f"{row['name']}: cannot be used: {row['error']}")
                continue
            print(row["name"] + (f": {row['summary']}" if verbose and row.get("summary") else ""))
            for field in row.get("config", []) if verbose else []:
                whose = f", the {profile} world's" if field["world_default"] else ""
                print(f"    --set {field['name']}=...  ({field['type']}, default {field['default']!r}{whose})")
    elif what == "profiles":
        from bench.world.profiles import PROFILES

        rows = [{"name": p.name, "description": p.description, "budget_flops": p.budget_flops,
                 "eval_size": p.eval_size} for p in PROFILES.values()]
        if as_json:
            return _print_json(rows)
        for row in rows:
            print(f"{row['name']}: {row['description']} (default budget {row['budget_flops']:.0e} FLOPs, "
                  f"{row['eval_size']} held-out prompts per domain)")
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


@app.command(rich_help_panel=PANEL)
@interrupts("interrupted")
def flops(
    model: str = typer.Argument(..., help="tiny spec name or local HF model folder"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
) -> None:
    """Per-token FLOPs from the analytic formula, audited against torch's instrumented counter."""
    from bench.accounting import audit
    from bench.world.models import load_model

    with _one_line():  # an architecture with no FLOP formula too
        loaded, _ = load_model(model)
        report = audit.flops_report(loaded)
    off = [r["phase"] for r in report["audit"] if not audit.AuditRow(**r).ok]
    if as_json:
        _print_json(report)
    else:
        console.print(audit_table(report))
    if off:  # exit 1, as a failed check-adapter: the formula, not the input, is wrong
        _fail(f"the analytic formula and torch's counter differ by more than {audit.TOLERANCE:.0%} on "
              f"{', '.join(off)}: the ledger would not charge this model what it runs", code=1)


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


@app.command("check-adapter", rich_help_panel=PANEL)
@interrupts("interrupted")
def check_adapter(
    plugin: str = typer.Argument(..., help="method name, entry-point plugin, or path/to/file.py:Class"),
    suite: str = typer.Option("math_code", help="task suite the check runs on"),
    budget: Optional[str] = typer.Option(
        None, help="counted FLOPs of the run (default: the smoke world's 4e11); a smaller one is quicker but may end "
                   "before a method's later phases"),
    set_: list[str] = typer.Option([], "--set", help="method config override key=value (repeatable)"),
    teacher: list[str] = typer.Option([], help="as bench run's: a named teacher NAME=PATH (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print the outcome as JSON (no progress)"),
) -> None:
    """Run a method briefly under the instrumented FLOP counter; fail if any compute went unmetered."""
    from bench.registry import get_method
    from bench.run.conformance import check_adapter as check

    with _one_line():
        budget_flops, overrides, teachers = _budget(budget), _overrides(set_), _overrides(teacher, TEACHER_FORM)
        _names([plugin], [suite], "easy", "smoke")
        method_cls = get_method(plugin)  # a plugin that cannot be loaded is refused before the check is announced
    if not as_json:
        console.print(f"checking {plugin}: a short run on the smoke world under torch's FLOP counter", highlight=False)
    with _one_line():
        result = check(plugin, suite=suite, budget_flops=budget_flops, progress=not as_json, overrides=overrides,
                       teachers=teachers)
    if as_json:
        _print_json({**dataclasses.asdict(result), "rel_diff": result.rel_diff, "eval_rel_diff": result.eval_rel_diff,
                     "ok": result.ok, "unchecked_kinds": result.unchecked_kinds})
        if not result.ok:
            raise typer.Exit(1)
        return
    verdict = "[green]PASS[/green]" if result.ok else "[red]FAIL[/red]"
    console.print(
        f"{verdict} {result.method}: counted {result.metered_flops:.4e} FLOPs, instrumented "
        f"{result.instrumented_flops:.4e} ({100 * result.rel_diff:+.2f}%) "
        f"({', '.join(f'{kind} {flops:.2e}' for kind, flops in result.counted_by_kind.items())}); "
        f"held-out evaluations charged {result.eval_flops:.4e}, instrumented {result.instrumented_eval_flops:.4e} "
        f"({100 * result.eval_rel_diff:+.2f}%)"
    )
    phases = ", ".join(f"{phase} {flops:.2e}" for phase, flops in result.counted_by_phase.items())
    console.print(f"phases reached: {phases}", highlight=False)
    if result.unchecked_kinds:
        console.print(f"[yellow]note[/yellow]: the run took no {' or '.join(result.unchecked_kinds)} step within "
                      f"{result.budget_flops:.1e} FLOPs, so the check says nothing of that code; a larger --budget, "
                      "or --set/--teacher that reach it (a teacher that finishes answers, say), would")
    if result.heldout_reads:
        console.print(f"[yellow]note[/yellow]: the method read held-out accuracy {result.heldout_reads} times "
                      f"(ctx.evaluate, split heldout), saying why: {method_cls.reads_heldout}. Fine for a measurement "
                      "(a recovery target) or a report; a method that chooses what it delivers by it chooses on "
                      "the test set, and the board marks the runs of a ranked method that read it")
    if not result.ok:
        why = "it spent no counted FLOPs" if result.metered_flops <= 0 else "compute outside the ledger"
        _fail(f"{result.method} is not conformant: {why}", code=1)


@app.command("export-lm-eval", rich_help_panel=PANEL)
@interrupts("interrupted; --out may hold part of an export: the same command writes it again")
def export_lm_eval(
    suite: str = typer.Argument(..., help="suite name"),
    out: Path = typer.Option(..., help="folder for the lm-eval task files"),
    difficulty: str = typer.Option("easy", help="easy, medium or hard"),
    fmt: str = typer.Option("hf", "--format", help=FORMAT_HELP),
    model: Optional[str] = typer.Option(None, help="the model to score (a folder, run directory or cached hub id): "
                                        "the printed command gets the flags its tokenizer needs"),
) -> None:
    """Write a suite's held-out split as a self-contained lm-eval task folder (`lm_eval --include_path OUT`)."""
    from bench.registry import get_suite
    from bench.run.harness import lm_eval_feed, lm_eval_flags, load_tokenizer
    from bench.world.models import resolve_model
    from tasks.lm_eval_export import ExportFolderError, export, lm_eval_command

    with _one_line():
        chosen = get_suite(suite, difficulty, fmt)
        if model is None:
            chat, model_args = lm_eval_feed(True, chosen.fmt)
            folder, stop_ids = "MODEL_DIR", ()
        else:
            folder = resolve_model(model)
            chat, model_args, stop_ids = lm_eval_flags(load_tokenizer(folder), chosen.fmt)
        try:
            path = export(chosen, out)
        except ExportFolderError as exc:
            _fail(str(exc))
    console.print(f"wrote {path}; score {'the' if model else 'a'} model folder with:", soft_wrap=True)
    console.print(lm_eval_command(chosen, out.resolve(), str(folder), model_args=model_args, chat=chat,
                                  stop_ids=stop_ids), highlight=False, soft_wrap=True, markup=False)
    if model is None and chosen.fmt == "hf":
        console.print("(the flags of a model with a chat template; --model names the model and prints its own)",
                      highlight=False, soft_wrap=True)


@app.command("export-hf", rich_help_panel=PANEL)
@interrupts("interrupted; --out may hold part of an export: the same command writes it again")
def export_hf(
    suite: str = typer.Argument(..., help="suite name"),
    out: Path = typer.Option(..., help="folder for the dataset (parquet splits and a README.md card)"),
    difficulty: str = typer.Option("easy", help="easy, medium or hard"),
    fmt: str = typer.Option("hf", "--format", help=FORMAT_HELP),
    train_size: int = typer.Option(1000, help="problems in the train split (a sample of the endless train stream)"),
    seed: int = typer.Option(0, help="seed of the train stream the sample is drawn from"),
) -> None:
    """Write a suite's train sample, validation and held-out splits as a Hugging Face dataset with a card."""
    from bench.registry import get_suite
    from tasks.hf_datasets import SuiteFolderError, export

    if train_size < 1:
        _fail(f"--train-size must be at least 1, got {train_size}")
    with _one_line():
        try:
            card = export(get_suite(suite, difficulty, fmt), out, train_size=train_size, seed=seed)
        except SuiteFolderError as exc:
            _fail(str(exc))
    console.print(f"wrote {card.parent}; load it with datasets.load_dataset({str(out)!r}) "
                  f"or tasks.hf_datasets.load({str(out)!r})", highlight=False, soft_wrap=True, markup=False)


def _file_above(path: Path) -> Optional[Path]:
    """The file, if any, that stands where a folder above `path` would have to be made."""
    for parent in path.parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


@app.command("eval", rich_help_panel=PANEL)
@interrupts("interrupted; nothing was written")
def eval_(
    model: str = typer.Argument(
        ..., help="a run directory (scores its final/), a local HF model folder or a cached hub id"),
    suite: Optional[str] = typer.Option(None, help="suite (default: the run's, else math_code)"),
    difficulty: Optional[str] = typer.Option(None, help="easy, medium or hard (default: the run's, else easy)"),
    profile: Optional[str] = typer.Option(None, help="prompt format and token cap (default: the run's; else tiny "
                                          "for a tiny spec name, hf for a folder)"),
    limit: Optional[int] = typer.Option(
        None, help="first N held-out problems per domain (default: the run's --eval-size, else all)"),
    task: list[str] = typer.Option([], help="also run this lm-eval task, e.g. gsm8k (repeatable; data must be cached)"),
    include_path: list[Path] = typer.Option([], help="extra folder of lm-eval task YAMLs (repeatable)"),
    max_new_tokens: Optional[int] = typer.Option(
        None, help="generation cap (default: the run's evaluation cap, else the profile's)"),
    device: Optional[str] = typer.Option(None, help="cpu, cuda or cuda:N (default: the run's kind, else cpu)"),
    batch_size: int = typer.Option(16, help="prompts lm-eval generates for at once"),
    out: Optional[Path] = typer.Option(None, help="also write the scores and each prompt's completion as JSON here"),
) -> None:
    """Score a model with lm-evaluation-harness on a suite's held-out split (and any lm-eval task), offline."""
    import os
    import tempfile

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from bench.registry import get_suite
    from bench.run.harness import check_positions, eval_dtype, evaluate, metric_rows, resolve_target, scores_record
    from bench.store import write_json
    from bench.world.profiles import PROFILES
    from bench.world.warmup import matmul_precision
    from tasks.lm_eval_export import export, task_name

    if limit is not None and limit < 1:
        _fail(f"--limit must be at least 1, got {limit}")
    if batch_size < 1:
        _fail(f"--batch-size must be at least 1, got {batch_size}")
    if max_new_tokens is not None and max_new_tokens < 1:  # 0 is no answer at all, not the profile's cap
        _fail(f"--max-new-tokens must be at least 1, got {max_new_tokens}")
    if out is not None and out.is_dir():  # found now, not after the evaluation
        _fail(f"--out {out} is a folder; name the JSON file to write")
    if out is not None and (blocker := _file_above(out)) is not None:
        _fail(f"--out {out}: {blocker} is a file, not a folder; name a JSON file in a folder")
    for folder in include_path:  # lm-eval would read a missing folder as one without tasks
        if not folder.is_dir():
            why = "is a file, not a folder" if folder.exists() else "does not exist; give a folder"
            _fail(f"--include-path {folder} {why} of lm-eval task YAML files")
    try:
        target = resolve_target(model, suite=suite, difficulty=difficulty, profile=profile)
        if target.profile not in PROFILES:
            raise unknown("profile", target.profile, list(PROFILES))
        chosen = PROFILES[target.profile]
        from_run = {}  # the options a run directory's record gave their defaults, said before the evaluation
        if limit is None and target.eval_size:
            limit = from_run["--limit"] = target.eval_size
        if max_new_tokens is None and target.max_new_tokens:
            max_new_tokens = from_run["--max-new-tokens"] = target.max_new_tokens
        if device is None and target.device:
            device = from_run["--device"] = target.device
        cap = chosen.eval_max_new_tokens if max_new_tokens is None else max_new_tokens
        check_positions(target.model, cap, chosen.name)
        problems = get_suite(target.suite, target.difficulty, chosen.task_format)
        group = task_name(problems)
        try:
            device = _device(device or "cpu")
        except RunError as exc:
            raise RunError(f"{exc} (the run's device; --device cpu scores it here)" if "--device" in from_run
                           else str(exc)) from None
        if from_run:
            console.print("defaults from the run: " + ", ".join(f"{k} {v}" for k, v in from_run.items()),
                          highlight=False)
        matmul_precision(chosen)  # gpu-small's TF32, as its runs evaluate
        settings = {"max_new_tokens": cap, "device": device, "dtype": eval_dtype(device, chosen.task_format),
                    "batch_size": batch_size}
        with tempfile.TemporaryDirectory(prefix="opd-bench-lm-eval-") as tmp:
            export(problems, tmp, max_gen_toks=cap)
            output = evaluate(
                target.model, [group, *task], [Path(tmp), *include_path], limit=limit, device=device,
                dtype=settings["dtype"], task_format=chosen.task_format, batch_size=batch_size,
                include_defaults=any(not p.startswith("opd_bench_") for p in task),
            )
    except USER_ERRORS as exc:
        _fail(str(exc))
    results = output["results"]
    first = f", first {limit} per domain" if limit else ""
    table = Table(title=f"{target.run_id or target.model}: {problems.id}{first}")
    for col in ("task", "metric", "value"):
        table.add_column(col, justify="right" if col == "value" else "left")
    for name, metric, value in metric_rows(results):
        table.add_row(name, metric, f"{value:.4f}")
    console.print(table)
    console.print(f"suite accuracy ({problems.id}): {100 * results[group]['acc,none']:.2f}%")
    if out is not None:
        with _one_line():
            write_json(out, scores_record(target, problems.id, group, problems.domains, limit, output, settings))
        console.print(f"wrote {out}")
