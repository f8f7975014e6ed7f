"""The fused LM head against the eager one, and the update's MFU on its four paths (the check's
`fused` and `update` parts)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from bench.accounting.flops import device_peak_flops
from gpucheck import common
from gpucheck.common import DRY, DRY_KEEP_LOGITS, DRY_LOGIT_BUDGET, QWEN2_05B, Check, graphs_compiled, load, timed


# -- the fused head ----------------------------------------------------------------------------
def fused(check: Check, folder: Path, out: dict) -> None:
    """Fused and eager log-probs and gradients of the same batch (bf16 on CUDA: within its rounding):
    the fused head with its logits kept for the backward (`Policy`'s default here), recomputed there
    in one slice, in 8 slices of the vocabulary (as the update's larger shapes are cut), and in 8
    slices compiled (its work after each matmul under inductor, as beside a compiled decoder; the dry
    run traces it only). Then the head alone timed, eager against fused, its logits kept and
    recomputed, each uncompiled and compiled (`benchmarks/bench_fused_head.py`), at the update's
    first shape: 16 x 1024 tokens, the completion's positions."""
    from bench.losses import sft_loss, vocab_slices

    import bench_fused_head  # benchmarks/, on the path that gpu_check.py sets

    ids = torch.randint(3, 259, (4, 256 if not check.dry else 16))
    mask, keep = torch.ones_like(ids), ids.shape[1] // 2
    got, rows = [], ids.shape[0] * (keep + 1)  # the positions that get logits
    runs = ((False, None, False), (True, None, False), (True, 1, False), (True, 8, False), (True, 8, True))
    for on, slices, compiled in runs:  # slices: None keeps the logits, else recomputes them in that many
        policy, _ = update_policy(folder, on, False, check.dry)
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
        # in float64: summed in fp32 over every weight, equal gradients gave a cosine of 1.000005
        return {"max_abs_logprob_diff": float((lp0 - lp).abs().max()),
                "grad_rel_diff": float((g0 - g).norm() / g0.norm()),
                "grad_cosine": float(torch.nn.functional.cosine_similarity(g0.double(), g.double(), dim=0))}

    out.update(against_eager(*fused_runs[0]))
    out["recomputed"] = against_eager(*fused_runs[1])
    slices = len(vocab_slices(rows, vocab, budget))
    out["sliced"] = {"slices": slices, **against_eager(*fused_runs[2])}
    out["sliced_compiled"] = {"slices": slices, **against_eager(*fused_runs[3])}
    check.save()
    if check.fits("fused_timing", "fused: the head alone, timed"):
        batch, seq = common.SIZES["update"][0]
        shape = QWEN2_05B if not check.dry else DRY
        out["timing"] = check.measure("fused: the head alone, timed", bench_fused_head.measure,
                                      _logit_rows(batch, seq), shape["vocab_size"], shape["hidden_size"],
                                      torch.bfloat16, 3, common.DEVICE, "eager" if check.dry else "inductor")


# -- the update --------------------------------------------------------------------------------
def _completion_width(seq: int) -> int:
    """An update's completion in `seq` tokens: all but a prompt quarter (logits on it only, as in RL)."""
    return seq - seq // 4


def _logit_rows(batch: int, seq: int) -> int:
    """The positions of an update of `batch` x `seq` tokens that get logits: the completion's and the one before it."""
    return batch * (_completion_width(seq) + 1)


def update_fn(policy, batch: int, seq: int):
    """One training step of `policy` on a random batch of `batch` x `seq` tokens, as a function: through
    the update engine, as `bench run` trains, so an unfused head's batch is cut into micro-batches of at
    most `LOGIT_BUDGET` logits (one row each at 16 x 2048 with a 152k vocabulary) and a fused head's
    is one."""
    from bench.losses import sft_loss
    from bench.update import SupervisedBatch, run_update

    ids = torch.randint(3, 259, (batch, seq))
    mask = torch.ones_like(ids)
    completion = mask.clone()
    completion[:, : seq - _completion_width(seq)] = 0
    tokens = SupervisedBatch(ids, mask, completion)

    def step():
        run_update(policy, tokens, lambda bucket: sft_loss(bucket.logprobs, bucket.mask), lr=1e-6, weighting="tokens")

    return step


def _update_step(policy, ledger, batch: int, seq: int, peak: float | None) -> dict:
    from bench.losses import head_recompute_flops
    from bench.update import update_buckets

    step = update_fn(policy, batch, seq)
    graphs = graphs_compiled()
    first = timed(step)  # kernels, allocator, compilation
    before, compiled, recomputed = ledger.counted_flops, graphs_compiled(), policy.recomputed_head_rows
    seconds = timed(step, 3)
    charged = (ledger.counted_flops - before) / 3
    # MFU counts the model's FLOPs, not the fused head's recomputation where its logits were not kept: one
    # more LM-head forward in its backward over the rows it recomputed, booked as `update`
    head = policy._model.get_output_embeddings().weight
    recomputed = (policy.recomputed_head_rows - recomputed) / 3
    kept = policy.fuses_head and recomputed == 0
    flops = charged - head_recompute_flops(head, recomputed)
    # the engine's micro-batches of the step, as `run_update` cuts them
    micro_batches = len(update_buckets(policy, torch.ones(batch, seq)))
    row = {"first_step_s": round(first, 1), "graphs_compiled": compiled - graphs,  # in the first step
           "micro_batches": micro_batches,
           "seconds": seconds, "model_flops": flops, "charged_flops": charged,
           "compiled_head": policy.fuses_head and policy.compiles_head, "head_logits_kept": kept,
           "fused_optimizer": policy.fuses_optimizer, "master_weights": policy.keeps_master_weights,
           "compiled_while_timed": graphs_compiled() - compiled,  # 0, or the timing holds a compilation
           "flop_per_s": flops / seconds,
           "peak_memory_gb": torch.cuda.max_memory_allocated() / 2**30 if common.DEVICE == "cuda" else None}
    if peak:
        row["mfu"] = row["flop_per_s"] / peak
    return row


def update_policy(folder: Path, fused_head: bool, compiled: bool, dry: bool):
    """The model as a trainable policy, its LM head fused or not and its decoder compiled or not, and its ledger."""
    from bench.accounting.ledger import Ledger
    from bench.policy import Policy

    model, tokenizer = load(folder)
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

    import bench.update

    if check.dry:  # this part's process: the engine cuts the dry run's second shape as it cuts the GPU's
        bench.update.LOGIT_BUDGET = DRY_LOGIT_BUDGET
    on_gpu = common.DEVICE == "cuda"
    peak = out["peak_bf16_flops"] = device_peak_flops(torch.cuda.get_device_name(0)) if on_gpu else None
    rows = out.setdefault("shapes", [])
    order = [(shape, path) for paths in (UPDATE_PATHS[:GOAL_PATHS], UPDATE_PATHS[GOAL_PATHS:])
             for shape in common.SIZES["update"] for path in paths]
    for (batch, seq), (path, fused_head, compiled) in order:
        if not check.fits(f"update_{path}", f"update: {path} at {batch}x{seq}"):
            continue
        torch._dynamo.reset()
        start = time.perf_counter()
        policy, ledger = update_policy(folder, fused_head, compiled, check.dry)
        rows.append({"batch": batch, "seq": seq, "path": path, "fused_and_compiled": fused_head and compiled,
                     **check.measure(f"update: {path} at {batch}x{seq}", _update_step, policy, ledger, batch, seq,
                                     peak)})
        rows[-1]["cost_s"] = round(time.perf_counter() - start, 3)  # the model's load included
        # the path's next shape: what this one cost, half again for its longer steps, not COST_S's guess
        check.costs[f"update_{path}"] = 1.5 * rows[-1]["cost_s"]
        print(f"  update {json.dumps(rows[-1], default=str)[:1500]}", flush=True)
        del policy
        if common.DEVICE == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
    measured = [r["mfu"] for r in rows if "mfu" in r]
    out["best_mfu"] = max(measured) if measured else None
    out["goal_40pct"] = None if not measured else out["best_mfu"] >= 0.4
