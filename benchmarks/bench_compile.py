"""Compiling the decoder for updates: what `Policy` does (layer by layer, shapes symbolic from the first
compilation) against the whole stack at once, and against torch's default of compiling for the first
shape alone.

    .venv/bin/python benchmarks/bench_compile.py [--layers 24] [--threads 2]

A model of Qwen2-0.5B's width and depth (hidden 896, 24 layers, 14 query and 2 key-value heads; a
1,024-token vocabulary, so that the decoder, not the head, is what is compiled), fp32 on the CPU,
inductor. Each way runs in a fresh process with an empty inductor cache, so that none reuses what
another compiled: the first update step at 2 x 64 tokens (compilation included), three more at that
shape, then the first at 2 x 96 (a second shape: under torch's default, `dynamic=None`, the graph is
compiled again there with symbolic sizes), each against the same steps run eagerly in the same
process. Prints the seconds of each first step and the compiled steps' time over the eager steps'.

- `layers`: `Policy`'s way, each layer under `torch.compile(dynamic=True)`, one graph for them all;
- `layers_first_shape`: the same layers under `torch.compile(dynamic=None)`;
- `whole`: the decoder stack as one module under `torch.compile(dynamic=True)`, as `Policy` compiles
  a decoder without a layer list.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)

WAYS = ("layers", "layers_first_shape", "whole")


def _step_fn(policy, rows: int, seq: int):
    import torch

    from bench.losses import sft_loss

    ids = torch.randint(3, 1024, (rows, seq), generator=torch.Generator().manual_seed(seq))
    mask = torch.ones_like(ids)

    def step() -> float:
        start = time.perf_counter()
        policy.step(sft_loss(policy.logprobs(ids, mask), mask), 1e-6)
        return time.perf_counter() - start

    return step


def one_way(way: str, layers: int, threads: int) -> dict:
    """The measurements of one way, in this process."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bench.accounting.ledger import Ledger
    from bench.policy import Policy
    from bench.world.models import TINY_SPECS, build_tiny

    torch.set_num_threads(threads)
    _, tokenizer = build_tiny(TINY_SPECS["tiny-qwen2"])
    policies = {}
    for mode in ("eager", way):
        torch.manual_seed(0)
        config = Qwen2Config(vocab_size=1024, hidden_size=896, intermediate_size=4864, num_hidden_layers=layers,
                             num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True)
        policy = Policy(mode, Qwen2ForCausalLM(config), tokenizer, ledger=Ledger())
        policy.fused_head, policy.compile_body = False, mode != "eager"
        if mode == "whole":  # the decoder stack as one compiled module, as `Policy` does for a model without `layers`
            model = policy._model
            policy._compiled = (model, "model", torch.compile(model.model, dynamic=True))
        elif mode == "layers_first_shape":
            body = policy._model.model
            policy._compiled = (body, "layers", torch.nn.ModuleList([torch.compile(layer, dynamic=None)
                                                                     for layer in body.layers]))
        policies[mode] = policy
    out = {"way": way}
    for shape in ((2, 64), (2, 96)):
        steps = {mode: _step_fn(policy, *shape) for mode, policy in policies.items()}
        key = "x".join(map(str, shape))
        out[f"first_{key}_s"] = steps[way]()
        steps["eager"]()  # its warm-up
        if shape == (2, 64):
            timed = {mode: [] for mode in steps}
            for _ in range(3):
                for mode, step in steps.items():
                    timed[mode].append(step())
            out["steady_over_eager"] = statistics.median(timed[way]) / statistics.median(timed["eager"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # one way, in this process
    args = parser.parse_args()
    if args.way:
        print(json.dumps(one_way(args.way, args.layers, args.threads)))
        return
    results = {}
    for way in WAYS:
        with tempfile.TemporaryDirectory() as cache:
            proc = subprocess.run([sys.executable, __file__, "--way", way, "--layers", str(args.layers),
                                   "--threads", str(args.threads)], capture_output=True, text=True,
                                  env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
        if proc.returncode:
            sys.exit(f"bench_compile: the {way} run failed:\n{proc.stderr[-3000:]}")
        results[way] = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{args.layers} layers of Qwen2-0.5B's width, fp32, {args.threads} threads, inductor, an empty cache each:")
    for way, r in results.items():
        print(f"  {way:18s}: first step {r['first_2x64_s']:.1f} s at 2 x 64, {r['first_2x96_s']:.1f} s at 2 x 96; "
              f"later steps {r['steady_over_eager']:.2f}x the eager ones")
    layered = results["layers"]
    for way in WAYS[1:]:
        other = results[way]
        both = (layered["first_2x64_s"] + layered["first_2x96_s"]) / (other["first_2x64_s"] + other["first_2x96_s"])
        print(f"  layers over {way}: first step {layered['first_2x64_s'] / other['first_2x64_s']:.2f}x, "
              f"at the second shape {layered['first_2x96_s'] / other['first_2x96_s']:.2f}x, both {both:.2f}x")


if __name__ == "__main__":
    main()
