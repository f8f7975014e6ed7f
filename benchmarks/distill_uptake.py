"""How a student takes up its GRPO expert under multi-teacher OPD, step by step, on one domain.

    python benchmarks/distill_uptake.py OUT_DIR [--seeds 0,1,2] [--steps 300] [--every 25]
        [--profile direct] [--domain math] [--expert-flops 9e11] [--eval-size 1000]

Per seed, one `opd-multi` run on the domain's suite: its expert trained for `--expert-flops` counted
FLOPs without early stop (the learning test's expert, docs/world.md, Learning checks), then the
fixed distillation schedule of `--steps` steps, with held-out accuracy (greedy, `--eval-size`
prompts) every `--every` steps, the student saved at each. Then the greedy answers of the base, the
expert (from the run's last checkpoint, taken after every step), and the student at each of those
evaluations, to the same held-out prompts: which prompts each gets right, and whether the final
student's answer is the expert's. Writes `OUT_DIR/seed<N>.json` per seed (a seed already there is
read, not run again), `OUT_DIR/uptake.png` (held-out accuracy against distillation steps beside the
expert's and the base's; the shares of the prompts the expert gained on the base, lost, and kept
(both right) that the student gets right; the per-token reverse KL to the expert) and prints one
line per seed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench  # noqa: E402,F401  (sets OMP_WAIT_POLICY before torch loads)


def run_seed(args: argparse.Namespace, seed: int) -> dict:
    import torch

    from bench.accounting.ledger import Ledger
    from bench.evaluation import Evaluator
    from bench.policy import Policy
    from bench.run import checkpoint
    from bench.run.config import RunConfig
    from bench.run.runner import Runner
    from bench.world.models import load_model
    from bench.world.prepare import prepare

    torch.set_num_threads(1)
    # a budget whose experts' share is exactly --expert-flops and whose rest the schedule never reaches
    budget = 20 * args.expert_flops
    config = RunConfig(method="opd-multi", suite=args.domain, profile=args.profile, budget_flops=budget,
                       runs_dir=args.out / "runs", seed=seed, eval_size=args.eval_size, eval_every=1.0,
                       eval_early=(), distill_eval_every=args.every, checkpoint_every_s=0.0, save_milestones=True,
                       overrides=(("expert_patience", "0"), ("expert_fraction", repr(args.expert_flops / budget)),
                                  ("distill.steps", str(args.steps))))
    run_dir = config.runs_dir / Runner.run_id_for(config)
    # a run stopped midway continues from its last checkpoint (one after every step)
    interrupted = (run_dir / "config.json").is_file() and not (run_dir / "summary.json").is_file()
    runner = Runner(config, resume=interrupted, progress=False)
    summary = runner.run()
    evaluator = Evaluator(runner.suite, args.eval_size, runner.profile.eval_max_new_tokens)
    problems = evaluator.problems[args.domain]
    ledger = Ledger(args.out / "runs" / f"answers-s{seed}.jsonl")

    def answers(model_and_tokenizer: tuple, state: dict | None = None) -> tuple[list[str], list[float]]:
        model, tokenizer = model_and_tokenizer
        if state is not None:
            model.load_state_dict(state)
        policy = Policy("greedy", model, tokenizer, ledger=ledger, trainable=False)
        texts = evaluator.completions(policy, problems)[0]
        return texts, runner.suite.score_many(problems, texts)

    base_model = prepare(runner.profile, progress=False, teacher=False).load_student()  # its hash checked
    base, base_ok = answers(base_model)
    expert_state = checkpoint.load(runner.dir).context["policy_states"][f"expert:{args.domain}"]["model"]
    expert, expert_ok = answers(base_model, expert_state)
    steps = [s for s in summary["steps"] if s.get("phase") == "distill"]
    start = max(s["flops"] for s in summary["steps"] if s.get("phase") != "distill")  # the experts' end
    curve = []
    for point in summary["curve"]:
        if point["flops"] >= start:
            student, student_ok = answers(load_model(runner.dir / point["model_dir"]))  # the last: the final student
            curve.append({"steps": sum(s["flops"] <= point["flops"] for s in steps), "accuracy": point["accuracy"],
                          "right": "".join("1" if r else "0" for r in student_ok)})
    return {
        "seed": seed, "profile": args.profile, "domain": args.domain, "schedule": args.steps, "steps": len(steps),
        "expert_flops": start, "distill_flops": steps[-1]["flops"] - start,
        "curve": curve,
        "reverse_kl": [s["reverse_kl"] for s in steps],
        "prompts": [{"base": bool(b), "expert": bool(e), "student": bool(s), "base_is_expert": bt == et,
                     "student_is_expert": st == et}
                    for b, e, s, bt, et, st in zip(base_ok, expert_ok, student_ok, base, expert, student, strict=True)],
    }


def groups(prompts: list[dict]) -> tuple[list[int], list[int], list[int]]:
    """The indices of the prompts the expert gained on the base, of those it lost, and of those both
    get right."""
    return ([i for i, p in enumerate(prompts) if p["expert"] and not p["base"]],
            [i for i, p in enumerate(prompts) if p["base"] and not p["expert"]],
            [i for i, p in enumerate(prompts) if p["base"] and p["expert"]])


def changed(record: dict, point: dict) -> tuple[float, float, float]:
    """Of the prompts the expert gained, lost and kept (`groups`), the shares (%) the student at this
    curve point gets right."""
    return tuple(100 * sum(point["right"][i] == "1" for i in part) / len(part) if part else float("nan")
                 for part in groups(record["prompts"]))


def describe(record: dict) -> str:
    prompts = record["prompts"]
    n = len(prompts)

    def share(key: str, where=lambda p: True) -> float:
        chosen = [p for p in prompts if where(p)]
        return 100 * sum(p[key] for p in chosen) / len(chosen) if chosen else float("nan")

    kl = record["reverse_kl"]
    third = max(1, len(kl) // 3)
    gained, lost, _ = (len(part) for part in groups(prompts))
    return (f"seed {record['seed']}: base {share('base'):.1f}%, expert {share('expert'):.1f}% "
            f"(+{gained} / -{lost} of {n} prompts against the base), student after {record['steps']} steps "
            f"{share('student'):.1f}%; the expert's answer: base {share('base_is_expert'):.1f}%, student "
            f"{share('student_is_expert'):.1f}% ({share('student_is_expert', lambda p: p['expert']):.1f}% where "
            f"the expert is right, {share('student_is_expert', lambda p: not p['expert']):.1f}% where it is "
            f"wrong); reverse KL {sum(kl[:third]) / third:.3f} -> {sum(kl[-third:]) / third:.3f} (first -> last "
            f"third); of the prompts the expert gained, lost, and shares with the base, the student gets right "
            + ", ".join("{:.0f}%, {:.0f}% and {:.0f}% after {} steps".format(*changed(record, point), point["steps"])
                        for point in record["curve"][1:2] + record["curve"][-1:])
            + f"; distillation {record['distill_flops']:.2e} FLOPs, "
            f"{record['distill_flops'] / record['expert_flops']:.2f}x the expert's {record['expert_flops']:.2e}")


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    curve = pd.DataFrame([{"seed": str(r["seed"]), "steps": p["steps"], "accuracy": 100 * p["accuracy"],
                           **dict(zip(("gained", "lost", "kept"), changed(r, p)))}
                          for r in records for p in r["curve"]])
    kl = pd.DataFrame([{"seed": str(r["seed"]), "steps": i + 1, "reverse KL": v}
                       for r in records for i, v in enumerate(pd.Series(r["reverse_kl"]).rolling(10, 1).mean())])
    palette = dict(zip(sorted(curve["seed"].unique()), sns.color_palette("colorblind")))
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.5))
    sns.lineplot(curve, x="steps", y="accuracy", hue="seed", palette=palette, marker="o", ax=left)
    for r in records:
        expert = 100 * sum(p["expert"] for p in r["prompts"]) / len(r["prompts"])
        left.axhline(expert, ls="--", lw=1, color=palette[str(r["seed"])])
    base = 100 * sum(p["base"] for p in records[0]["prompts"]) / len(records[0]["prompts"])
    left.axhline(base, ls=":", lw=1, color="grey")
    left.set(xlabel="distillation steps", ylabel="held-out accuracy (%)",
             title="student (line), its expert (dashed), the base (dotted)")
    changes = curve.melt(id_vars=["seed", "steps"], value_vars=["gained", "lost", "kept"], var_name="prompts",
                         value_name="right")
    sns.lineplot(changes, x="steps", y="right", hue="seed", style="prompts", palette=palette, ax=middle)
    middle.set(xlabel="distillation steps", ylabel="student right (%)",
               title="on the prompts the expert gained, lost and kept")
    sns.lineplot(kl, x="steps", y="reverse KL", hue="seed", palette=palette, ax=right)
    right.set(yscale="log", xlabel="distillation steps", ylabel="per-token reverse KL to the expert (nats)",
              title="on the student's own samples, mean of 10 steps")
    fig.suptitle(f"opd-multi, {records[0]['profile']} world, {records[0]['domain']}: "
                 "the expert distilled into the base")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--profile", default="direct")
    parser.add_argument("--domain", default="math")
    parser.add_argument("--expert-flops", type=float, default=9e11)
    parser.add_argument("--eval-size", type=int, default=1000)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = []
    for seed in (int(s) for s in args.seeds.split(",")):
        path = args.out / f"seed{seed}.json"
        if not path.is_file():
            path.write_text(json.dumps(run_seed(args, seed)))
        record = json.loads(path.read_text())
        asked = {"profile": args.profile, "domain": args.domain, "schedule": args.steps}
        if {key: record[key] for key in asked} != asked:
            raise SystemExit(f"{path} is a run of {[record[key] for key in asked]}, not of {list(asked.values())}: "
                             "choose another OUT_DIR")
        records.append(record)
        print(describe(records[-1]), flush=True)
    plot(records, args.out / "uptake.png")


if __name__ == "__main__":
    main()
