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
   log-softmax, and both (`Policy.fused_head`, `compile_body`; `UPDATE_PATHS`); model FLOP
   utilisation against the GPU's dense bf16 peak. Goal: 40%.
5. `gpu_small`: the `gpu-small` world (a 25M student of the worked tasks, built on the GPU): `bench
   prepare` (the base) and the default run (`opd-multi` on `math_code`), timed.
   Goals: prepare <= 3 min, the run <= 3 min and >= 8 points above its base.
6. `rollout_more`: static-cache `generate` at the short and long shapes, and `TorchRollout` (the
   eager engine) at all three, against ours measured again in the same process.
7. `gpu_small_more`: the student's warm-up curve (every 100 steps, `bench prepare`'s calibration
   figures per domain and the base-choosing rule of docs/world.md on them, up to the first checkpoint
   that meets it, 2,000 steps or the budget's end), then the gpu-small external teacher's build, timed.
8. `profile`: where the time goes, so that the next optimisation starts from a profile: one call of
   ours (the batch's prompts, 64 new tokens), one eager update step and one fused, compiled update
   step (16 x 1024), each under `torch.profiler` after a call of the same shape: the device's busy
   time against the wall time, the kernels that take the most device time, the ops that take the
   most host time, and the ops and kernels of attention (which of sdpa's kernels ran).

Device time is short, so the parts run in that order (what the goals need first), or in the order
`--parts` gives, under an optional time budget (`--budget-s`): a measurement whose expected cost
(`COST_S`) no longer fits is skipped and listed, with the `--parts` that would run what is left.
Each part runs in a process of its own (a sticky CUDA error or a crash costs the other parts
nothing), stopped a minute after the budget's end; every measurement's failure is recorded beside
the others, and the JSON (`--out`) is rewritten after each one, so a part stopped from outside
keeps what it measured. Each engine's first call (graph capture, compilation, kernel selection) is
timed apart from the measured call: ours and static-cache `generate` warm up on the measured shape
(their graphs depend on it), the others on 8 new tokens of the same batch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from bench.accounting.flops import FlopSpec, device_peak_flops  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN2_05B = dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864, max_position_embeddings=32768,
                 rope_theta=1e6, tie_word_embeddings=True)
# `--dry-run`: the same script on this CPU with a 2-layer model of the same family, in bf16 as on the
# GPU, to check it runs.
DRY = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=True)
SIZES = {"audit": dict(batch=4, seq_len=512, gen_prompt=64, gen_tokens=64),
         "rollout": ((64, 8, 256), (64, 8, 16), (16, 8, 1024)), "update": ((16, 1024), (16, 2048)),
         "curve": dict(steps=2000, every=100), "profile": dict(new=64, update=(16, 1024))}
DRY_SIZES = {"audit": dict(batch=2, seq_len=32, gen_prompt=8, gen_tokens=8),
             "rollout": ((4, 2, 8), (4, 2, 4)), "update": ((2, 32), (2, 64)),
             "curve": dict(steps=4, every=2), "profile": dict(new=8, update=(2, 32))}
# a fixed budget for the dry run's fused head: it keeps the logits of its first update shape (2 x 25
# positions x 512) and recomputes its second's (2 x 49 x 512), so that the dry run takes both paths
# (on CUDA `Policy` keeps what free memory holds)
DRY_KEEP_LOGITS = 2**15
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

    return load_model(folder, device=DEVICE, dtype=torch.bfloat16)  # the dry run too: the dtype the GPU runs


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


def _graphs_compiled() -> int:
    """Graphs dynamo has compiled in this process so far."""
    import torch._dynamo.utils

    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _prompts(count: int, vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(3, min(vocab, 259), (int(torch.randint(32, 64, (1,), generator=gen)),),
                          generator=gen).tolist() for _ in range(count)]


# -- the budget -----------------------------------------------------------------------------------
# What each measurement is expected to cost on an H200 at full size, in seconds, warm-up included: the
# compiled update from the last GPU check (its first step compiled for 51-100 s, the decoder compiled
# whole then; layer by layer, with symbolic sizes, not yet measured here), the rollouts from its
# tokens/s (about 131k tokens a call at 11-33k tokens/s) with a minute for compiling static-cache
# `generate`, gpu-small's prepare as measured (42 s) and the rest of gpu-small from its goals (3
# minutes each), the profile's as the measurements it repeats, and the head alone a guess (two compiled
# functions and 20 calls of about 0.1 s at most). A measurement that no longer fits
# in what is left of `--budget-s` is skipped.
COST_S = {"ours": 30, "ours_again": 10, "hf_dynamic": 45, "hf_static": 120, "torch_eager": 45, "update_eager": 20,
          "update_compiled": 100, "update_fused": 25, "update_fused_and_compiled": 100, "prepare": 60, "run": 180,
          "teacher": 150, "curve": 200, "fused_timing": 40,
          "profile_rollout": 30, "profile_update_eager": 20, "profile_update": 100}


class Check:
    """The results so far, the file they are written to after every measurement, and the budget."""

    def __init__(self, out: Path, deadline: float | None, dry: bool) -> None:
        """`deadline`: a `time.time()`, shared by the parts' processes, or None for no budget."""
        self.out, self.deadline, self.dry, self.results, self.skipped = out, deadline, dry, {}, []
        self.costs: dict[str, float] = {}  # measured in this process, in place of COST_S's guesses

    @classmethod
    def resume(cls, out: Path, deadline: float | None, dry: bool) -> Check:
        """The check as the earlier parts left it in `out`."""
        check = cls(out, deadline, dry)
        check.results = json.loads(out.read_text())
        check.skipped = check.results.get("skipped", [])
        return check

    def left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - time.time()

    def fits(self, what: str, label: str) -> bool:
        """Whether `what` (a COST_S key) fits in the time left; if not, `label` is listed as skipped."""
        cost = 0 if self.dry else self.costs.get(what, COST_S[what])
        if self.left() > 0 and self.left() >= cost:
            return True
        self.skipped.append(label)
        print(f"  skipped {label}: {self.left():.0f} s left, it needs about {cost} s", flush=True)
        return False

    def measure(self, label: str, fn, *args):
        """fn(*args), or {"error": ...} where it raises: one broken measurement hides no other."""
        try:
            return fn(*args)
        except Exception as exc:
            print(f"  {label} failed: {type(exc).__name__}: {exc}", flush=True)
            return {"error": f"{type(exc).__name__}: {_first_line(str(exc))}",
                    "traceback": traceback.format_exc()[-3000:]}
        finally:
            self.save()

    def save(self) -> None:
        self.results["skipped"] = self.skipped
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(json.dumps(self.results, indent=2, default=str))
        tmp.replace(self.out)


# -- 1. audit -----------------------------------------------------------------------------------
def audit(check: Check, folder: Path, out: dict) -> None:
    from bench.accounting.audit import audit_model, audited
    from bench.accounting.ledger import Ledger
    from bench.accounting.metering import meter, unmeter
    from bench.rollout.graphs import GraphRollout

    model, _ = _load(folder)
    rows = audit_model(model, **SIZES["audit"], fvcore=False)
    out["rows"] = [{"phase": r.phase, "analytic": r.analytic_flops, "instrumented": r.instrumented_flops,
                    "charged": r.charged_flops, "rel_diff": r.rel_diff} for r in rows]
    out["within_2pct"] = all(abs(r.rel_diff) <= 0.02 for r in rows)
    check.save()
    # GraphRollout: its static steps run eagerly under the counter, then the same generation graphed
    # (replays are invisible to the counter, which is why they are charged analytically). Its padded
    # prefills' masked query-key pairs are charged, not counted (4 L H d_h FLOPs each): set apart.
    prompts, runs, spec = _prompts(8, model.config.vocab_size), {}, FlopSpec.from_config(model.config)
    for graphs in (False, True):
        ledger = Ledger()
        meter(model, "student", ledger)
        engine = GraphRollout(static=True, graphs=graphs and not check.dry)
        with torch.inference_mode(), (audited(ledger, "student") if not graphs else contextlib.nullcontext()) as result:
            batch = engine.generate(model, prompts, n=4, max_new_tokens=32, eos_id=-1, pad_id=0,
                                    generator=torch.Generator().manual_seed(4))
        unmeter(model)
        runs[graphs] = (batch.completion_ids, result, ledger.counted_flops)
        padding = spec.pair_flops * engine.last_stats["pad_keys"]
    eager = runs[False][1]
    out["graph_rollout"] = {
        "eager_steps_instrumented": eager.instrumented_flops, "eager_steps_charged": eager.charged_flops,
        "padding_flops": padding, "eager_rel_diff": (eager.charged_flops - padding) / eager.instrumented_flops - 1,
        "graphed_charged": runs[True][2],
        "same_charge": runs[True][2] == runs[False][2], "same_tokens": runs[False][0] == runs[True][0]}


# -- 2. fused head ------------------------------------------------------------------------------
def fused(check: Check, folder: Path, out: dict) -> None:
    """Fused and eager log-probs and gradients of the same batch (bf16 on CUDA: within its rounding):
    the fused head with its logits kept for the backward (`Policy`'s default here), recomputed there
    in one slice, in 8 slices of the vocabulary (as the update's larger shapes are cut), and in 8
    slices compiled (its work after each matmul under inductor, as beside a compiled decoder; the dry
    run traces it only). Then the head alone timed, eager against fused, its logits kept and
    recomputed, each uncompiled and compiled (`benchmarks/bench_fused_head.py`), at the update's
    first shape: 16 x 1024 tokens, the completion's positions."""
    from bench.losses import sft_loss, vocab_slices

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_fused_head

    ids = torch.randint(3, 259, (4, 256 if not check.dry else 16))
    mask, keep = torch.ones_like(ids), ids.shape[1] // 2
    got, rows = [], ids.shape[0] * (keep + 1)  # the positions that get logits
    runs = ((False, None, False), (True, None, False), (True, 1, False), (True, 8, False), (True, 8, True))
    for on, slices, compiled in runs:  # slices: None keeps the logits, else recomputes them in that many
        policy, _ = _update_policy(folder, on, False, check.dry)
        policy.compile_head, model = compiled, policy._model
        vocab = model.config.vocab_size
        budget = rows * vocab // 8  # the backward in 8 slices of the vocabulary
        if slices is not None:
            policy.keep_logits = 0
        if slices == 8:
            policy.max_logits = budget
        lp = policy.logprobs(ids, mask, keep=keep)
        sft_loss(lp, mask.to(policy.device)).backward()
        grad = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        got.append((lp.detach().float(), grad))
        del policy, model
    (lp0, g0), *fused_runs = got

    def against_eager(lp: torch.Tensor, g: torch.Tensor) -> dict:
        return {"max_abs_logprob_diff": float((lp0 - lp).abs().max()),
                "grad_rel_diff": float((g0 - g).norm() / g0.norm()),
                "grad_cosine": float(torch.nn.functional.cosine_similarity(g0, g, dim=0))}

    out.update(against_eager(*fused_runs[0]))
    out["recomputed"] = against_eager(*fused_runs[1])
    slices = len(vocab_slices(rows, vocab, budget))
    out["sliced"] = {"slices": slices, **against_eager(*fused_runs[2])}
    out["sliced_compiled"] = {"slices": slices, **against_eager(*fused_runs[3])}
    check.save()
    if check.fits("fused_timing", "fused: the head alone, timed"):
        batch, seq = SIZES["update"][0]
        shape = QWEN2_05B if not check.dry else DRY
        out["timing"] = check.measure("fused: the head alone, timed", bench_fused_head.measure,
                                      _logit_rows(batch, seq), shape["vocab_size"], shape["hidden_size"],
                                      torch.bfloat16, 3, DEVICE, "eager" if check.dry else "inductor")


# -- 3. rollout ---------------------------------------------------------------------------------
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


# engines whose first call depends on the shape (graph capture, compilation) warm up on the measured
# shape; the others on WARM_NEW new tokens of the same batch
SHAPED_WARMUP, WARM_NEW = ("ours", "ours_again", "hf_static"), 8


def _engines(model, dry: bool) -> dict:
    from bench.rollout.graphs import GraphRollout
    from bench.rollout.torch_engine import TorchRollout

    ours, eager = GraphRollout(static=True, graphs=not dry), TorchRollout()
    return {"ours": lambda p, n, g: _ours(model, p, n, g, ours),
            "ours_again": lambda p, n, g: _ours(model, p, n, g, ours),  # the same engine, its graphs kept
            "hf_dynamic": lambda p, n, g: _hf(model, p, n, g, static=False),
            "hf_static": lambda p, n, g: _hf(model, p, n, g, static=True),
            "torch_eager": lambda p, n, g: _ours(model, p, n, g, eager)}


def _tokens_per_s(fn, name: str, prompts: list, n: int, new: int) -> dict:
    first = _timed(lambda: fn(prompts, n, new if name in SHAPED_WARMUP else min(new, WARM_NEW)))
    _sync()
    compiled, start = _graphs_compiled(), time.perf_counter()
    tokens = fn(prompts, n, new)
    _sync()
    return {"tokens": tokens, "first_call_s": round(first, 2), "tokens_per_s": tokens / (time.perf_counter() - start),
            "compiled_while_timed": _graphs_compiled() - compiled}


def _rollout_shapes(check: Check, folder: Path, out: dict, engines_at, part: str) -> None:
    """Tokens/s of the engines `engines_at(i)` names at shape i, into out["shapes"] (a row per shape).

    One engine at every shape, then the next: our engine's calls at the three shapes follow each other
    with no other engine (no compiled `generate`) between them."""
    model, _ = _load(folder)
    engines = _engines(model, check.dry)
    rows = out.setdefault("shapes", [])
    for i, (prompts, n, new) in enumerate(SIZES["rollout"]):
        if not any(r["shape"] == f"{prompts}x{n}x{new}" for r in rows):
            rows.append({"shape": f"{prompts}x{n}x{new}"})
    names = list(dict.fromkeys(name for i in range(len(SIZES["rollout"])) for name in engines_at(i)))
    for name in names:
        for i, (prompts, n, new) in enumerate(SIZES["rollout"]):
            shape = f"{prompts}x{n}x{new}"
            if name not in engines_at(i) or not check.fits(name, f"{part}: {name} at {shape}"):
                continue
            row = next(r for r in rows if r["shape"] == shape)
            ids = _prompts(prompts, model.config.vocab_size)
            with torch.inference_mode():
                row[name] = check.measure(f"{name} at {shape}", _tokens_per_s, engines[name], name, ids, n, new)
            print(f"  rollout {json.dumps(row, default=str)[:1500]}", flush=True)
    del engines, model


def _ratio(row: dict, a: str, b: str) -> float | None:
    x, y = row.get(a) or {}, row.get(b) or {}
    return x["tokens_per_s"] / y["tokens_per_s"] if "tokens_per_s" in x and "tokens_per_s" in y else None


def rollout(check: Check, folder: Path, out: dict) -> None:
    """What the goals need: ours and both `generate`s on the batch, ours and dynamic `generate` at the
    other two shapes; then ours again at the short shape (`ours_again`), the same engine replaying the
    graphs it captured before compiled `generate` ran in the process (CUDA-graph trees clear cuBLAS's
    workspaces, which graphs bake in: see `GraphRollout._capture`)."""
    _rollout_shapes(check, folder, out, lambda i: ("ours", "hf_dynamic", "hf_static") if i == 0 else
                    ("ours", "hf_dynamic", "ours_again") if i == 1 else ("ours", "hf_dynamic"), "rollout")
    for row in out["shapes"]:
        row["ours_vs_hf_dynamic"], row["ours_vs_hf_static"] = (_ratio(row, "ours", "hf_dynamic"),
                                                               _ratio(row, "ours", "hf_static"))
    vs_dynamic = [r["ours_vs_hf_dynamic"] for r in out["shapes"]]
    # a goal is None where a figure it needs is missing (skipped or failed): not measured is not met
    vs_static = out["shapes"][0]["ours_vs_hf_static"]
    out["goal_1p5x_hf_static_on_the_batch"] = None if vs_static is None else vs_static >= 1.5
    out["never_below_hf_dynamic"] = None if None in vs_dynamic else all(r >= 1.0 for r in vs_dynamic)


def rollout_more(check: Check, folder: Path, out: dict) -> None:
    """The rest of the table: static-cache `generate` at the other two shapes, and `TorchRollout` (the
    eager engine) at all three, each against ours measured again beside it (ratios within a process)."""
    _rollout_shapes(check, folder, out, lambda i: ("ours", "torch_eager") if i == 0 else
                    ("ours", "hf_static", "torch_eager"), "rollout_more")
    for row in out["shapes"]:
        row["ours_vs_torch_eager"] = _ratio(row, "ours", "torch_eager")
        if "hf_static" in row:
            row["ours_vs_hf_static"] = _ratio(row, "ours", "hf_static")


# -- 4. update ---------------------------------------------------------------------------------
def _completion_width(seq: int) -> int:
    """An update's completion in `seq` tokens: all but a prompt quarter (logits on it only, as in RL)."""
    return seq - seq // 4


def _logit_rows(batch: int, seq: int) -> int:
    """The positions of an update of `batch` x `seq` tokens that get logits: the completion's and the one before it."""
    return batch * (_completion_width(seq) + 1)


def _update_fn(policy, batch: int, seq: int):
    """One training step of `policy` on a random batch of `batch` x `seq` tokens, as a function."""
    from bench.losses import sft_loss

    ids = torch.randint(3, 259, (batch, seq))
    mask = torch.ones_like(ids)
    completion = mask.clone()
    completion[:, : seq - _completion_width(seq)] = 0

    def step():
        lp = policy.logprobs(ids, mask, keep=_completion_width(seq))
        policy.step(sft_loss(lp, completion.to(policy.device)), 1e-6)

    return step


def _update_step(policy, ledger, batch: int, seq: int, peak: float | None) -> dict:
    from bench.losses import head_recompute_flops

    step = _update_fn(policy, batch, seq)
    graphs = _graphs_compiled()
    first = _timed(step)  # kernels, allocator, compilation
    before, compiled, recomputed = ledger.counted_flops, _graphs_compiled(), policy.recomputed_head_rows
    seconds = _timed(step, 3)
    charged = (ledger.counted_flops - before) / 3
    # MFU counts the model's FLOPs, not the fused head's recomputation where its logits were not kept: one
    # more LM-head forward in its backward over the rows it recomputed, booked as `update`
    head = policy._model.get_output_embeddings().weight
    recomputed = (policy.recomputed_head_rows - recomputed) / 3
    kept = policy.fuses_head and recomputed == 0
    flops = charged - head_recompute_flops(head, recomputed)
    row = {"first_step_s": round(first, 1), "graphs_compiled": compiled - graphs,  # in the first step
           "seconds": seconds, "model_flops": flops, "charged_flops": charged,
           "compiled_head": policy.fuses_head and policy.compiles_head, "head_logits_kept": kept,
           "fused_optimizer": policy.fuses_optimizer, "master_weights": policy.keeps_master_weights,
           "compiled_while_timed": _graphs_compiled() - compiled,  # 0, or the timing holds a compilation
           "flop_per_s": flops / seconds,
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if DEVICE == "cuda" else None}
    if peak:
        row["mfu"] = row["flop_per_s"] / peak
    return row


def _update_policy(folder: Path, fused_head: bool, compiled: bool, dry: bool):
    """The model as a trainable policy, its LM head fused or not and its decoder compiled or not, and its ledger."""
    from bench.accounting.ledger import Ledger
    from bench.policy import Policy

    model, tokenizer = _load(folder)
    ledger = Ledger()
    policy = Policy("student", model, tokenizer, ledger=ledger)
    policy.fused_head, policy.compile_body = fused_head, compiled
    if dry:  # the CUDA defaults that the CPU's differ from, no code generation, the budget scaled down
        policy.compile_backend, policy.fused_optimizer, policy.drop_padding_mask = "eager", True, True
        policy.keep_logits = DRY_KEEP_LOGITS
    return policy, ledger


# the update's paths: (name, fused head, compiled decoder). Eager and what `bench run` on CUDA takes for
# a model of Qwen2-0.5B's size, the goal's figures, come first at every shape (`GOAL_PATHS`); then the
# two pieces apart, so that what each buys shows: measured together, the fused head and the compiled
# decoder were no faster than eager.
UPDATE_PATHS = (("eager", False, False), ("fused_and_compiled", True, True), ("compiled", False, True),
                ("fused", True, False))
GOAL_PATHS = 2
UPDATE_LABELS = {"eager": "eager", "compiled": "compiled decoder", "fused": "fused head",
                 "fused_and_compiled": "fused head + compiled decoder"}


def update(check: Check, folder: Path, out: dict) -> None:
    """One training step on each of the goal's paths (`UPDATE_PATHS[:GOAL_PATHS]`) at each shape, then
    on each of the others at each shape: each on a fresh policy, its peak memory its own, and after
    dynamo's caches are cleared, so that a compiled path compiles as a fresh run's first update does
    (its shapes symbolic, the graph that serves a whole run) and reuses nothing the path before it
    compiled in this process; inductor's cache on disk stays. FLOPs from the ledger."""
    import torch._dynamo

    peak = out["peak_bf16_flops"] = device_peak_flops(torch.cuda.get_device_name(0)) if DEVICE == "cuda" else None
    rows = out.setdefault("shapes", [])
    order = [(shape, path) for paths in (UPDATE_PATHS[:GOAL_PATHS], UPDATE_PATHS[GOAL_PATHS:])
             for shape in SIZES["update"] for path in paths]
    for (batch, seq), (path, fused_head, compiled) in order:
        if not check.fits(f"update_{path}", f"update: {path} at {batch}x{seq}"):
            continue
        torch._dynamo.reset()
        start = time.perf_counter()
        policy, ledger = _update_policy(folder, fused_head, compiled, check.dry)
        rows.append({"batch": batch, "seq": seq, "path": path, "fused_and_compiled": fused_head and compiled,
                     **check.measure(f"update: {path} at {batch}x{seq}", _update_step, policy, ledger, batch, seq,
                                     peak)})
        rows[-1]["cost_s"] = round(time.perf_counter() - start, 3)  # the model's load included
        # the path's next shape: what this one cost, half again for its longer steps, not COST_S's guess
        check.costs[f"update_{path}"] = 1.5 * rows[-1]["cost_s"]
        print(f"  update {json.dumps(rows[-1], default=str)[:1500]}", flush=True)
        del policy
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    measured = [r["mfu"] for r in rows if "mfu" in r]
    out["best_mfu"] = max(measured) if measured else None
    out["goal_40pct"] = None if not measured else out["best_mfu"] >= 0.4


# -- 5. gpu-small -------------------------------------------------------------------------------
def _small_profile(dry: bool):
    from bench.world.profiles import PROFILES

    profile = PROFILES["gpu-small"]
    if dry:  # the tiny world's small student on the CPU, a few steps
        profile = dataclasses.replace(profile, name="gpu-small-dry", device="cpu", student="tiny-llama",
                                      teacher="tiny-llama", budget_flops=2e10, eval_size=4, max_new_tokens=16,
                                      eval_max_new_tokens=16,
                                      warmup=dataclasses.replace(profile.warmup, student_steps=4, teacher_steps=4))
        PROFILES[profile.name] = profile
    return profile


def _prepare_small(profile) -> dict:
    """`bench prepare` for the profile (its base only, as `bench prepare` builds an unshipped world),
    timed, with the base's calibration (which it computes anyway) and the base-choosing rule on it."""
    from bench.world.prepare import prepare

    built = []
    seconds = _timed(lambda: built.append(prepare(profile, progress=False, teacher=False)))
    info = built[0].info
    return {"seconds": round(seconds, 1), "model_hash": info["model_hashes"]["base"],
            **_calibration_figures(info["calibration"])}


def _calibration_figures(rows: list[dict]) -> dict:
    """`calibrate`'s rows per domain (greedy pass@1, pass@8 and mean sample accuracy at temperature 1,
    mean length), and the base-choosing rule on them."""
    from bench.world.warmup import base_rule

    keys = ("base_pass1", "base_pass8", "base_sample_acc", "base_length")
    return {"calibration": {r["domain"]: {k: round(r[k], 3) for k in keys} for r in rows}, "base_rule": base_rule(rows)}


def _run_small(profile) -> dict:
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    runs = Path(os.environ["OPD_BENCH_CACHE"]) / "runs"
    config = RunConfig(method="opd-multi", suite="math_code", profile=profile.name, runs_dir=runs)
    start = time.perf_counter()
    record = Runner(config, progress=False).run()
    # where a run falls short, what calibrating the world next needs: the curve, and per phase its
    # steps with the mean reward of the first and last five (a rise, a plateau or a collapse)
    phases: dict[str, list] = {}
    for step in record["steps"]:
        phases.setdefault(step.get("phase", ""), []).append(step.get("reward"))

    def mean(xs: list) -> float | None:
        return None if None in xs or not xs else sum(xs) / len(xs)

    return {"wall_s": round(time.perf_counter() - start, 1), "base_accuracy": record["base_accuracy"],
            "final_accuracy": record["final_accuracy"], "counted_flops": record["flops"]["counted"],
            "gain_points": 100 * (record["final_accuracy"] - record["base_accuracy"]),
            "base_domain_accuracy": record["base_domain_accuracy"],
            "final_domain_accuracy": record["final_domain_accuracy"],
            "curve": [{k: point.get(k) for k in ("flops", "phase", "accuracy", "domain_accuracy", "wall_s")}
                      for point in record["curve"]],
            "phases": {phase: {"steps": len(rewards), "reward_first5": mean(rewards[:5]),
                               "reward_last5": mean(rewards[-5:])} for phase, rewards in phases.items()},
            "throughput": record.get("throughput")}


def gpu_small(check: Check, _folder: Path, out: dict) -> None:
    """The gpu-small world from scratch (an empty OPD_BENCH_CACHE, the check's own): `bench prepare`
    (its base), then the default run, timed."""
    profile = _small_profile(check.dry)
    out["profile"] = profile.name
    if check.fits("prepare", "gpu_small: prepare"):
        out["prepare"] = check.measure("gpu-small prepare", _prepare_small, profile)
        if "seconds" in out["prepare"] and check.fits("run", "gpu_small: run"):
            out["run"] = check.measure("gpu-small run", _run_small, profile)
    prep, run = out.get("prepare", {}), out.get("run", {})
    out["goals"] = {"prepare_3min": prep["seconds"] <= 180 if "seconds" in prep else None,
                    "run_3min": run["wall_s"] <= 180 if "wall_s" in run else None,
                    "gain_8_points": run["gain_points"] >= 8 if "gain_points" in run else None}


def _teacher_small(profile) -> dict:
    """The external teacher's build (`bench prepare --teacher`), into the prepared base's folder."""
    from bench.world.prepare import prepare

    prepared = prepare(profile, progress=False, teacher=False)  # the base gpu_small built: found in the cache
    start = time.perf_counter()
    info = prepared.ensure_teacher(progress=False)
    return {"seconds": round(time.perf_counter() - start, 1), "model_hash": info.get("model_hash")}


class _CurveDone(Exception):
    """Raised from the warm-up's step callback to end the curve early, saying why."""


def _curve_small(check: Check, profile, out: dict) -> None:
    """The student's warm-up along one run, every `every` steps `bench prepare`'s calibration and the
    base-choosing rule on it, saved point by point; it ends at the first checkpoint that meets the rule
    (the base the rule chooses: later ones cannot change that), at `steps`, or at the budget's end."""
    from bench.accounting.ledger import Ledger
    from bench.registry import get_suite
    from bench.world.prepare import calibrate
    from bench.world.warmup import WARMUP_SUITE, warm_up

    sizes, started = SIZES["curve"], time.perf_counter()
    suite = get_suite(WARMUP_SUITE, profile.warmup.difficulty, profile.task_format)
    curve = out.setdefault("curve", [])

    def on_step(step: int, policy, loss: float) -> None:
        if step % sizes["every"] == 0:  # the figures the base-choosing rule reads, at `bench prepare`'s sizes
            policy._model.eval()
            rows = calibrate(policy, suite, profile)
            policy._model.train()
            curve.append({"step": step, "loss": round(loss, 4), **_calibration_figures(rows),
                          "wall_s": round(time.perf_counter() - started, 1)})
            print(f"  gpu-small warm-up {json.dumps(curve[-1])}", flush=True)
            check.save()  # a part stopped from outside keeps the points so far
            if curve[-1]["base_rule"]["met"]:
                raise _CurveDone(f"the base-choosing rule met at step {step}")
            if check.left() <= 0:
                raise _CurveDone(f"the budget spent at step {step}")

    curved = dataclasses.replace(profile, warmup=dataclasses.replace(profile.warmup, student_steps=sizes["steps"]))
    try:
        warm_up(curved, "base", Ledger(), progress=False, on_step=on_step)
        out["curve_end"] = f"{sizes['steps']} steps, the rule never met"
    except _CurveDone as done:
        out["curve_end"] = str(done)
    out["curve_s"] = round(time.perf_counter() - started, 1)


def gpu_small_more(check: Check, _folder: Path, out: dict) -> None:
    """The student's warm-up curve, and the gpu-small teacher's build (after `gpu_small`'s base)."""
    profile = _small_profile(check.dry)
    if check.fits("curve", "gpu_small_more: curve"):  # first: it chooses the base, which the learning goal needs
        check.measure("gpu-small warm-up curve", _curve_small, check, profile, out)
    built = "seconds" in check.results.get("gpu_small", {}).get("prepare", {})
    if not built and check.fits("prepare", "gpu_small_more: the base, for the teacher"):
        # run without `gpu_small`: the teacher's folder is the prepared base's, so the base comes first
        out["base_prepare"] = check.measure("gpu-small prepare", _prepare_small, profile)
        built = "seconds" in out["base_prepare"]
    if built and check.fits("teacher", "gpu_small_more: teacher"):
        out["teacher"] = check.measure("gpu-small teacher", _teacher_small, profile)


# -- 8. profile ---------------------------------------------------------------------------------
PROFILE_TOP = 25  # ops kept per ranking
# The ops and kernels that say which attention ran: sdpa's flash, memory-efficient or cuDNN kernels, or
# its math fallback (a softmax over a materialised [B, H, T, T] score tensor). A compiled decoder
# chooses when it is traced, so its choice can differ from eager's, and the rankings alone may not show it.
ATTENTION = re.compile(r"scaled_dot_product|attention|flash|fmha|softmax", re.IGNORECASE)


def _profiled(fn) -> dict:
    """fn() once under torch.profiler: its wall time (the profiler's overhead included), the device's
    busy time (the sum of its kernels' times) and the kernels that take the most device time and the
    ops that take the most host time. (An op's own device time is its kernels': ranked together, or
    summed, every launched kernel would count twice, and a graph's replayed kernels once.)"""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    _sync()
    compiled = _graphs_compiled()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        fn()
        _sync()
        wall = time.perf_counter() - start
    averages = prof.key_averages()
    kernels = [{"op": e.key, "calls": e.count, "device_ms": e.self_device_time_total / 1e3}
               for e in averages if e.device_type != DeviceType.CPU]
    ops = [{"op": e.key, "calls": e.count, "self_host_ms": e.self_cpu_time_total / 1e3}
           for e in averages if e.device_type == DeviceType.CPU]
    busy = sum(k["device_ms"] for k in kernels) / 1e3
    return {"wall_s": wall, "device_busy_s": busy, "device_busy_share": busy / wall if DEVICE == "cuda" else None,
            "busy_from": "kernels", "compiled_while_profiled": _graphs_compiled() - compiled,
            "by_device": sorted(kernels, key=lambda k: -k["device_ms"])[:PROFILE_TOP],
            "by_host": sorted(ops, key=lambda op: -op["self_host_ms"])[:PROFILE_TOP],
            "attention": [row for row in ops + kernels if ATTENTION.search(row["op"])]}


def profile_part(check: Check, folder: Path, out: dict) -> None:
    """One call of ours, one eager and one fused, compiled update step under the profiler, each after
    an unprofiled call of the same shape (graph capture, compilation)."""
    from bench.rollout.graphs import GraphRollout

    sizes = SIZES["profile"]
    if check.fits("profile_rollout", "profile: rollout"):
        model, _ = _load(folder)
        (count, n, _), new = SIZES["rollout"][0], sizes["new"]
        prompts, engine = _prompts(count, model.config.vocab_size), GraphRollout(static=True, graphs=not check.dry)

        @torch.inference_mode()
        def call():
            return _ours(model, prompts, n, new, engine)

        call()
        out["rollout"] = {"shape": f"{count}x{n}x{new}", "decode_steps": new - 1,
                          **check.measure("profile: rollout", _profiled, call)}
        del engine, model
    batch, seq = sizes["update"]
    for key, fused, what in (("update_eager", False, "profile_update_eager"), ("update", True, "profile_update")):
        if check.fits(what, f"profile: {key}"):
            policy, _ = _update_policy(folder, fused, fused, check.dry)
            step = _update_fn(policy, batch, seq)
            step()
            out[key] = {"shape": f"{batch}x{seq}", "fused_and_compiled": fused,
                        **check.measure(f"profile: {key}", _profiled, step)}
            del policy, step
            if DEVICE == "cuda":
                torch.cuda.empty_cache()


# -- the table --------------------------------------------------------------------------------------
BOOKKEEPING = ("skipped", "part_s", "goals", "profile")  # a part's keys that are no measurement


def merge(files: list[Path]) -> dict:
    """Several runs' results as one (a second call that ran the parts the first had no time for):
    a later file's part replaces an earlier one's unless it was skipped there, or measured nothing
    (every measurement in it skipped for time)."""
    merged: dict = {}
    for path in files:
        results = _first_lines(json.loads(Path(path).read_text()))
        for key, value in results.items():
            measured = isinstance(value, dict) and "skipped" not in value and any(
                v is not None for k, v in value.items() if k not in BOOKKEEPING)
            if key in PARTS and not measured and key in merged:
                continue
            merged[key] = value
    return merged


def _first_line(text: str) -> str:
    """An error's first line: CUDA's errors add lines of advice."""
    return (text.strip().splitlines() or [""])[0]


def _first_lines(value):
    """`value` with every recorded error cut to its first line (files written before errors were)."""
    if isinstance(value, dict):
        return {k: _first_line(v) if k == "error" and isinstance(v, str) else _first_lines(v)
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
    rollout, more = _shape_rows(results, "rollout"), _shape_rows(results, "rollout_more")
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
    if not rollout:
        lines.append(f"| rollout tokens/s | {missing} | |")
    update = results.get("update") or {}

    def path_of(row: dict) -> str:  # files from before the paths were measured apart have no "path"
        return row.get("path") or ("fused_and_compiled" if row["fused_and_compiled"] else "eager")

    # by shape, then eager, each piece and both: the order they read in, not the one they are measured in
    order = list(UPDATE_LABELS)
    for row in sorted(update.get("shapes", []), key=lambda r: (r["seq"], r["batch"], order.index(path_of(r)))):
        how = UPDATE_LABELS[path_of(row)]
        how += " and head" if row.get("compiled_head") else ""  # the fused head's work after its matmuls
        how += ", logits kept" if row.get("head_logits_kept") else ""
        how += ", fused AdamW" if row.get("fused_optimizer") else ""
        how += " on fp32 master weights" if row.get("master_weights") else ""
        compiled = row.get("graphs_compiled")
        graphs = f", {compiled} graph{'s' if compiled > 1 else ''} compiled" if compiled else ""
        got = (f"{100 * row['mfu']:.1f}% MFU ({row['flop_per_s'] / 1e12:.0f} TFLOP/s, first step "
               f"{row['first_step_s']} s{graphs}){_compiled_note(row)}"
               if "mfu" in row else row.get("error", "no known peak for this device"))
        lines.append(f"| update {row['batch']} x {row['seq']} tokens, {how} | {got} | 40% |")
    if not update.get("shapes"):
        lines.append(f"| update MFU | {missing} | 40% |")
    fused = results.get("fused") or {}
    slices = (fused.get("sliced") or {}).get("slices", 8)
    kept = "fused head, logits kept" if "recomputed" in fused else "fused head"  # files from before: recomputed
    for name, got in ((f"{kept}, against eager, bf16", fused),
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
    audit = results.get("audit") or {}
    graph = audit.get("graph_rollout") or {}
    lines.append("| FLOP ledger against torch's counter on CUDA | " + (
        ", ".join(f"{r['phase']} {100 * r['rel_diff']:+.3f}%" for r in audit["rows"])
        + (f"; graph replays charged {graph['graphed_charged']:.4g} = the same steps run eagerly "
           f"({100 * graph['eager_rel_diff']:+.3f}% against the counter"
           + (", prefill padding aside" if graph.get("padding_flops") else "")
           + f"), same tokens: {graph['same_tokens']}"
           if graph else "") if "rows" in audit else audit.get("error", missing)) + " | exact |")
    small = results.get("gpu_small") or {}
    prep, run = small.get("prepare") or {}, small.get("run") or {}
    lines.append("| `gpu-small`: `bench prepare`, then `bench run --method opd-multi --suite math_code` | " + (
        f"prepare {prep['seconds']:.0f} s{_base_text(prep)}" if "seconds" in prep
        else f"prepare: {prep.get('error', missing)}")
        + ("; " + (f"run {run['wall_s']:.0f} s, {100 * run['base_accuracy']:.1f}% -> "
                   f"{100 * run['final_accuracy']:.1f}% ({run['gain_points']:+.1f} points)"
                   if "wall_s" in run else f"run: {run.get('error', missing)}"))
        + " | 180 s each, +8 points |")
    prof = results.get("profile") or {}
    lines.append("| where the time goes (`torch.profiler`) | " + ("; ".join(
        _profile_text(name, prof[name]) for name in ("rollout", "update_eager", "update") if name in prof)
        or missing) + " | |")
    return "\n".join(lines)


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


# in the order they run: what the goals need first
PARTS = {"audit": audit, "fused": fused, "rollout": rollout, "update": update, "gpu_small": gpu_small,
         "rollout_more": rollout_more, "gpu_small_more": gpu_small_more, "profile": profile_part}


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
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one part, in the process `main` started for it
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table:
        unreadable = [str(f) for f in args.table if not f.is_file()]
        if unreadable:
            parser.error(f"no results file {', '.join(unreadable)}")
        print(table(merge(args.table)))
        return 0
    global DEVICE, SIZES
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; known: {', '.join(PARTS)}")
    if args.budget_s is not None and args.budget_s < 0:
        parser.error(f"--budget-s must be >= 0 seconds, got {args.budget_s}")
    if args.dry_run:
        DEVICE, SIZES = "cpu", DRY_SIZES
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
    check = Check(Path(args.out).resolve(), deadline, args.dry_run)
    name = torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu (dry run)"
    check.results.update({"device": name, "torch": torch.__version__, "transformers": transformers.__version__,
                          "date": time.strftime("%Y-%m-%d"), "peak_bf16_flops": device_peak_flops(name),
                          "budget_s": args.budget_s})
    check.save()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build_folder(Path(tmp) / "qwen2-0.5b-shape", DRY if args.dry_run else QWEN2_05B)
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
