"""A world's warm-up along one constant-learning-rate run, checkpointed: how its base checkpoint is chosen.

    python benchmarks/warmup_curve.py OUT_DIR [--profile tiny] [--steps 1500] [--every 125]
        [--weights graphs=1.5,code=0.75] [--calibrate-from 750] [--teacher] [--resume OUT_DIR/step<N>]
        [--device cpu]

Trains the profile's base student (or, with --teacher, its external teacher) exactly as
`bench prepare` does (`bench.world.warmup.warm_up`, one thread, the profile's recipe with the given
domain weights and `--steps` steps), and every `--every` steps saves the model as a Hugging Face
folder (`OUT_DIR/step<N>/`, with its warm-up ledger rows) and prints one JSON line: step, loss, weights
hash and greedy held-out accuracy and length per domain (200 prompts each). From step
`--calibrate-from` on, a checkpoint also gets `bench prepare`'s calibration (greedy pass@1 on 500,
pass@8 and the mean sample accuracy at temperature 1 on 200) and the base-choosing rule on it
(`base_rule`). The lines go to stdout and to `OUT_DIR/curve.jsonl`. `--device` trains elsewhere than
the profile says: `--profile gpu-small --device cpu` previews the GPU world's warm-up on a CPU (in
fp32 without TF32, so its bytes are not the GPU's).

With the `constant` schedule the learning rate does not depend on the run's length, so checkpoint N
is the same bytes as a warm-up of N steps: a recipe chosen from the curve is rebuilt exactly by
`bench prepare` (docs/world.md, Calibration). The latest checkpoint also keeps the optimiser's state
(`train_state.pt`), so `--resume OUT_DIR/step<N>` continues an interrupted run to `--steps` with the
bytes of an uninterrupted one: a warm-up longer than one sitting (the external teacher's) is built in
several.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)


def _weights(text: str) -> tuple[tuple[str, float], ...]:
    pairs = [part.split("=") for part in text.split(",") if part]
    return tuple((name, float(value)) for name, value in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--profile", default="tiny")
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--every", type=int, default=125)
    parser.add_argument("--weights", type=_weights, default=None, help="domain=weight,... (default: the profile's)")
    parser.add_argument("--calibrate-from", type=int, default=None, help="full calibration from this step on")
    parser.add_argument("--teacher", action="store_true", help="the external teacher's warm-up instead")
    parser.add_argument("--resume", type=Path, default=None, help="a checkpoint of this run to continue from")
    parser.add_argument("--device", default=None, help="train there instead of the profile's device (cpu, cuda)")
    args = parser.parse_args()

    import torch

    from bench.accounting.ledger import Ledger
    from bench.evaluation import Evaluator
    from bench.policy import Policy
    from bench.registry import get_suite
    from bench.world.models import save_model, state_digest
    from bench.world.prepare import _ledger_rows, calibrate
    from bench.world.warmup import WARMUP_LEDGER, WARMUP_SUITE, calibration_figures, train_state, warm_up
    from bench.world.profiles import PROFILES

    profile = PROFILES[args.profile]
    config = dataclasses.replace(profile.warmup, student_steps=args.steps, teacher_steps=args.steps)
    if args.weights is not None:
        mix = "teacher_domain_weights" if args.teacher else "domain_weights"
        config = dataclasses.replace(config, **{mix: args.weights})
    profile = dataclasses.replace(profile, warmup=config, device=args.device or profile.device)
    suite = get_suite(WARMUP_SUITE, config.difficulty, profile.task_format)
    evaluator = Evaluator(suite, 200, profile.eval_max_new_tokens)
    args.out.mkdir(parents=True, exist_ok=True)
    ledger, started = Ledger(), time.perf_counter()
    part = "external" if args.teacher else "base"
    category = WARMUP_LEDGER[part][0]
    resume, earlier_rows = None, []
    if args.resume is not None:
        resume = torch.load(args.resume / "train_state.pt", weights_only=False)
        earlier_rows = json.loads((args.resume / "ledger_rows.json").read_text())
    kept = [args.resume] if args.resume else []  # the checkpoint that holds train_state.pt

    def on_step(step: int, policy: Policy, loss: float) -> None:
        if step % args.every:
            return
        result = evaluator.evaluate(policy)
        row = {"step": step, "loss": round(loss, 4), "wall_s": round(time.perf_counter() - started),
               "hash": state_digest(policy._model),
               "greedy": {d: round(a, 3) for d, a in result["domain_accuracy"].items()},
               "length": {d: round(n, 1) for d, n in result["domain_mean_length"].items()}}
        if not args.teacher and args.calibrate_from is not None and step >= args.calibrate_from:
            rows = calibrate(policy, suite, profile)
            row.update(calibration_figures(rows))
        folder = args.out / f"step{step}"
        save_model(policy._model, policy._tokenizer, folder)
        rows = [r for r in _ledger_rows(ledger) if r["category"] == category]  # the warm-up's, not the evaluations'
        (folder / "ledger_rows.json").write_text(json.dumps(earlier_rows + rows))
        torch.save(train_state(policy, step), folder / "train_state.pt")
        for old in kept:  # optimiser state is twice the weights: keep the latest only
            (old / "train_state.pt").unlink(missing_ok=True)
        kept[:] = [folder]
        with (args.out / "curve.jsonl").open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)

    warm_up(profile, part, ledger, progress=False, on_step=on_step, resume=resume)  # as `bench prepare` trains it


if __name__ == "__main__":
    main()
