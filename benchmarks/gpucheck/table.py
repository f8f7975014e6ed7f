"""The check's results as the markdown table the docs report, several results files merged."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gpucheck.common import first_line
from gpucheck.update import UPDATE_LABELS


BOOKKEEPING = ("skipped", "part_s", "goals", "profile")  # a part's keys that are no measurement


def merge(files: list[Path], parts) -> dict:
    """Several runs' results as one (a second call that ran the parts the first had no time for):
    a later file's part (a key in `parts`) replaces an earlier one's unless it was skipped there, or
    measured nothing (every measurement in it skipped for time)."""
    merged: dict = {}
    for path in files:
        results = _first_lines(json.loads(Path(path).read_text()))
        for key, value in results.items():
            measured = isinstance(value, dict) and "skipped" not in value and any(
                v is not None for k, v in value.items() if k not in BOOKKEEPING)
            if key in parts and not measured and key in merged:
                continue
            merged[key] = value
    return merged


def _first_lines(value):
    """`value` with every recorded error cut to its first line (files written before errors were)."""
    if isinstance(value, dict):
        return {k: first_line(v) if k == "error" and isinstance(v, str) else _first_lines(v)
                for k, v in value.items()}
    return [_first_lines(v) for v in value] if isinstance(value, list) else value


def _x(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}x"


def _shape_rows(results: dict, part: str) -> dict[str, dict]:
    return {r["shape"]: r for r in (results.get(part) or {}).get("shapes", [])}


def _compiled_note(measured: dict) -> str:
    """What the table adds to a timing that holds a compilation (none should)."""
    return " (timed with a compilation in it)" if measured.get("compiled_while_timed") else ""


def _tps(row: dict, name: str) -> str:
    value = row.get(name) or {}
    if "tokens_per_s" not in value:
        return value.get("error", "not measured")
    return f"{value['tokens_per_s']:,.0f}{_compiled_note(value)}"


def _met(goal: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[goal]


def table(results: dict) -> str:
    """The check's figures as the markdown table the docs report: ratios, what each is of, and the goal."""
    missing = "not measured" + (f" (skipped for time; `{results['rerun']}`)" if results.get("rerun") else "")
    lines = [f"{results.get('date')}, {results.get('device')}, torch {results.get('torch')}, transformers "
             f"{results.get('transformers')} (`python benchmarks/gpu_check.py`):", "",
             "| figure | measured | goal |", "| --- | --- | --- |"]
    for rows in (_rollout_rows, _update_rows, _fused_rows, _audit_rows, _gpu_small_rows, _profile_rows):
        lines += rows(results, missing)
    return "\n".join(lines)


def brief(results: dict) -> str:
    """The README's short table: each goal's figures in a row, against the goal, met or not."""
    rows = ["| figure | measured | goal |", "| --- | --- | --- |"]
    for part in (_brief_audit, _brief_rollout, _brief_update, _brief_fused, _brief_gpu_small):
        rows += part(results)
    return "\n".join(rows)


def _ratio(value: float) -> str:
    return f"{value:.3g}x"


def _brief_audit(results: dict) -> list[str]:
    audit = results.get("audit") or {}
    if "rows" not in audit:
        return [f"| FLOP ledger against torch's counter on CUDA | {audit.get('error', 'not measured')} | exact |"]
    diffs = [r["rel_diff"] for r in audit["rows"]] + [(audit.get("graph_rollout") or {}).get("eager_rel_diff", 0.0)]
    worst = max(diffs, key=abs)
    got = "exact (0.000%)" if f"{100 * abs(worst):.3f}" == "0.000" else f"off by {100 * worst:+.3f}%"
    replays = ", CUDA-graph replays included" if audit.get("graph_rollout") else ""
    return [f"| FLOP ledger against torch's counter on CUDA{replays} | {got} | exact: "
            f"{_met(got.startswith('exact'))} |"]


def _brief_rollout(results: dict) -> list[str]:
    shapes = list(_shape_rows(results, "rollout").values())
    if not shapes:
        return ["| rollout tokens/s, our engine against `generate` | not measured | 1.5x static cache |"]
    batch, rest = shapes[0], shapes[1:]
    prompts, samples, tokens = batch["shape"].split("x")
    static = batch.get("ours_vs_hf_static")
    got = f"{_tps(batch, 'ours')} tokens/s: " + (
        f"**{_ratio(static)}** `generate` (static cache, compiled), " if static else "") + (
        f"{_ratio(batch['ours_vs_hf_dynamic'])} `generate` (dynamic cache)" if batch.get("ours_vs_hf_dynamic")
        else "`generate` not measured")
    rows = [f"| rollout {prompts} prompts x {samples} samples x {tokens} tokens, our CUDA-graph engine | {got} | "
            f"1.5x static: {_met(None if static is None else static >= 1.5)} |"]
    if rest:
        names = " and ".join(f"{' x '.join(r['shape'].split('x'))}" for r in rest)
        dynamic = [r.get("ours_vs_hf_dynamic") for r in rest]
        every = [r.get("ours_vs_hf_dynamic") for r in shapes]  # the goal holds at every shape, the batch's too
        rows.append(f"| rollout at the other shapes ({names}) | "
                    + " and ".join(_tps(r, "ours") for r in rest) + " tokens/s: "
                    + " and ".join("not measured" if d is None else _ratio(d) for d in dynamic)
                    + " `generate` (dynamic cache) | never below dynamic: "
                    + _met(None if None in every else min(every) >= 1) + " |")
    return rows


def _brief_update(results: dict) -> list[str]:
    """The goal's two paths, eager and the fused head with the compiled decoder, each over its shapes."""
    rows, measured = [], (results.get("update") or {}).get("shapes", [])
    for path, label in (("eager", "update step, {shapes} tokens, eager"),
                        ("fused_and_compiled", "the same, fused LM head + compiled decoder")):
        found = sorted((r for r in measured if _path_of(r) == path and "mfu" in r),
                       key=lambda r: (r["seq"], r["batch"]))
        if not found:
            rows.append(f"| {label.format(shapes='16 x 1024 / 16 x 2048')} | not measured | 40% |")
            continue
        shapes = " / ".join(f"{r['batch']} x {r['seq']}" for r in found)
        got = " / ".join(f"{100 * r['mfu']:.1f}%" for r in found) + " MFU"
        if path != "eager":
            got += " (first step " + " / ".join(f"{r['first_step_s']:.0f} s" for r in found) + " compiling)"
        rows.append(f"| {label.format(shapes=shapes)} | {got} | 40%: {_met(min(r['mfu'] for r in found) >= 0.4)} |")
    return rows


def _brief_fused(results: dict) -> list[str]:
    fused = results.get("fused") or {}
    got = (f"log-probs within {fused['max_abs_logprob_diff']:.2g}, gradient cosine {fused['grad_cosine']:.5f}"
           if "grad_cosine" in fused else fused.get("error", "not measured"))
    return [f"| fused head against eager, bf16 | {got} | bf16 rounding |"]


def _brief_gpu_small(results: dict) -> list[str]:
    small = results.get("gpu_small") or {}
    prep, run = small.get("prepare") or {}, small.get("run") or {}
    got = (f"{prep['seconds']:.0f} s" if "seconds" in prep else prep.get("error", "not measured")) + " / " + (
        f"{run['wall_s']:.0f} s, {100 * run['base_accuracy']:.1f}% -> {100 * run['final_accuracy']:.1f}% "
        f"({run['gain_points']:+.1f} points)" if "wall_s" in run else run.get("error", "not measured"))
    goals = small.get("goals") or {}
    met = [goals.get(k) for k in ("prepare_3min", "run_3min", "gain_8_points")]
    return [f"| `gpu-small` world: `bench prepare` / default run | {got} | 3 min each, +8 points: "
            f"{_met(None if None in met else all(met))} |"]


def _rollout_rows(results: dict, missing: str) -> list[str]:
    """Per shape: our engine's tokens/s against `generate`'s and `TorchRollout`'s, and the goals."""
    rollout, more = _shape_rows(results, "rollout"), _shape_rows(results, "rollout_more")
    lines = []
    for shape, row in rollout.items():
        extra = more.get(shape, {})
        static = row.get("ours_vs_hf_static") or extra.get("ours_vs_hf_static")
        static_row = row if row.get("ours_vs_hf_static") else extra
        lines.append(f"| rollout {shape} (prompts x samples x new tokens), tokens/s | ours {_tps(row, 'ours')}; "
                     f"`generate` dynamic cache {_tps(row, 'hf_dynamic')} (ours {_x(row.get('ours_vs_hf_dynamic'))}); "
                     f"static cache, compiled, {_tps(static_row, 'hf_static')} (ours {_x(static)}); "
                     f"`TorchRollout` {_tps(extra, 'torch_eager')} (ours {_x(extra.get('ours_vs_torch_eager'))})"
                     + (f"; ours again, after compiled `generate`, {_tps(row, 'ours_again')}"
                        if "ours_again" in row else "")
                     + " | "
                     + ("ours >= 1.5x static cache: " + _met(None if static is None else static >= 1.5) + "; "
                        if shape == next(iter(rollout)) else "")
                     + "ours >= dynamic cache: "
                     + _met(None if row.get("ours_vs_hf_dynamic") is None else row["ours_vs_hf_dynamic"] >= 1) + " |")
    return lines or [f"| rollout tokens/s | {missing} | |"]


def _path_of(row: dict) -> str:
    """An update row's path (files from before the paths were measured apart have none)."""
    return row.get("path") or ("fused_and_compiled" if row.get("fused_and_compiled") else "eager")


def _update_rows(results: dict, missing: str) -> list[str]:
    """Per shape and path: the update's MFU against the 40% goal."""
    update = results.get("update") or {}
    # by shape, then eager, each piece and both: the order they read in, not the one they are measured in
    order = list(UPDATE_LABELS)
    lines = []
    for row in sorted(update.get("shapes", []), key=lambda r: (r["seq"], r["batch"], order.index(_path_of(r)))):
        how = UPDATE_LABELS[_path_of(row)]
        how += " and head" if row.get("compiled_head") else ""  # the fused head's work after its matmuls
        how += ", logits kept" if row.get("head_logits_kept") else ""
        how += ", fused AdamW" if row.get("fused_optimizer") else ""
        how += " on fp32 master weights" if row.get("master_weights") else ""
        compiled = row.get("graphs_compiled")
        graphs = f", {compiled} graph{'s' if compiled > 1 else ''} compiled" if compiled else ""
        graphs += f", {row['micro_batches']} micro-batches" if row.get("micro_batches", 1) > 1 else ""
        got = (f"{100 * row['mfu']:.1f}% MFU ({row['flop_per_s'] / 1e12:.0f} TFLOP/s, first step "
               f"{row['first_step_s']} s{graphs}){_compiled_note(row)}"
               if "mfu" in row else row.get("error", "no known peak for this device"))
        lines.append(f"| update {row['batch']} x {row['seq']} tokens, {how} | {got} | 40% |")
    return lines or [f"| update MFU | {missing} | 40% |"]


def _fused_rows(results: dict, missing: str) -> list[str]:
    """The fused head's log-probs and gradients against eager's, and its time where measured."""
    fused = results.get("fused") or {}
    slices = (fused.get("sliced") or {}).get("slices", 8)
    kept = "fused head, logits kept," if "recomputed" in fused else "fused head"  # files from before: recomputed
    lines = []
    for name, got in ((f"{kept} against eager, bf16", fused),
                      *([("fused head, recomputed, against eager, bf16", fused["recomputed"])]
                        if "recomputed" in fused else []),
                      (f"fused head in {slices} slices against eager, bf16",
                       fused.get("sliced") or {"error": fused.get("error", missing)}),
                      *([(f"fused head in {slices} slices, compiled, against eager, bf16", fused["sliced_compiled"])]
                        if "sliced_compiled" in fused else [])):
        lines.append(f"| {name} | " + (
            f"log-probs within {got['max_abs_logprob_diff']:.2g}; gradients' relative difference "
            f"{got['grad_rel_diff']:.2g}, cosine {got['grad_cosine']:.6f}" if "grad_cosine" in got
            else got.get("error", missing)) + " | within bf16 rounding |")
    if "timing" in fused:
        timing = fused["timing"]
        lines.append(f"| the head alone, {timing['rows']:,} rows: log-probs and backward, time over eager "
                     f"({1e3 * timing['eager_s']:.1f} ms) | " + ", ".join(
                         f"{key.removesuffix('_over_eager').replace('_', ' ')} {value:.2f}"
                         for key, value in timing.items() if key.endswith("_over_eager")) + " | |")
    return lines


def _audit_rows(results: dict, missing: str) -> list[str]:
    """The FLOP ledger against torch's counter, CUDA-graph replays included."""
    audit = results.get("audit") or {}
    graph = audit.get("graph_rollout") or {}
    return ["| FLOP ledger against torch's counter on CUDA | " + (
        ", ".join(f"{r['phase']} {100 * r['rel_diff']:+.3f}%" for r in audit["rows"])
        + (f"; graph replays charged {graph['graphed_charged']:.4g} = the same steps run eagerly "
           f"({100 * graph['eager_rel_diff']:+.3f}% against the counter"
           + (", prefill padding aside" if graph.get("padding_flops") else "")
           + f"), same tokens: {graph['same_tokens']}"
           if graph else "") if "rows" in audit else audit.get("error", missing)) + " | exact |"]


def _gpu_small_rows(results: dict, missing: str) -> list[str]:
    """`gpu-small`'s prepare and default run against their times and the learning goal."""
    small = results.get("gpu_small") or {}
    prep, run = small.get("prepare") or {}, small.get("run") or {}
    return ["| `gpu-small`: `bench prepare`, then `bench run --method opd-multi --suite math_code` | " + (
        f"prepare {prep['seconds']:.0f} s{_steps_text(small)}{_base_text(prep)}" if "seconds" in prep
        else f"prepare: {prep.get('error', missing)}")
        + ("; " + (f"run {run['wall_s']:.0f} s, {100 * run['base_accuracy']:.1f}% -> "
                   f"{100 * run['final_accuracy']:.1f}% ({run['gain_points']:+.1f} points)"
                   if "wall_s" in run else f"run: {run.get('error', missing)}"))
        + " | 180 s each, +8 points |"]


def _profile_rows(results: dict, missing: str) -> list[str]:
    """Where the time goes, by `torch.profiler`."""
    prof = results.get("profile") or {}
    return ["| where the time goes (`torch.profiler`) | " + ("; ".join(
        _profile_text(name, prof[name]) for name in ("rollout", "update_eager", "update") if name in prof)
        or missing) + " | |"]


def _steps_text(small: dict) -> str:
    """The base's warm-up steps and who chose them (files from before the curve chose: nothing)."""
    if "student_steps" not in small:
        return ""
    if small.get("chosen_step"):
        return f", {small['student_steps']:,} warm-up steps (chosen by the warm-up curve)"
    curve = f"; the warm-up curve: {small['curve_end']}" if "curve_end" in small else ""
    return f", {small['student_steps']:,} warm-up steps (the recipe's{curve})"


def _base_text(prep: dict) -> str:
    """The prepared base in a few words: greedy pass@1 and mean sample accuracy per domain, and whether
    the base-choosing rule holds (files from before the figures were recorded: nothing)."""
    if "calibration" not in prep:
        return ""
    figures = ", ".join(f"{domain} {100 * row['base_pass1']:.1f}% / {100 * row['base_sample_acc']:.1f}%"
                        for domain, row in prep["calibration"].items())
    rule = prep["base_rule"]
    held = "met" if rule["met"] else "not met: " + " and ".join(
        what for what, key in (("a domain sampled under 10% or over 90%", "spread"),
                               ("no domain's greedy >= 30% with another's <= 20%", "room")) if not rule[key])
    return f" (base, greedy / sampled: {figures}; base-choosing rule {held})"


def _kernel_name(name: str) -> str:
    """A CUDA kernel's name without its template arguments, with the functor or op they name:
    `void at::native::elementwise_kernel<128, 4, ...MulFunctor<float> > >(...)` -> `elementwise_kernel[MulFunctor]`."""
    name = name.removeprefix("void ").replace("(anonymous namespace)::", "")
    head, _, rest = name.partition("<")
    outer = head.split("(")[0].split("::")[-1]
    inner = [i for i in re.findall(r"\w*Functor\w*|\w+Ops\b|\w+_kernel(?:_cuda|_impl)?\b", rest)
             if not i.startswith("gpu_kernel_impl")]
    return f"{outer}[{inner[-1]}]" if inner else outer


def _profile_text(name: str, run: dict) -> str:
    """One profiled call in a few words: the device's busy share of the wall time and the three
    kernels that take the most device time (on the CPU of a dry run: the ops that take the most host time)."""
    if "wall_s" not in run:
        return f"{name}: {run.get('error', 'not measured')}"
    share = run["device_busy_share"]
    if share is None:
        top = ", ".join(f"`{op['op']}` {op['self_host_ms']:.1f} ms" for op in run["by_host"][:3])
        return f"{name} {run['shape']}: {run['wall_s']:.2f} s; most host time: {top}"
    if run.get("busy_from") != "kernels":  # an older results file: ops and their kernels summed together
        return f"{name} {run['shape']}: {run['wall_s']:.2f} s (its device time was counted twice, not shown)"
    top = ", ".join(f"`{_kernel_name(k['op'])}` {k['device_ms']:.1f} ms" for k in run["by_device"][:3])
    text = f"{name} {run['shape']}: device busy {100 * share:.0f}% of {run['wall_s']:.2f} s; most device time: {top}"
    attention = [op["op"] for op in run.get("attention", [])  # sdpa's ops: which kernel, or its math fallback
                 if op["op"].startswith("aten::") and re.search("scaled_dot_product|attention", op["op"])]
    return text + (f"; attention: {', '.join(f'`{op}`' for op in attention)}" if attention else "")
