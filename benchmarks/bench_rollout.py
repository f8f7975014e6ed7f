"""Rollout speed: `TorchRollout` against transformers' `model.generate` on the same batch, one thread.

    OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_rollout.py
        [--prompts 64] [--n 8] [--new-tokens 16] [--repeats 3] [--models llama-1M,llama-12M]

Both engines sample at temperature 1 from the same prompts with the same random Llama-style model.
`generate` gets the prompts left-padded with an attention mask and `num_return_sequences=n`, the way
one calls it for GRPO, and `top_k=0` (plain sampling, like TorchRollout). Tokens/s counts generated
tokens up to and including EOS. Times are CPU seconds of this process (the machine may be shared;
wall-clock ratios are printed too); the two engines alternate `repeats` times and each keeps its best.
The FLOP columns are what the ledger charges each engine (both metered the same way), per token.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede `import torch`
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from a checkout

import torch  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from bench.accounting.flops import FlopSpec  # noqa: E402
from bench.accounting.ledger import Ledger  # noqa: E402
from bench.accounting.metering import meter  # noqa: E402
from bench.rollout.torch_engine import TorchRollout  # noqa: E402

torch.set_num_threads(1)  # benchmarks run single-threaded and report ratios (docs/design.md, Known pitfalls)

VOCAB = 264  # the tiny profile's byte-level tokenizer, rounded up to a multiple of 8
EOS, PAD = 1, 0
MODELS = {  # Llama-style shapes: layers, hidden, heads, kv heads, FFN
    "llama-1M": (4, 128, 4, 2, 384),
    "llama-12M": (8, 384, 6, 2, 1024),
}
LAYOUTS = {"equal": (16, 16), "mixed": (8, 24)}  # prompt token lengths, uniform in [lo, hi]


def build_model(name: str) -> torch.nn.Module:
    layers, hidden, heads, kv_heads, ffn = MODELS[name]
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv_heads, intermediate_size=ffn, max_position_embeddings=256,
        tie_word_embeddings=True, bos_token_id=2, eos_token_id=EOS, pad_token_id=PAD,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def make_prompts(count: int, layout: str, seed: int = 0) -> list[list[int]]:
    lo, hi = LAYOUTS[layout]
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(lo, hi + 1, (count,), generator=g).tolist()
    return [torch.randint(3, VOCAB, (n,), generator=g).tolist() for n in lengths]


def run_engine(model, prompts, n: int, new_tokens: int, engine: TorchRollout, seed: int) -> int:
    """Generated tokens (EOS included)."""
    batch = engine.generate(
        model, prompts, n=n, max_new_tokens=new_tokens, eos_id=EOS,
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    return batch.total_tokens


def run_generate(model, prompts, n: int, new_tokens: int, seed: int) -> int:
    """Generated tokens (up to and including the first EOS of each row) of `model.generate`."""
    width = max(map(len, prompts))
    ids = torch.tensor([[PAD] * (width - len(p)) + p for p in prompts])  # [B, P], left-padded
    mask = (torch.arange(width) >= width - torch.tensor([len(p) for p in prompts])[:, None]).long()  # [B, P]
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = model.generate(
            ids, attention_mask=mask, do_sample=True, top_k=0, top_p=1.0, temperature=1.0,
            num_return_sequences=n, max_new_tokens=new_tokens, eos_token_id=EOS, pad_token_id=PAD,
        )[:, width:]  # fmt: skip
    is_eos = out == EOS
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, torch.full((out.shape[0],), out.shape[1]))
    return int(first.sum())


@dataclass
class Result:
    tokens: int = 0
    cpu_s: float = float("inf")
    wall_s: float = float("inf")
    flops: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.cpu_s


def _timed(fn, result: Result, ledger: Ledger) -> None:
    before = ledger.counted_flops
    cpu, wall = time.process_time(), time.perf_counter()
    tokens = fn()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    if cpu < result.cpu_s:
        result.tokens, result.flops = tokens, ledger.counted_flops - before
    result.cpu_s, result.wall_s = min(result.cpu_s, cpu), min(result.wall_s, wall)


def compare(model_name: str, layout: str, prompts: int, n: int, new_tokens: int, repeats: int) -> dict:
    """Best-of-`repeats` tokens/s of both engines on one batch, the ratio, and ledger FLOPs per token."""
    model, batch = build_model(model_name), make_prompts(prompts, layout)
    ledger = Ledger()
    meter(model, "policy", ledger)
    engine, ours, theirs = TorchRollout(), Result(), Result()
    run_engine(model, batch[:4], n, 2, engine, 0), run_generate(model, batch[:4], n, 2, 0)  # warm-up
    for rep in range(repeats):
        _timed(lambda: run_engine(model, batch, n, new_tokens, engine, rep), ours, ledger)
        _timed(lambda: run_generate(model, batch, n, new_tokens, rep), theirs, ledger)
    spec = FlopSpec.from_config(model.config)
    pad_flops = spec.pair_flops * engine.last_stats["pad_keys"]
    return dict(
        model=model_name, params_m=sum(p.numel() for p in model.parameters()) / 1e6, layout=layout,
        ours=ours.tokens_per_s, theirs=theirs.tokens_per_s, ratio=ours.tokens_per_s / theirs.tokens_per_s,
        wall_ratio=(ours.tokens / ours.wall_s) / (theirs.tokens / theirs.wall_s),
        ours_flops_per_token=ours.flops / ours.tokens, theirs_flops_per_token=theirs.flops / theirs.tokens,
        pad_share=pad_flops / ours.flops,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args()
    print(f"{args.prompts} prompts x n={args.n}, {args.new_tokens} new tokens, 1 thread, best of {args.repeats}")
    header = (
        "model       params  prompts  TorchRollout tok/s  generate tok/s  ratio  wall ratio"
        "  MFLOP/tok ours/generate  padding"
    )
    print(header + "\n" + "-" * len(header))
    for name in args.models.split(","):
        for layout in args.layouts.split(","):
            r = compare(name, layout, args.prompts, args.n, args.new_tokens, args.repeats)
            print(
                f"{r['model']:<11} {r['params_m']:5.1f}M  {r['layout']:<7}  {r['ours']:18,.0f}  {r['theirs']:14,.0f}"
                f"  {r['ratio']:4.2f}x  {r['wall_ratio']:9.2f}x  {r['ours_flops_per_token'] / 1e6:9.2f} / "
                f"{r['theirs_flops_per_token'] / 1e6:<9.2f}  {r['pad_share']:6.2%}",
                flush=True,
            )


if __name__ == "__main__":
    main()
