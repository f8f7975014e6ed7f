"""lm-eval round trip: an exported suite, scored by lm-evaluation-harness's own `hf` model, gives the
benchmark's held-out accuracy, completion for completion.

Two local models are scored both ways on the first N held-out problems of each domain of `math_code`
(tiny format), fully offline:
- a tiny student trained for a few seconds on those very problems' answers, so that its accuracy is
  far from 0 and from 1 and any disagreement in prompts, decoding or scoring shows up;
- the untrained tiny model, which never emits EOS: every completion runs to the token cap, so the
  export's `max_gen_toks` and stop rule must be the evaluator's.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import subprocess
import sys

import pytest
import torch
import yaml

from bench.update import sft_step
from bench.evaluation import Evaluator
from bench.accounting.ledger import Ledger
from bench.world.models import TINY_SPECS, build_tiny, load_model, save_model, tiny_model_dir
from bench.policy import Policy
from bench.world.profiles import PROFILES
from tasks import get_suite
from tasks.lm_eval_export import MAX_GEN_TOKS, export, lm_eval_command, task_name

lm_eval = pytest.importorskip("lm_eval")
from lm_eval.tasks import TaskManager  # noqa: E402

N = 16  # held-out problems per domain, both harnesses
MAX_NEW_TOKENS = PROFILES["smoke"].eval_max_new_tokens


@pytest.fixture(scope="module")
def suite():
    return get_suite("math_code", "easy", "tiny")


@pytest.fixture(scope="module")
def exported(suite, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_eval_tasks")
    export(suite, out, max_gen_toks=MAX_NEW_TOKENS)
    return out


@pytest.fixture(scope="module")
def trained_model(suite, tmp_path_factory):
    """The tiny student after 90 SFT steps on the first N held-out answers of each domain (memorised:
    a model that is partly right, so that matching completions mean something)."""
    model, tokenizer = build_tiny(TINY_SPECS["tiny-llama"])
    policy = Policy("student", model, tokenizer, ledger=Ledger())
    pool = [p for d in suite.domains for p in suite.heldout(d)[:N]]
    rng, steps = random.Random(0), 90
    torch.manual_seed(0)
    for step in range(steps):
        batch = rng.sample(pool, 32)
        lr = 1e-2 * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        sft_step(policy, [p.prompt for p in batch], [p.answer for p in batch], lr=lr)
    folder = tmp_path_factory.mktemp("trained") / "model"
    save_model(model, tokenizer, folder)
    return folder


def score_with_lm_eval(folder, suite, include_path) -> tuple[dict[str, float], float, dict[str, list[str]]]:
    """lm-eval's per-domain accuracy, group accuracy and per-document completions for a model folder."""
    name = task_name(suite)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("HF_DATASETS_OFFLINE", "1")
        out = lm_eval.simple_evaluate(
            model="hf",
            # Raw tiny-format prompts, exactly as the benchmark feeds them: no BOS, no chat template.
            model_args=f"pretrained={folder},dtype=float32,device=cpu,add_bos_token=False",
            tasks=[name],
            task_manager=TaskManager(include_path=str(include_path), include_defaults=False),
            limit=N,
            batch_size=N,
            apply_chat_template=False,
            log_samples=True,
            bootstrap_iters=0,
            verbosity="ERROR",
        )
    accuracy = {d: out["results"][f"{name}_{d}"]["acc,none"] for d in suite.domains}
    completions = {}
    for d in suite.domains:
        samples = sorted(out["samples"][f"{name}_{d}"], key=lambda s: s["doc_id"])
        completions[d] = [s["resps"][0][0] for s in samples]
    return accuracy, out["results"][name]["acc,none"], completions


def score_with_bench(folder, suite) -> tuple[dict, dict[str, list[str]], dict[str, list[int]]]:
    """The benchmark's own greedy evaluation (bench.evaluation.Evaluator) of the same model."""
    policy = Policy("student", *load_model(folder), ledger=Ledger(), trainable=False)
    evaluator = Evaluator(suite, N, MAX_NEW_TOKENS)
    texts, lengths = {}, {}
    for d in suite.domains:
        texts[d], lengths[d] = evaluator.completions(policy, evaluator.problems[d])
    return evaluator.evaluate(policy), texts, lengths


def test_lm_eval_accuracy_equals_bench_accuracy(trained_model, suite, exported):
    lm_acc, lm_group, lm_texts = score_with_lm_eval(trained_model, suite, exported)
    ours, our_texts, _ = score_with_bench(trained_model, suite)
    right = round(ours["accuracy"] * len(suite.domains) * N)
    assert 3 <= right <= len(suite.domains) * N - 3, f"the trained model should be partly right, got {ours}"
    for d in suite.domains:
        assert len(lm_texts[d]) == N
        assert lm_texts[d] == our_texts[d], f"{d}: lm-eval and bench generated different completions"
        assert lm_acc[d] == pytest.approx(ours["domain_accuracy"][d], abs=1e-12)
    assert lm_group == pytest.approx(ours["accuracy"], abs=1e-12)


def test_lm_eval_stops_where_bench_stops(suite, exported):
    folder = tiny_model_dir("tiny-llama")  # random init: never emits EOS
    _, _, lm_texts = score_with_lm_eval(folder, suite, exported)
    _, our_texts, our_lengths = score_with_bench(folder, suite)
    for d in suite.domains:
        assert max(our_lengths[d]) == MAX_NEW_TOKENS  # the cap is reached, so it is tested
        assert lm_texts[d] == our_texts[d]


# Runs lm-eval's own command line and reports which `tasks` package the export's hooks imported.
_LM_EVAL_MAIN = """import runpy, sys
sys.argv = ["lm_eval", *sys.argv[1:]]
try:
    runpy.run_module("lm_eval", run_name="__main__")
finally:
    print("TASKS_FROM", sys.modules["tasks"].__file__)
"""


def test_copied_export_runs_from_the_shell(trained_model, suite, tmp_path):
    """Export, move the folder elsewhere (the original is gone), run the printed `lm_eval` command
    in another process and directory: it reads its own documents and verifiers and gives our accuracy."""
    first = tmp_path / "first"
    export(suite, first, max_gen_toks=MAX_NEW_TOKENS)
    moved = tmp_path / "elsewhere" / "exported"
    shutil.copytree(first, moved)
    shutil.rmtree(first)
    command = lm_eval_command(suite, moved, str(trained_model)).split()
    assert command[:5] == ["lm_eval", "--model", "hf", "--model_args", f"pretrained={trained_model},add_bos_token=False"]
    results_dir = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-c", _LM_EVAL_MAIN, *command[1:], "--device", "cpu", "--limit", str(N),
         "--output_path", str(results_dir)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    tasks_from = done.stdout.split("TASKS_FROM", 1)[1].split()[0]
    assert tasks_from.startswith(str(moved)), tasks_from  # the shipped copy, not this checkout
    results = json.loads(next(results_dir.rglob("results_*.json")).read_text())["results"]
    ours, _, _ = score_with_bench(trained_model, suite)
    assert results[task_name(suite)]["acc,none"] == pytest.approx(ours["accuracy"], abs=1e-12)


def test_export_decodes_like_the_evaluator(suite, exported):
    """Greedy, EOS-only stop, the profile's token cap; the default caps are the profiles' own."""
    for profile in ("direct", "tiny", "hf"):
        assert MAX_GEN_TOKS[PROFILES[profile].task_format] == PROFILES[profile].eval_max_new_tokens
    for d in suite.domains:
        config = yaml.safe_load(
            (exported / f"{task_name(suite)}_{d}.yaml").read_text().replace("!function ", "")
        )
        assert config["generation_kwargs"] == {
            "until": [], "do_sample": False, "temperature": 0.0, "max_gen_toks": MAX_NEW_TOKENS,
        }


def test_cli_export_lm_eval(tmp_path):
    from typer.testing import CliRunner

    from bench.cli import app

    out = tmp_path / "tasks"
    result = CliRunner().invoke(app, ["export-lm-eval", "math_code", "--out", str(out), "--format", "tiny"])
    assert result.exit_code == 0, result.output
    name = "opd_bench_math_code_easy_tiny"
    printed = " ".join(result.output.split())  # rich wraps long lines
    assert f"--tasks {name}" in printed and "--model hf --model_args pretrained=" in printed
    assert f"--include_path {out}" in printed
    per_domain = {f"{name}_{d}.{ext}" for d in ("math", "code") for ext in ("yaml", "jsonl")}
    expected = {f"{name}.yaml", "utils.py"} | per_domain
    assert expected <= {p.name for p in out.iterdir()}
    assert len((out / f"{name}_code.jsonl").read_text().splitlines()) == 1000
    bad = CliRunner().invoke(app, ["export-lm-eval", "math_cod", "--out", str(out)])
    assert bad.exit_code == 2 and "math_code" in (bad.stderr or bad.output)
