"""Calibration sweep of the direct world: one warm-up setting per process, as many as cores.

    python benchmarks/calibration_sweep.py benchmarks/calibration_sweep.jsonl OUT.jsonl [--jobs 14]

Each line of the settings file is one experiment: `name`, `steps` (warm-up steps of 64), optional
`seed`, `lr`, `mistake`, `noise`, `batch`, `weights` (domain -> warm-up frequency), `levels` (domain
-> overrides of that domain's `easy` tiny level), `spec` (overrides of the `tiny-llama` student
spec), `grpo_domains` (GRPO experts to train from the base, in order), `budget` (FLOPs per expert)
and `grpo` (GRPO config overrides). Each experiment builds its base with `bench prepare` (no
teacher) in its own cache, prints the calibration figures, then trains each GRPO expert with
`bench run --method grpo` and prints base and final accuracy and the curve. Output: one JSON line per
stage appended to OUT.jsonl, so a sweep cut short still reports what finished. The overrides are
applied in the experiment's own process only (the settings file is the record of what was tried).

The settings file here is the sweep that calibrated the direct profile, run on a 16-core machine
(~7 minutes; C_4d_single_math99 stops at once: its math has too few distinct held-out prompts). It
spells out the code level each experiment used, since easy code was chosen by it. The recipe it
led to is in docs/world.md (The direct-answer world).

`calibration_sweep_graphs.jsonl` is the sweep of the `graphs` domain of `four_domain` (on the same
16-core machine, ~5 minutes): 3 or 4 nodes, with and without reversed edges, on up to three warm-up
seeds. 3 nodes without reversed edges gave GRPO gains
of +40 to +50 points on graphs on all three seeds; 4 nodes or reversed edges gave +1 to +30.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def experiment(cfg: dict, out: Path) -> None:
    os.environ["OPD_BENCH_CACHE"] = f"/tmp/opd-calibration/{cfg['name']}"
    sys.path.insert(0, str(ROOT))
    import torch

    from bench.world import models, profiles

    torch.set_num_threads(1)
    t0 = time.time()

    def emit(**fields) -> None:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"name": cfg["name"], "t": round(time.time() - t0, 1), **fields}) + "\n")

    for domain, level in cfg.get("levels", {}).items():
        importlib.import_module(f"tasks.{domain}").TINY_LEVELS["easy"].update(level)
    if "spec" in cfg:
        models.TINY_SPECS["tiny-llama"] = models.TinySpec(**cfg["spec"])
    warmup = profiles.WarmupConfig(
        student_steps=cfg["steps"], mistake_rate=cfg.get("mistake", 0.5), label_noise=cfg.get("noise", 0.0),
        student_lr=cfg.get("lr", 3e-3), batch_size=cfg.get("batch", 64), seed=cfg.get("seed", 0),
        domain_weights=tuple(cfg.get("weights", {}).items()))
    profiles.PROFILES["direct"] = dataclasses.replace(profiles.PROFILES["direct"], warmup=warmup)
    from bench.world.prepare import prepare
    from bench.run.config import RunConfig
    from bench.run.runner import Runner

    prepared = prepare(profiles.PROFILES["direct"], progress=False, teacher=False)
    emit(stage="base", calibration=prepared.calibration(), wall=prepared.info["wall_s"])
    for domain in cfg.get("grpo_domains", []):
        config = RunConfig(method="grpo", suite=domain, seed=cfg.get("seed", 0), budget_flops=cfg.get("budget", 9e11),
                           eval_size=300, eval_every=0.25, overrides=tuple(cfg.get("grpo", {}).items()),
                           runs_dir=Path(os.environ["OPD_BENCH_CACHE"]) / "runs")
        s = Runner(config, progress=False).run()
        emit(stage="grpo", domain=domain, base=s["base_accuracy"], final=s["final_accuracy"], wall=s["wall_s"],
             curve=[(c["flops"], c["accuracy"]) for c in s["curve"]])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("settings", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=int, default=os.cpu_count())
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a worker: one JSON setting
    args = parser.parse_args()
    if args.one:
        experiment(json.loads(args.one), args.out)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    pending = [line for line in args.settings.read_text().splitlines() if line.strip()]
    running: list[subprocess.Popen] = []
    while pending or running:
        while pending and len(running) < args.jobs:
            running.append(subprocess.Popen([sys.executable, __file__, str(args.settings), str(args.out),
                                             "--one", pending.pop(0)], env=env))
        time.sleep(1)
        running = [p for p in running if p.poll() is None]
    return 0


if __name__ == "__main__":
    sys.exit(main())
