"""The fused LM head against the eager one: log-probs of N positions and their backward, in one process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fused_head.py [--rows 2048] [--rounds 3]

Qwen2-0.5B's head by default (vocabulary 151,936, hidden 896, bf16). Eager: the [N, V] logits, their
fp32 log-softmax and its backward, as `token_logprobs` runs them. Fused: `linear_token_logprobs` at
`Policy`'s logit budget, which never holds more than that many logits and recomputes them in the
backward: 4 head matmuls against eager's 3, so 4/3 is the ratio a compute-bound head would show
where all four run at one speed (on a CPU the hidden states' gradient is an fp32 matmul, slower).
Fused and compiled: the same with its work after each matmul under inductor (`compile_backend`, as
`Policy` runs it beside a compiled decoder), compiled before the timing. Rounds alternate the three
so that drift on a shared machine hits each; prints the median seconds, their ratios to eager, and
the largest logit tensor each holds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import bench  # noqa: F401
import torch

from bench.losses import linear_token_logprobs
from bench.policy import LOGIT_CHUNK


def _eager(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax((hidden @ weight.T).float(), dim=-1)  # [N, V]
    return logp.gather(1, targets[:, None]).squeeze(1)


def _fused(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return linear_token_logprobs(hidden, weight, targets, max_logits=LOGIT_CHUNK)


def _fused_compiled(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return linear_token_logprobs(hidden, weight, targets, max_logits=LOGIT_CHUNK, compile_backend="inductor")


VARIANTS = {"eager": _eager, "fused": _fused, "fused_compiled": _fused_compiled}


def _seconds(fn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> float:
    hidden.grad = weight.grad = None
    start = time.perf_counter()
    fn(hidden, weight, targets).sum().backward()
    return time.perf_counter() - start


def measure(rows: int, vocab: int, dim: int, dtype: torch.dtype, rounds: int) -> dict:
    torch.manual_seed(0)
    hidden = (torch.randn(rows, dim) * 0.5).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, dim) * 0.02).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (rows,))
    _seconds(_fused_compiled, hidden, weight, targets)  # compilation, untimed
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    for _ in range(rounds):
        for name, fn in VARIANTS.items():
            times[name].append(_seconds(fn, hidden, weight, targets))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {**{f"{name}_s": value for name, value in median.items()},
            **{f"{name}_over_eager": median[name] / median["eager"] for name in ("fused", "fused_compiled")},
            "eager_logits": rows * vocab, "fused_logits": min(rows * vocab, LOGIT_CHUNK)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = measure(args.rows, args.vocab, args.hidden, getattr(torch, args.dtype), args.rounds)
    print(f"{args.rows} rows x {args.vocab} x {args.hidden}, {args.dtype}, median of {args.rounds}: "
          f"eager {out['eager_s']:.2f} s, fused {out['fused_s']:.2f} s, fused and compiled "
          f"{out['fused_compiled_s']:.2f} s; over eager: fused {out['fused_over_eager']:.2f}, fused and compiled "
          f"{out['fused_compiled_over_eager']:.2f} (4/3 = 1.33 if the head were compute-bound); largest logits "
          f"{out['eager_logits']:,} eager, {out['fused_logits']:,} fused")


if __name__ == "__main__":
    main()
