"""Where the time goes: one rollout call and two update steps under `torch.profiler` (the check's
`profile` part)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import torch

from gpucheck import common
from gpucheck.common import Check, graphs_compiled, load, random_prompts, sync
from gpucheck.rollout import generate_ours
from gpucheck.update import update_fn, update_policy


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

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if common.DEVICE == "cuda" else [])
    sync()
    compiled = graphs_compiled()
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        fn()
        sync()
        wall = time.perf_counter() - start
    averages = prof.key_averages()
    kernels = [{"op": e.key, "calls": e.count, "device_ms": e.self_device_time_total / 1e3}
               for e in averages if e.device_type != DeviceType.CPU]
    ops = [{"op": e.key, "calls": e.count, "self_host_ms": e.self_cpu_time_total / 1e3}
           for e in averages if e.device_type == DeviceType.CPU]
    busy = sum(k["device_ms"] for k in kernels) / 1e3
    share = busy / wall if common.DEVICE == "cuda" else None
    return {"wall_s": wall, "device_busy_s": busy, "device_busy_share": share,
            "busy_from": "kernels", "compiled_while_profiled": graphs_compiled() - compiled,
            "by_device": sorted(kernels, key=lambda k: -k["device_ms"])[:PROFILE_TOP],
            "by_host": sorted(ops, key=lambda op: -op["self_host_ms"])[:PROFILE_TOP],
            "attention": [row for row in ops + kernels if ATTENTION.search(row["op"])]}


def profile_part(check: Check, folder: Path, out: dict) -> None:
    """One fused, compiled update step, one eager one and one call of ours under the profiler, each
    after an unprofiled call of the same shape (compilation, graph capture). The update's first: its
    MFU is the goal still open, and the rollout's profile has been taken."""
    from bench.rollout.graphs import GraphRollout

    sizes = common.SIZES["profile"]
    batch, seq = sizes["update"]
    for key, fused, what in (("update", True, "profile_update"), ("update_eager", False, "profile_update_eager")):
        if check.fits(what, f"profile: {key}"):
            policy, _ = update_policy(folder, fused, fused, check.dry)
            step = update_fn(policy, batch, seq)
            step()
            out[key] = {"shape": f"{batch}x{seq}", "fused_and_compiled": fused,
                        **check.measure(f"profile: {key}", _profiled, step)}
            del policy, step
            if common.DEVICE == "cuda":
                torch.cuda.empty_cache()
    if check.fits("profile_rollout", "profile: rollout"):
        model, _ = load(folder)
        (count, n, _), new = common.SIZES["rollout"][0], sizes["new"]
        prompts = random_prompts(count, model.config.vocab_size)
        engine = GraphRollout(static=True, graphs=not check.dry)

        @torch.inference_mode()
        def call():
            return generate_ours(model, prompts, n, new, engine)

        call()
        out["rollout"] = {"shape": f"{count}x{n}x{new}", "decode_steps": new - 1,
                          **check.measure("profile: rollout", _profiled, call)}
        del engine, model
