"""The GPU check: the hf path, the CUDA FLOP audit and throughput on a real-sized model.

On a machine with an NVIDIA GPU, from the repository root (nothing is downloaded):

    bash benchmarks/gpu_check.sh            # or: python benchmarks/gpu_check.py --out gpu_check.json

It builds a model of Qwen2-0.5B's shape (24 layers, hidden 896, 14/2 heads, FFN 4864, vocabulary
151,936; random weights, bf16) with this project's byte-level tokenizer and a chat template, then:

1. audit: `bench.accounting.audit.audit_model` on CUDA (forward, forward+backward, cached generation): the
   instrumented FlopCounterMode count (CUDA SDPA kernels counted by the pairs they attend) against
   the ledger's analytic charge; goal within 2%.
2. rollout: `TorchRollout` tokens/s on 64 prompts x 8 samples x 256 new tokens.
3. update: one policy update (forward, backward, AdamW) on [B, T] token batches, eager and with the
   decoder under `torch.compile`; achieved FLOP/s from the metered ledger's charge and the wall time,
   and model FLOP utilisation (MFU) against the GPU's dense bf16 peak (`bench.accounting.flops.DEVICE_PEAK_BF16`);
   goal 40%.
4. runs: `bench run --profile hf --device cuda` with `grpo-joint` and `opd-multi` on `math_code`
   at a small budget: wall time, FLOPs, the ledger's achieved FLOP/s and MFU per kind.

Each part is timed out and its failure recorded, so one broken part does not hide the others.
The random-weights model earns no reward: the runs check the path and the throughput, not learning.
Results go to one JSON file (`--out`) and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.accounting.flops import device_peak_flops  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# `--dry-run`: the same script on this CPU with a 2-layer model of the same family, to check it runs.
DRY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=True)
DEVICE = "cuda"
SIZES = {"audit": dict(batch=4, seq_len=512, gen_prompt=64, gen_tokens=64),
         "rollout": dict(prompts=64, n=8, new_tokens=256),
         "update": ((8, 1024), (16, 1024), (8, 2048), (16, 2048)), "update_compiled": ((16, 1024), (16, 2048))}
DRY_SIZES = {"audit": dict(batch=2, seq_len=32, gen_prompt=8, gen_tokens=8),
             "rollout": dict(prompts=4, n=2, new_tokens=8), "update": ((2, 32),),
             "update_compiled": ((2, 32),)}
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=32768,
                 rope_theta=1e6, tie_word_embeddings=True)


def build_folder(dest: Path, shape: dict, seed: int = 0) -> Path:
    """A Qwen2-0.5B-shaped model with random weights, saved in bf16 with our tokenizer."""
    from transformers import AutoModelForCausalLM, Qwen2Config

    from bench.world.models import build_tokenizer

    tokenizer = build_tokenizer()
    tokenizer.chat_template = TEMPLATE
    config = Qwen2Config(**shape, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa")
    model.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def _load(folder: Path):
    from bench.world.models import load_model

    return load_model(folder, device=DEVICE, dtype=torch.bfloat16 if DEVICE == "cuda" else torch.float32)


def audit(folder: Path) -> dict:
    from bench.accounting.audit import audit_model

    model, _ = _load(folder)
    rows = audit_model(model, **SIZES["audit"], fvcore=False)
    return {"rows": [{"phase": r.phase, "analytic": r.analytic_flops, "instrumented": r.instrumented_flops,
                      "charged": r.charged_flops, "rel_diff": r.rel_diff} for r in rows],
            "max_abs_rel_diff": max(abs(r.rel_diff) for r in rows),
            "within_2pct": all(abs(r.rel_diff) <= 0.02 for r in rows)}


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(fn, repeats: int) -> float:
    _sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync()
    return (time.perf_counter() - start) / repeats


def rollout(folder: Path) -> dict:
    from bench.accounting.ledger import Ledger
    from bench.accounting.metering import meter
    from bench.rollout.torch_engine import TorchRollout

    prompts, n, new_tokens = SIZES["rollout"]["prompts"], SIZES["rollout"]["n"], SIZES["rollout"]["new_tokens"]
    model, tokenizer = _load(folder)
    ledger = Ledger()
    meter(model, "student", ledger)
    gen = torch.Generator().manual_seed(0)
    ids = [torch.randint(3, 259, (int(torch.randint(32, 64, (1,), generator=gen)),), generator=gen).tolist()
           for _ in range(prompts)]
    backend = TorchRollout()

    def once():
        return backend.generate(model, ids, n=n, max_new_tokens=new_tokens, temperature=1.0,
                                eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id,
                                generator=torch.Generator().manual_seed(1))

    once()  # warm-up: kernels, allocator
    before = ledger.counted_flops
    seconds = _timed(once, 2)
    batch = once()
    tokens = sum(batch.lengths)
    flops = (ledger.counted_flops - before) / 3
    return {"sequences": prompts * n, "new_tokens": new_tokens, "generated_tokens": tokens,
            "seconds": seconds, "tokens_per_s": tokens / seconds, "flop_per_s": flops / seconds}


def update(folder: Path) -> dict:
    """One training step (forward, backward, AdamW) per shape; FLOPs from the metered ledger.

    Each shape runs eager (as `bench run` does today), then with the decoder stack under
    `torch.compile` (norms, rotary and SwiGLU fused; the metering hooks sit on the outer model, so
    the charge is unchanged): does compiling buy the MFU the goal asks for?
    """
    from bench.accounting.ledger import Ledger
    from bench.losses import sft_loss
    from bench.policy import Policy

    model, tokenizer = _load(folder)
    ledger = Ledger()
    policy = Policy("student", model, tokenizer, ledger=ledger)
    peak = device_peak_flops(torch.cuda.get_device_name(0)) if DEVICE == "cuda" else None
    out = []
    for compiled, shapes in ((False, SIZES["update"]), (True, SIZES["update_compiled"])):
        if compiled:
            model.base_model.compile(dynamic=False)
        for batch, seq in shapes:
            ids = torch.randint(3, 259, (batch, seq))
            mask = torch.ones_like(ids)

            def step():
                loss = sft_loss(policy.logprobs(ids, mask), mask.to(policy.device))
                policy.step(loss, 1e-6)

            first = _timed(step, 1)  # warm-up: kernels, allocator, compilation
            before = ledger.counted_flops
            seconds = _timed(step, 3)
            flops = (ledger.counted_flops - before) / 3
            row = {"batch": batch, "seq": seq, "compiled": compiled, "first_step_s": first, "seconds": seconds,
                   "flops": flops, "flop_per_s": flops / seconds}
            if peak:
                row["mfu"] = row["flop_per_s"] / peak
            out.append(row)
            print(f"  update {row}", flush=True)
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return {"peak_bf16_flops": peak, "shapes": out, "best_mfu": max((r.get("mfu", 0) for r in out), default=None)}


def run(folder: Path, runs: Path, method: str, budget: str, timeout: int) -> dict:
    cmd = [sys.executable, "-m", "bench.cli", "run", "--profile", "hf", "--model", str(folder), "--device", DEVICE,
           "--method", method, "--suite", "math_code", "--budget", budget, "--eval-size", "64",
           "--max-new-tokens", "128", "--eval-every", "0.5", "--runs", str(runs), "--no-progress"]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:  # say how far it got: its evaluations so far, its output
        curves = [c.read_text()[-2000:] for c in runs.glob(f"{method}__*/curve.jsonl")]
        return {"rc": "timeout", "wall_s": time.perf_counter() - start, "curve_so_far": curves,
                "stderr": (exc.stderr or b"")[-2000:].decode(errors="replace") if isinstance(exc.stderr, bytes)
                else str(exc.stderr or "")[-2000:]}
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"rc": proc.returncode, "wall_s": wall, "stderr": proc.stderr[-3000:], "stdout": proc.stdout[-2000:]}
    summary = json.loads(max(runs.glob(f"{method}__*/summary.json"), key=os.path.getmtime).read_text())
    return {"rc": 0, "wall_s": wall, "run_wall_s": summary["wall_s"], "counted_flops": summary["flops"]["counted"],
            "base_accuracy": summary["base_accuracy"], "final_accuracy": summary["final_accuracy"],
            "final_mean_length": summary["final_mean_length"], "throughput": summary.get("throughput"),
            "phases": sorted({r["phase"] for r in summary["ledger"]})}


def _part(results: dict, name: str, fn, *args) -> None:
    start = time.perf_counter()
    try:
        results[name] = fn(*args)
    except Exception as exc:  # record and go on: the other parts still tell us something
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    results[name]["part_s"] = round(time.perf_counter() - start, 1)
    print(f"[{name}] {json.dumps(results[name], default=str)[:1500]}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--budget", default="5e14", help="counted FLOPs of each hf run")
    parser.add_argument("--run-timeout", type=int, default=160)
    parser.add_argument("--parts", default="audit,rollout,update,runs")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU with a 2-layer model: does it run?")
    args = parser.parse_args()
    global DEVICE, SIZES
    if args.dry_run:
        DEVICE, SIZES = "cpu", DRY_SIZES
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device (use --dry-run to try the script on the CPU)", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu (dry run)"
    results: dict = {"device": name, "torch": torch.__version__, "peak_bf16_flops": device_peak_flops(name)}
    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "qwen2-0.5b-shape", DRY if args.dry_run else QWEN2_05B)
        if "audit" in parts:
            _part(results, "audit", audit, folder)
        if "rollout" in parts:
            _part(results, "rollout", rollout, folder)
        if "update" in parts:
            _part(results, "update", update, folder)
        if "runs" in parts:
            for method in ("grpo-joint", "opd-multi"):
                _part(results, f"run_{method}", run, folder, Path(tmp) / "runs", method, args.budget, args.run_timeout)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
