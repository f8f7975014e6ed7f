"""Metering overhead on a training step: the same step with and without the ledger's hooks.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_metering.py [--model tiny-llama] [--rounds 15]

Single-threaded, timed in CPU seconds of this process (the machine may be shared); rounds alternate
metered and bare so that drift hits both; prints the medians and their ratio, and the ratio of the
best rounds (goal: metered / bare <= 1.02).
"""

from __future__ import annotations

import argparse
import statistics
import time

import bench  # noqa: F401
import torch

from bench.accounting.ledger import Ledger
from bench.losses import sft_loss, token_logprobs
from bench.accounting.metering import meter, unmeter
from bench.world.models import TINY_SPECS, build_tiny


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
    logp = token_logprobs(model(input_ids=ids).logits, ids)
    sft_loss(logp, torch.ones_like(ids)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def measure(model_name: str, rounds: int, batch: int, seq: int, steps: int) -> dict[str, float]:
    torch.set_num_threads(1)
    model, _ = build_tiny(TINY_SPECS[model_name])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, 200, (batch, seq))
    ledger = Ledger()
    bare, metered = [], []
    for _ in range(2):  # warm-up
        train_step(model, opt, ids)
    for _ in range(rounds):
        for hooked, times in ((False, bare), (True, metered)):
            if hooked:
                meter(model, "student", ledger)
            t0 = time.process_time()
            for _ in range(steps):
                train_step(model, opt, ids)
            times.append((time.process_time() - t0) / steps)
            unmeter(model)
    b, m = statistics.median(bare), statistics.median(metered)
    return {"bare_s": b, "metered_s": m, "ratio": m / b, "min_ratio": min(metered) / min(bare),
            "charged_flops": ledger.counted_flops}


def hook_cost_us(model_name: str, calls: int = 2000) -> float:
    """CPU microseconds the hooks add to one forward call (a 1-token call, so the hooks dominate)."""
    model, _ = build_tiny(TINY_SPECS[model_name])
    ids = torch.randint(3, 200, (1, 1))
    ledger = Ledger()
    times = {}
    with torch.no_grad():
        for hooked in (False, True, False, True):
            if hooked:
                meter(model, "student", ledger)
            t0 = time.process_time()
            for _ in range(calls):
                model(input_ids=ids)
            times.setdefault(hooked, []).append((time.process_time() - t0) / calls)
            unmeter(model)
    return 1e6 * (min(times[True]) - min(times[False]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="tiny-llama")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    r = measure(args.model, args.rounds, args.batch, args.seq, args.steps)
    print(f"model={args.model} batch={args.batch}x{args.seq} threads=1")
    print(f"bare step    {1e3 * r['bare_s']:.2f} ms")
    print(f"metered step {1e3 * r['metered_s']:.2f} ms")
    print(f"overhead ratio metered/bare = {r['ratio']:.4f} (medians), {r['min_ratio']:.4f} (best rounds)")
    cost = hook_cost_us(args.model)
    print(f"hook cost per forward call: {cost:.1f} us = {100 * cost * 1e-6 / r['bare_s']:.3f}% of a training step")


if __name__ == "__main__":
    main()
