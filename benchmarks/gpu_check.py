"""The GPU check: every GPU figure the README reports, as ratios measured in one run of one script.

On a machine with an NVIDIA GPU, from the repository root (nothing is downloaded):

    bash benchmarks/gpu_check.sh            # or: python benchmarks/gpu_check.py --out gpu_check.json
    python benchmarks/gpu_check.py --dry-run --out /tmp/dry.json    # every code path, on the CPU (CI runs it)

It builds a model of Qwen2-0.5B's shape (24 layers, hidden 896, 14/2 heads, FFN 4864, vocabulary
151,936; random weights, bf16) with this project's byte-level tokenizer, then, each part timed out and
its failure recorded so that one broken part does not hide the others:

1. `rollout`: tokens/s of our engine (`GraphRollout`: static KV cache, CUDA-graph decode steps), of
   `TorchRollout` (the eager engine), of Hugging Face `generate` with its dynamic cache and with its
   static cache (compiled), all sampling, at three shapes (prompts x samples x new tokens): short
   64 x 8 x 16, the batch 64 x 8 x 256 and long 16 x 8 x 1024; ratios against both `generate`s.
   Goal: >= 1.5x static-cache `generate` on the batch, never below dynamic `generate`.
2. `update`: one training step (forward, backward, AdamW) at 16 x 1024 and 16 x 2048 tokens, eager
   and with the fused LM head + log-softmax and the compiled decoder (`Policy.fused_head`,
   `compile_body`); model FLOP utilisation against the GPU's dense bf16 peak. Goal: 40%.
3. `fused`: the fused head's log-probs and gradients against the eager path, in bf16.
4. `audit`: the FLOP ledger against `FlopCounterMode` on CUDA (forward, forward + backward, cached
   generation), and `GraphRollout`'s analytic charge per graph replay against the instrumented count
   of the same steps run eagerly, with the tokens and charge of the graphed run beside them.
5. `gpu_small`: the `gpu-small` world (a 25M student of the worked tasks, built on the GPU): its
   warm-up curve (greedy accuracy per domain every 100 steps, for the base-choosing rule of
   docs/world.md), `bench prepare` and the default run (`opd-multi` on `math_code`), timed.
   Goals: prepare <= 3 min, the run <= 3 min and >= 8 points above its base.

Results go to one JSON file (`--out`) and a line per part on stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
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
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=32768,
                 rope_theta=1e6, tie_word_embeddings=True)
# `--dry-run`: the same script on this CPU with a 2-layer model of the same family, to check it runs.
DRY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=True)
SIZES = {"audit": dict(batch=4, seq_len=512, gen_prompt=64, gen_tokens=64),
         "rollout": ((64, 8, 16), (64, 8, 256), (16, 8, 1024)), "update": ((16, 1024), (16, 2048)),
         "gpu_small": dict(curve_steps=1000, curve_every=100, curve_eval=200)}
DRY_SIZES = {"audit": dict(batch=2, seq_len=32, gen_prompt=8, gen_tokens=8),
             "rollout": ((4, 2, 4), (4, 2, 8)), "update": ((2, 32),),
             "gpu_small": dict(curve_steps=4, curve_every=2, curve_eval=4)}
DEVICE = "cuda"


def build_folder(dest: Path, shape: dict, seed: int = 0) -> Path:
    """A Qwen2-shaped model with random weights, saved in bf16 with our tokenizer."""
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


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(fn, repeats: int = 1) -> float:
    _sync()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    _sync()
    return (time.perf_counter() - start) / repeats


def _prompts(count: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3, min(vocab, 259), (int(torch.randint(32, 64, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(count)]


# -- 1. rollout ---------------------------------------------------------------------------------
def _ours(model, prompts, n, new, engine):
    """Our engines never stop early here (EOS -1): every row generates `new` tokens, as in `generate`."""
    batch = engine.generate(model, prompts, n=n, max_new_tokens=new, temperature=1.0, eos_id=-1, pad_id=0,
                            generator=torch.Generator().manual_seed(1))
    return sum(batch.lengths)


def _hf(model, prompts, n, new, static: bool):
    """`generate`, sampling, left-padded prompts, exactly `new` tokens per row."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    extra = {"cache_implementation": "static"} if static else {}
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                         max_new_tokens=new, min_new_tokens=new, num_return_sequences=n, pad_token_id=0, **extra)
    return (out.shape[1] - width) * out.shape[0]


def rollout(folder: Path, dry: bool) -> dict:
    from bench.rollout.graphs import GraphRollout
    from bench.rollout.torch_engine import TorchRollout

    model, _ = _load(folder)
    engines = {
        "ours": lambda p, n, g: _ours(model, p, n, g, ours),
        "torch_eager": lambda p, n, g: _ours(model, p, n, g, TorchRollout()),
        "hf_dynamic": lambda p, n, g: _hf(model, p, n, g, static=False),
        "hf_static": lambda p, n, g: _hf(model, p, n, g, static=True),
    }
    ours = GraphRollout(static=True, graphs=not dry)
    shapes = []
    for prompts, n, new in SIZES["rollout"]:
        ids, row = _prompts(prompts, model.config.vocab_size), {"shape": f"{prompts}x{n}x{new}"}
        with torch.inference_mode():
            for name, fn in engines.items():
                first = _timed(lambda: fn(ids, n, new))  # warm-up: kernels, graphs, compilation
                tokens = fn(ids, n, new)
                seconds = _timed(lambda: fn(ids, n, new))
                row[name] = {"tokens": tokens, "first_call_s": round(first, 2), "tokens_per_s": tokens / seconds}
        for base in ("hf_dynamic", "hf_static", "torch_eager"):
            row[f"ours_vs_{base}"] = row["ours"]["tokens_per_s"] / row[base]["tokens_per_s"]
        shapes.append(row)
        print(f"  rollout {json.dumps(row)}", flush=True)
    return {"shapes": shapes, "goal_1p5x_hf_static_on_the_batch": shapes[1]["ours_vs_hf_static"] >= 1.5,
            "never_below_hf_dynamic": all(r["ours_vs_hf_dynamic"] >= 1.0 for r in shapes)}


# -- 2. update ----------------------------------------------------------------------------------
def update(folder: Path, dry: bool) -> dict:
    """One training step per shape, eager, then fused head + compiled decoder; FLOPs from the ledger."""
    from bench.accounting.ledger import Ledger
    from bench.losses import sft_loss
    from bench.policy import Policy

    peak = device_peak_flops(torch.cuda.get_device_name(0)) if DEVICE == "cuda" else None
    out, model_flops = [], {}
    for fused in (False, True):
        model, tokenizer = _load(folder)
        ledger = Ledger()
        policy = Policy("student", model, tokenizer, ledger=ledger)
        policy.fused_head = policy.compile_body = fused
        if dry:
            policy.compile_backend = "eager"
        for batch, seq in SIZES["update"]:
            ids = torch.randint(3, 259, (batch, seq))
            mask = torch.ones_like(ids)
            completion = mask.clone()
            completion[:, : seq // 4] = 0  # a prompt quarter: logits on the completion only, as in RL

            def step():
                lp = policy.logprobs(ids, mask, keep=seq - seq // 4)
                policy.step(sft_loss(lp, completion.to(policy.device)), 1e-6)

            first = _timed(step)  # kernels, allocator, compilation
            before = ledger.counted_flops
            seconds = _timed(step, 3)
            charged = (ledger.counted_flops - before) / 3
            # MFU counts the model's FLOPs, the eager step's charge: not the fused head's recomputation
            flops = model_flops.setdefault((batch, seq), charged)
            row = {"batch": batch, "seq": seq, "fused_and_compiled": fused, "first_step_s": round(first, 1),
                   "seconds": seconds, "model_flops": flops, "charged_flops": charged, "flop_per_s": flops / seconds,
                   "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else None}
            if peak:
                row["mfu"] = row["flop_per_s"] / peak
            out.append(row)
            print(f"  update {json.dumps(row)}", flush=True)
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
        del policy, model
    best = max((r.get("mfu", 0.0) for r in out), default=0.0)
    return {"peak_bf16_flops": peak, "shapes": out, "best_mfu": best, "goal_40pct": best >= 0.4}


# -- 3. fused head ------------------------------------------------------------------------------
def fused(folder: Path, dry: bool) -> dict:
    """Fused and eager log-probs and gradients of the same batch (bf16 on CUDA: within its rounding)."""
    from bench.accounting.ledger import Ledger
    from bench.losses import sft_loss
    from bench.policy import Policy

    ids = torch.randint(3, 259, (4, 256 if not dry else 16))
    mask = torch.ones_like(ids)
    got = []
    for on in (False, True):
        model, tokenizer = _load(folder)
        policy = Policy("student", model, tokenizer, ledger=Ledger())
        policy.fused_head, policy.compile_body = on, False
        lp = policy.logprobs(ids, mask, keep=ids.shape[1] // 2)
        sft_loss(lp, mask.to(policy.device)).backward()
        grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        got.append((lp.detach().float(), grad))
        del policy, model
    (lp0, g0), (lp1, g1) = got
    return {"max_abs_logprob_diff": float((lp0 - lp1).abs().max()),
            "grad_rel_diff": float((g0 - g1).norm() / g0.norm()),
            "grad_cosine": float(torch.nn.functional.cosine_similarity(g0, g1, dim=0))}


# -- 4. audit -----------------------------------------------------------------------------------
def audit(folder: Path, dry: bool) -> dict:
    from bench.accounting.audit import audit_model, audited
    from bench.accounting.ledger import Ledger
    from bench.accounting.metering import meter, unmeter
    from bench.rollout.graphs import GraphRollout

    model, _ = _load(folder)
    rows = audit_model(model, **SIZES["audit"], fvcore=False)
    out = {"rows": [{"phase": r.phase, "analytic": r.analytic_flops, "instrumented": r.instrumented_flops,
                     "charged": r.charged_flops, "rel_diff": r.rel_diff} for r in rows],
           "within_2pct": all(abs(r.rel_diff) <= 0.02 for r in rows)}
    # GraphRollout: its static steps run eagerly under the counter, then the same generation graphed
    # (replays are invisible to the counter, which is why they are charged analytically)
    prompts, runs = _prompts(8, model.config.vocab_size), {}
    for graphs in (False, True):
        ledger = Ledger()
        meter(model, "student", ledger)
        engine = GraphRollout(static=True, graphs=graphs and not dry)
        with torch.inference_mode(), (audited(ledger, "student") if not graphs else contextlib.nullcontext()) as result:
            batch = engine.generate(model, prompts, n=4, max_new_tokens=32, eos_id=-1, pad_id=0,
                                    generator=torch.Generator().manual_seed(4))
        unmeter(model)
        runs[graphs] = (batch.completion_ids, result, ledger.counted_flops)
    eager = runs[False][1]
    out["graph_rollout"] = {
        "eager_steps_instrumented": eager.instrumented_flops, "eager_steps_charged": eager.charged_flops,
        "eager_rel_diff": eager.rel_diff, "graphed_charged": runs[True][2],
        "same_charge": runs[True][2] == runs[False][2], "same_tokens": runs[False][0] == runs[True][0]}
    return out


# -- 5. gpu-small -------------------------------------------------------------------------------
def gpu_small(_folder: Path, dry: bool) -> dict:
    """The gpu-small world: its warm-up curve, `bench prepare` and the default run, in this process."""
    from bench.accounting.ledger import Ledger
    from bench.evaluation import Evaluator
    from bench.registry import get_suite
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.prepare import WARMUP_SUITE, prepare, warm_up
    from bench.world.profiles import PROFILES

    profile, sizes = PROFILES["gpu-small"], SIZES["gpu_small"]
    if dry:  # the tiny world's small student on the CPU, a few steps
        profile = dataclasses.replace(profile, name="gpu-small-dry", device="cpu", student="tiny-llama",
                                      teacher="tiny-llama", budget_flops=2e10, eval_size=4, max_new_tokens=16,
                                      eval_max_new_tokens=16,
                                      warmup=dataclasses.replace(profile.warmup, student_steps=4, teacher_steps=4))
        PROFILES[profile.name] = profile
    curve, started = [], time.perf_counter()
    suite = get_suite(WARMUP_SUITE, profile.warmup.difficulty, profile.task_format)
    evaluator = Evaluator(suite, sizes["curve_eval"], profile.eval_max_new_tokens)

    def on_step(step: int, policy, loss: float) -> None:
        if step % sizes["curve_every"] == 0:
            result = evaluator.evaluate(policy)
            curve.append({"step": step, "loss": round(loss, 4), "greedy": result["domain_accuracy"],
                          "wall_s": round(time.perf_counter() - started, 1)})
            print(f"  gpu-small warm-up {json.dumps(curve[-1])}", flush=True)

    curved = dataclasses.replace(profile, warmup=dataclasses.replace(profile.warmup, student_steps=sizes["curve_steps"]))
    warm_up(curved, "base", Ledger(), progress=False, on_step=on_step)
    out = {"profile": profile.name, "curve": curve, "curve_s": round(time.perf_counter() - started, 1)}
    cached = os.environ.get("OPD_BENCH_CACHE")
    with tempfile.TemporaryDirectory() as cache:
        os.environ["OPD_BENCH_CACHE"] = cache  # from scratch: nothing cached
        out["prepare_s"] = _timed(lambda: prepare(profile, progress=False))
        config = RunConfig(method="opd-multi", suite="math_code", profile=profile.name, runs_dir=Path(cache) / "runs")
        started = time.perf_counter()
        record = Runner(config, progress=False).run()
        out["run"] = {"wall_s": round(time.perf_counter() - started, 1), "base_accuracy": record["base_accuracy"],
                      "final_accuracy": record["final_accuracy"], "counted_flops": record["flops"]["counted"],
                      "gain_points": 100 * (record["final_accuracy"] - record["base_accuracy"]),
                      "throughput": record.get("throughput")}
    if cached is None:
        os.environ.pop("OPD_BENCH_CACHE")
    else:
        os.environ["OPD_BENCH_CACHE"] = cached
    out["goals"] = {"prepare_3min": out["prepare_s"] <= 180, "run_3min": out["run"]["wall_s"] <= 180,
                    "gain_8_points": out["run"]["gain_points"] >= 8}
    return out


def _part(results: dict, name: str, fn, *args) -> None:
    start = time.perf_counter()
    try:
        results[name] = fn(*args)
    except Exception as exc:  # record and go on: the other parts still tell us something
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    results[name]["part_s"] = round(time.perf_counter() - start, 1)
    print(f"[{name}] {json.dumps(results[name], default=str)[:2000]}", flush=True)
    if DEVICE == "cuda":
        torch.cuda.empty_cache()


PARTS = {"rollout": rollout, "update": update, "fused": fused, "audit": audit, "gpu_small": gpu_small}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU with a 2-layer model: does every part run?")
    args = parser.parse_args()
    global DEVICE, SIZES
    unknown = set(args.parts.split(",")) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.dry_run:
        DEVICE, SIZES = "cpu", DRY_SIZES
    elif not torch.cuda.is_available():
        print("gpu_check: no CUDA device (use --dry-run to try the script on the CPU)", file=sys.stderr)
        return 2
    import transformers

    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu (dry run)"
    results: dict = {"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
                     "date": time.strftime("%Y-%m-%d"), "peak_bf16_flops": device_peak_flops(name)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "qwen2-0.5b-shape", DRY if args.dry_run else QWEN2_05B)
        for part in args.parts.split(","):
            _part(results, part, PARTS[part], folder, args.dry_run)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
