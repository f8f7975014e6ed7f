"""The fused LM head against the eager one: log-probs of N positions and their backward, in one process.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_fused_head.py [--rows 2048] [--rounds 3]

Qwen2-0.5B's head by default (vocabulary 151,936, hidden 896, bf16). Eager: the [N, V] logits, their
fp32 log-softmax and its backward, as `token_logprobs` runs them. Fused: `linear_token_logprobs` at
`Policy`'s fp32 logit budget, its logits either kept for the backward in the model's dtype (`kept`:
the eager path's 3 head matmuls) or recomputed there (`recomputed`: 4 matmuls, so 4/3 is the ratio
a compute-bound head would show where all four run at one speed; on a CPU the hidden states'
gradient is then an fp32 matmul, slower). Each again with its work after each matmul under inductor
(`compile_backend`, as `Policy` runs it beside a compiled decoder), compiled before the timing.
Rounds alternate the variants so that drift on a shared machine hits each; prints the median
seconds, their ratios to eager, and the most logits each holds. `benchmarks/gpu_check.py` runs the
same measurement on a GPU at the update's shape.
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


def _fused(keep: bool, backend: str | None):
    def run(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return linear_token_logprobs(hidden, weight, targets, max_logits=LOGIT_CHUNK,
                                     keep_logits=hidden.shape[0] * weight.shape[0] if keep else 0,
                                     compile_backend=backend)
    return run


def variants(backend: str = "inductor") -> dict:
    """The variants timed, the compiled ones with `backend`."""
    return {"eager": _eager, "kept": _fused(True, None), "recomputed": _fused(False, None),
            "kept_compiled": _fused(True, backend), "recomputed_compiled": _fused(False, backend)}


NAMES = tuple(variants())


def _seconds(fn, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> float:
    hidden.grad = weight.grad = None
    if hidden.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn(hidden, weight, targets).sum().backward()
    if hidden.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start


def measure(rows: int, vocab: int, dim: int, dtype: torch.dtype, rounds: int, device: str = "cpu",
            backend: str = "inductor") -> dict:
    """Median seconds of each variant (the compiled ones with `backend`) and their ratios to eager."""
    torch.manual_seed(0)
    timed = variants(backend)
    hidden = (torch.randn(rows, dim) * 0.5).to(device, dtype).requires_grad_()
    weight = (torch.randn(vocab, dim) * 0.02).to(device, dtype).requires_grad_()
    targets = torch.randint(0, vocab, (rows,), device=device)
    for fn in timed.values():  # compilation, kernel choice and the allocator, untimed
        _seconds(fn, hidden, weight, targets)
    times: dict[str, list[float]] = {name: [] for name in NAMES}
    for _ in range(rounds):
        for name, fn in timed.items():
            times[name].append(_seconds(fn, hidden, weight, targets))
    median = {name: statistics.median(values) for name, values in times.items()}
    return {"rows": rows, **{f"{name}_s": value for name, value in median.items()},
            **{f"{name}_over_eager": median[name] / median["eager"] for name in NAMES[1:]},
            "eager_logits": rows * vocab, "recomputed_logits": min(rows * vocab, LOGIT_CHUNK)}


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
    print(f"{args.rows} rows x {args.vocab} x {args.hidden}, {args.dtype}, median of {args.rounds}: eager "
          f"{out['eager_s']:.2f} s; over eager: " + ", ".join(
              f"{name.replace('_', ' ')} {out[f'{name}_over_eager']:.2f}" for name in NAMES[1:])
          + f" (recomputed: 4/3 = 1.33 if the head were compute-bound); most logits held: {out['eager_logits']:,}"
          f" eager and kept (the kept ones in {args.dtype}, eager's in fp32 too), "
          f"{out['recomputed_logits']:,} recomputed")


if __name__ == "__main__":
    main()
