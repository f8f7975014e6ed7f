"""The GPU check: every GPU figure the README reports, as ratios measured in one run of one script.

On a machine with an NVIDIA GPU, from the repository root (nothing is downloaded):

    bash benchmarks/gpu_check.sh gpu_check.json --budget-s 500   # or: python benchmarks/gpu_check.py ...
    python benchmarks/gpu_check.py --dry-run --out /tmp/dry.json    # every code path, on the CPU (CI runs it)

It builds a model of Qwen2-0.5B's shape (24 layers, hidden 896, 14/2 heads, FFN 4864, vocabulary
151,936; random weights, bf16) with this project's byte-level tokenizer, then measures, part by part:

1. `audit`: the FLOP ledger against `FlopCounterMode` on CUDA (forward, forward + backward, cached
   generation), and `GraphRollout`'s analytic charge per graph replay against the instrumented count
   of the same steps run eagerly, with the tokens and charge of the graphed run beside them.
2. `fused`: the fused head's log-probs and gradients against the eager path, in bf16, its logits kept
   for the backward and recomputed there; then the head alone timed at the update's first shape.
3. `rollout`: tokens/s of our engine (`GraphRollout`: static KV cache, CUDA-graph decode steps) and
   of Hugging Face `generate`, all sampling, at three shapes (prompts x samples x new tokens): the
   batch 64 x 8 x 256, short 64 x 8 x 16 and long 16 x 8 x 1024; against `generate` with its
   dynamic cache at all three, and with its static cache (compiled) on the batch.
   Goal: >= 1.5x static-cache `generate` on the batch, never below dynamic `generate`.
4. `update`: one training step (forward, backward, AdamW on fp32 master weights) at 16 x 1024 and
   16 x 2048 tokens, on each of four paths: eager, the compiled decoder, the fused LM head +
   log-softmax, and both (`Policy.fused_head`, `compile_body`; `gpucheck.update.UPDATE_PATHS`); model FLOP
   utilisation against the GPU's dense bf16 peak. Goal: 40%.
5. `gpu_small`: the `gpu-small` world (a 25M student of the worked tasks, built on the GPU): the
   student's warm-up curve (every 100 steps, `bench prepare`'s calibration figures per domain and
   the base-choosing rule of docs/world.md on them, up to the first checkpoint that meets it, 2,000
   steps or the budget's end), then `bench prepare` (the base) at the steps the curve chose and the
   default run (`opd-multi` on `math_code`), timed.
   Goals: prepare <= 3 min, the run <= 3 min and >= 8 points above its base.
6. `rollout_more`: static-cache `generate` at the short and long shapes, and `TorchRollout` (the
   eager engine) at all three, against ours measured again in the same process.
7. `gpu_small_more`: the gpu-small external teacher's build, timed.
8. `profile`: where the time goes, so that the next optimisation starts from a profile: one fused,
   compiled update step and one eager one (16 x 1024), then one call of ours (the batch's prompts,
   64 new tokens), each under `torch.profiler` after a call of the same shape: the device's busy
   time against the wall time, the kernels that take the most device time, the ops that take the
   most host time, and the ops and kernels of attention (which of sdpa's kernels ran).

Device time is short, so the parts run in that order (what the goals need first), or in the order
`--parts` gives, under an optional time budget (`--budget-s`): a measurement whose expected cost
(`gpucheck.common.COST_S`) no longer fits is skipped and listed, with the `--parts` that would run
what is left. Each part runs in a process of its own (a sticky CUDA error or a crash costs the other
parts nothing), stopped a minute after the budget's end; every measurement's failure is recorded
beside the others, and the JSON (`--out`) is rewritten after each one, so a part stopped from
outside keeps what it measured. Each engine's first call (graph capture, compilation, kernel
selection) is timed apart from the measured call: ours and static-cache `generate` warm up on the
measured shape (their graphs depend on it), the others on 8 new tokens of the same batch.

This file runs the parts and keeps the results; the parts themselves are in `benchmarks/gpucheck/`,
a module each (`audit`, `update` for the fused head and the update, `rollout`, `small` for
`gpu-small`, `profiling`), with what they share in `common` and the table in `table`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # the project from the checkout, and the parts

import torch  # noqa: E402

from bench.accounting.flops import device_peak_flops  # noqa: E402
from gpucheck import audit, common, profiling, rollout, small, table, update  # noqa: E402
from gpucheck.common import DRY, QWEN2_05B, Check, build_folder  # noqa: E402


def _part(check: Check, name: str, folder: Path) -> None:
    """Part `name`, in this process (a part's own process: see `main`)."""
    out = check.results[name] = {}
    start = time.perf_counter()
    failed = check.measure(name, PARTS[name], check, folder, out)  # None, or the error of what raised
    out.update(failed or {})
    out["part_s"] = round(time.perf_counter() - start, 1)
    check.save()


GRACE_S = 60  # how long past the budget's end a part's process may run before it is stopped


def _run_part(check: Check, name: str, folder: Path, dry: bool) -> Check:
    """Part `name` in a process of its own, so that a CUDA error it cannot recover from (a sticky
    one poisons the process's context) or a crash costs the other parts nothing; it is stopped at the
    budget's end (plus a minute's grace). Returns the check as the part left it."""
    if check.left() <= 0:
        check.results[name] = {"skipped": "no time left"}
        check.skipped.append(name)
        check.save()
    else:
        command = [sys.executable, __file__, "--child", name, "--folder", str(folder), "--out", str(check.out),
                   *(["--deadline", repr(check.deadline)] if check.deadline is not None else []),
                   *(["--dry-run"] if dry else [])]
        start = time.perf_counter()
        try:
            limit = None if check.deadline is None else check.left() + GRACE_S
            code = subprocess.run(command, timeout=limit).returncode
        except subprocess.TimeoutExpired:  # the child is killed: what it saved stays
            code = "stopped at the end of the budget"
        check = Check.resume(check.out, check.deadline, dry)
        out = check.results.setdefault(name, {})
        if code != 0 and "error" not in out:
            out["error"] = f"the part's process ended: {code}"
        out.setdefault("part_s", round(time.perf_counter() - start, 1))
        check.save()
    print(f"[{name}] {json.dumps(check.results[name], default=str)[:2000]}", flush=True)
    return check


OWN_MODELS = ("gpu_small", "gpu_small_more")  # the parts that build their models, not the Qwen2-shaped one
# in the order they run: what the goals need first
PARTS = {"audit": audit.audit, "fused": update.fused, "rollout": rollout.rollout, "update": update.update,
         "gpu_small": small.gpu_small, "rollout_more": rollout.rollout_more, "gpu_small_more": small.gpu_small_more,
         "profile": profiling.profile_part}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated, run in the order given: of {', '.join(PARTS)} (the default order)")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="seconds for the whole check: what no longer fits is skipped and listed")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU with a 2-layer model: does every part run?")
    parser.add_argument("--table", nargs="+", type=Path, metavar="JSON",
                        help="print the markdown table of earlier results (several: merged, later parts first)")
    parser.add_argument("--brief", action="store_true", help="with --table: the README's short table")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one part, in the process `main` started for it
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table:
        unreadable = [str(f) for f in args.table if not f.is_file()]
        if unreadable:
            parser.error(f"no results file {', '.join(unreadable)}")
        merged = table.merge(args.table, PARTS)
        print(table.brief(merged) if args.brief else table.table(merged))
        return 0
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.budget_s is not None and args.budget_s < 0:
        parser.error(f"--budget-s must be >= 0 seconds, got {args.budget_s}")
    if args.dry_run:
        common.dry_run()
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device (use --dry-run to try the script on the CPU)", file=sys.stderr)
        return 2
    if args.child:
        _part(Check.resume(Path(args.out), args.deadline, args.dry_run), args.child, args.folder)
        return 0
    import transformers

    if tuple(int(x) for x in transformers.__version__.split(".")[:2]) < (5, 19):  # pyproject.toml's floor
        print(f"gpu_check: transformers {transformers.__version__} is older than the project's 5.19: its rotary "
              "embedding has a matmul the ledger does not charge, so the audit will differ a little", flush=True)
    deadline = None if args.budget_s is None else time.time() + args.budget_s
    out = Path(args.out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    check = Check(out, deadline, args.dry_run)
    name = torch.cuda.get_device_name(0) if common.DEVICE == "cuda" else "cpu (dry run)"
    check.results.update({"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
                          "date": time.strftime("%Y-%m-%d"), "peak_bf16_flops": device_peak_flops(name),
                          "budget_s": args.budget_s})
    check.save()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "qwen2-0.5b-shape"
        if set(parts) - set(OWN_MODELS):  # not built where no part reads it
            build_folder(folder, DRY if args.dry_run else QWEN2_05B)
        os.environ["OPD_BENCH_CACHE"] = str(Path(tmp) / "cache")  # for the parts: gpu-small from scratch, shared
        for part in dict.fromkeys(parts):  # the order given
            check = _run_part(check, part, folder, args.dry_run)
    left = list(dict.fromkeys(label.split(":")[0] for label in check.skipped))  # in the order they ran
    check.results["rerun"] = f"--parts {','.join(left)}" if left else None
    check.save()
    print(f"wrote {args.out}" + (f"; {len(check.skipped)} skipped for time (listed under \"skipped\"); "
                                 f"to run them: {check.results['rerun']}" if left else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
