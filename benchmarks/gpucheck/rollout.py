"""Tokens/s of our rollout engine against Hugging Face `generate` (the check's `rollout` and
`rollout_more` parts)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from gpucheck import common
from gpucheck.common import Check, graphs_compiled, load, random_prompts, sync, timed


def generate_ours(model, prompts, n, new, engine):
    """Our engines never stop early here (EOS -1): every row generates `new` tokens, as in `generate`."""
    batch = engine.generate(model, prompts, n=n, max_new_tokens=new, temperature=1.0, eos_id=-1,
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
    return {"ours": lambda p, n, g: generate_ours(model, p, n, g, ours),
            "ours_again": lambda p, n, g: generate_ours(model, p, n, g, ours),  # the same engine, its graphs kept
            "hf_dynamic": lambda p, n, g: _hf(model, p, n, g, static=False),
            "hf_static": lambda p, n, g: _hf(model, p, n, g, static=True),
            "torch_eager": lambda p, n, g: generate_ours(model, p, n, g, eager)}


def _tokens_per_s(fn, name: str, prompts: list, n: int, new: int) -> dict:
    first = timed(lambda: fn(prompts, n, new if name in SHAPED_WARMUP else min(new, WARM_NEW)))
    sync()
    compiled, start = graphs_compiled(), time.perf_counter()
    tokens = fn(prompts, n, new)
    sync()
    return {"tokens": tokens, "first_call_s": round(first, 2), "tokens_per_s": tokens / (time.perf_counter() - start),
            "compiled_while_timed": graphs_compiled() - compiled}


def _rollout_shapes(check: Check, folder: Path, out: dict, engines_at, part: str) -> None:
    """Tokens/s of the engines `engines_at(i)` names at shape i, into out["shapes"] (a row per shape).

    One engine at every shape, then the next: our engine's calls at the three shapes follow each other
    with no other engine (no compiled `generate`) between them."""
    model, _ = load(folder)
    engines = _engines(model, check.dry)
    rows = out.setdefault("shapes", [])
    for i, (prompts, n, new) in enumerate(common.SIZES["rollout"]):
        if not any(r["shape"] == f"{prompts}x{n}x{new}" for r in rows):
            rows.append({"shape": f"{prompts}x{n}x{new}"})
    names = list(dict.fromkeys(name for i in range(len(common.SIZES["rollout"])) for name in engines_at(i)))
    for name in names:
        for i, (prompts, n, new) in enumerate(common.SIZES["rollout"]):
            shape = f"{prompts}x{n}x{new}"
            if name not in engines_at(i) or not check.fits(name, f"{part}: {name} at {shape}"):
                continue
            row = next(r for r in rows if r["shape"] == shape)
            ids = random_prompts(prompts, model.config.vocab_size)
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
