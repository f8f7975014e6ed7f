"""`bench eval`: a run's final student scored through lm-eval's Python API gives the accuracy of the
benchmark's own greedy evaluator on the same suite, prompts and problems."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from lm_eval.models.huggingface import HFLM
from tokenizers import processors
from typer.testing import CliRunner

from bench.accounting.ledger import Ledger
from bench.cli import app
from bench.errors import RunError
from bench.evaluation import Evaluator
from bench.policy import CHAT_DATE, Policy
from bench.registry import get_suite
from bench.run.harness import eval_dtype, metric_rows
from bench.run.runner import Runner
from bench.update import sft_step
from bench.world.models import load_model, resolve_model, save_model, tiny_model_dir
from tasks.lm_eval_export import MAX_GEN_TOKS
from tests.methods.support import run_config, run_method

pytest.importorskip("lm_eval")
N = 16  # held-out problems per domain


@pytest.fixture(scope="module")
def run_dir(fast_profile, tmp_path_factory):
    """A finished sft run on the fast profile: `runs/<run_id>/final/` holds its student."""
    runs = tmp_path_factory.mktemp("runs")
    summary = run_method(fast_profile, runs, "sft", 4e10, keep="all", prompts_per_step=8)
    return runs / summary["run_id"]


@pytest.fixture(scope="module")
def partly_right(run_dir, fast_profile, tmp_path_factory):
    """The run's student after a few SFT steps on the first N held-out answers of each domain: partly
    right, so that equal accuracies mean equal completions, not two zeros."""
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    model, tokenizer = load_model(run_dir / "final")
    policy = Policy("student", model, tokenizer, ledger=Ledger())
    pool = [p for d in suite.domains for p in suite.heldout(d)[:N]]
    rng = random.Random(0)
    torch.manual_seed(0)
    steps = 90  # the recipe of tests/tasks/test_lm_eval_roundtrip.py
    for step in range(steps):
        batch = rng.sample(pool, 32)
        lr = 1e-2 * (0.1 + 0.45 * (1 + math.cos(math.pi * step / steps)))
        sft_step(policy, [p.prompt for p in batch], [p.answer for p in batch], lr=lr)
    folder = tmp_path_factory.mktemp("partly_right") / "model"
    save_model(model, tokenizer, folder)
    return folder


def bench_accuracy(folder, suite, max_new_tokens: int) -> dict:
    policy = Policy("student", *load_model(folder), ledger=Ledger(), trainable=False)
    return Evaluator(suite, N, max_new_tokens).evaluate(policy)


def eval_folder(folder, profile, tmp_path) -> dict:
    """`bench eval FOLDER --profile P --limit N --out ...`'s JSON record (the command must succeed)."""
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(app, ["eval", str(folder), "--profile", profile.name, "--limit", str(N),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text())


def test_eval_of_a_run_equals_the_evaluator(run_dir, fast_profile, tmp_path):
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--limit", str(N), "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    assert scores["suite"] == "math_code-easy-tiny" and scores["limit"] == N
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    ours = bench_accuracy(run_dir / "final", suite, fast_profile.eval_max_new_tokens)
    assert scores["domain_accuracy"] == pytest.approx(ours["domain_accuracy"], abs=1e-12)
    assert scores["accuracy"] == pytest.approx(ours["accuracy"], abs=1e-12)
    # the run's own last evaluation (eval_size 16) scored the same final student
    summary = json.loads((run_dir / "summary.json").read_text())
    assert scores["accuracy"] == pytest.approx(summary["final_accuracy"], abs=1e-12)
    assert "suite accuracy" in result.output


def test_eval_of_a_partly_right_model_folder_equals_the_evaluator(partly_right, fast_profile, tmp_path):
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    ours = bench_accuracy(partly_right, suite, fast_profile.eval_max_new_tokens)
    right = round(ours["accuracy"] * len(suite.domains) * N)
    assert 3 <= right <= len(suite.domains) * N - 3, f"the model should be partly right, got {ours}"
    scores = eval_folder(partly_right, fast_profile, tmp_path)
    assert scores["domain_accuracy"] == pytest.approx(ours["domain_accuracy"], abs=1e-12)
    assert scores["accuracy"] == pytest.approx(ours["accuracy"], abs=1e-12)


def test_eval_decodes_as_the_benchmark_whatever_the_folders_generation_config(partly_right, fast_profile, tmp_path):
    """A folder whose generation_config.json sets a repetition penalty and another EOS id (as chat models
    ship them) is scored as the benchmark's evaluator scores it: greedy, the tokenizer's EOS only."""
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    ours = bench_accuracy(partly_right, suite, fast_profile.eval_max_new_tokens)
    folder = tmp_path / "model"
    shutil.copytree(partly_right, folder)
    generation = json.loads((folder / "generation_config.json").read_text())
    tokenizer = load_model(partly_right)[1]
    digit = tokenizer.convert_tokens_to_ids("1")  # answers are numbers: this stops many early
    assert digit != tokenizer.unk_token_id
    generation.update(repetition_penalty=1.3, eos_token_id=[tokenizer.eos_token_id, digit])
    (folder / "generation_config.json").write_text(json.dumps(generation))
    scores = eval_folder(folder, fast_profile, tmp_path)
    assert scores["domain_accuracy"] == pytest.approx(ours["domain_accuracy"], abs=1e-12)
    # answer for answer: a penalty could change completions and leave the accuracy where it was
    policy = Policy("student", *load_model(partly_right), ledger=Ledger(), trainable=False)
    evaluator = Evaluator(suite, N, fast_profile.eval_max_new_tokens)
    for domain in suite.domains:
        texts, _ = evaluator.completions(policy, suite.heldout(domain)[:N])
        (task,) = [t for t in scores["samples"] if t.endswith(f"_{domain}")]
        assert [row["completion"] for row in scores["samples"][task]] == texts


def test_eval_of_a_run_takes_its_eval_size_cap_and_device(run_dir, partly_right, fast_profile, tmp_path):
    """A run made with `--eval-size 4 --max-new-tokens 2` is scored on 4 problems per domain with
    answers of at most 2 tokens, as its record says; options given still win."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    shutil.rmtree(run / "final")
    shutil.copytree(partly_right, run / "final")
    config, summary = json.loads((run / "config.json").read_text()), json.loads((run / "summary.json").read_text())
    config["eval_size"] = summary["eval_size"] = 4
    summary["settings"]["eval_max_new_tokens"] = 2
    (run / "config.json").write_text(json.dumps(config))
    (run / "summary.json").write_text(json.dumps(summary))
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(app, ["eval", str(run), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "defaults from the run: --limit 4, --max-new-tokens 2, --device cpu" in result.output
    scores = json.loads(out.read_text())
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    policy = Policy("student", *load_model(partly_right), ledger=Ledger(), trainable=False)
    for domain in suite.domains:
        problems = suite.heldout(domain)[:4]
        texts, _ = Evaluator(suite, 4, 2).completions(policy, problems)
        assert texts != Evaluator(suite, 4, fast_profile.eval_max_new_tokens).completions(policy, problems)[0]
        assert [s["completion"] for s in scores["samples"][f"opd_bench_math_code_easy_tiny_{domain}"]] == texts
    assert scores["limit"] == 4
    assert scores["settings"] == {"max_new_tokens": 2, "device": "cpu", "dtype": "float32", "batch_size": 16}
    result = CliRunner().invoke(app, ["eval", str(run), "--limit", "2", "--max-new-tokens", "3", "--device", "cpu",
                                      "--out", str(out)])
    assert result.exit_code == 0 and "defaults from the run" not in result.output, result.output
    assert json.loads(out.read_text())["limit"] == 2
    if not torch.cuda.is_available():  # a run trained on CUDA is scored on CUDA unless told otherwise
        summary["settings"]["device"] = "cuda"
        (run / "summary.json").write_text(json.dumps(summary))
        result = CliRunner().invoke(app, ["eval", str(run)])
        assert result.exit_code == 2 and "--device cpu scores it here" in (result.stderr or result.output)


# Llama 3.2's way of asking for today's date: a prompt's tokens would change from day to day
DATED = ("{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}{% endif %}"
         "{% for m in messages %}User: {{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}Assistant ({{ date_string }}):{% endif %}")
# Mistral Small 3's: it calls `strftime_now` itself
TODAY = ("{% for m in messages %}[SYSTEM]{{ strftime_now('%Y-%m-%d') }}[INST]{{ m['content'] }}[/INST]{% endfor %}")
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def chat_folder(tmp_path, template: str | None):
    """The tiny Llama with this chat template and ChatML's tokens, or with none and a tokenizer that adds
    its BOS (Llama 3's base models)."""
    model, tokenizer = load_model(tiny_model_dir("tiny-llama"))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = template
    if template is None:  # the tokenizer's own special tokens: BOS before the text
        tokenizer._tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{tokenizer.bos_token} $A", special_tokens=[(tokenizer.bos_token, tokenizer.bos_token_id)])
    model.config.max_position_embeddings = 4096  # hf prompts are long: no truncation on either side
    folder = tmp_path / "chat-model"
    save_model(model, tokenizer, folder)
    return folder, tokenizer


@pytest.mark.parametrize("template", [DATED, TODAY, CHATML, None])
def test_eval_of_chat_prompts_feeds_and_decodes_as_the_benchmark(tmp_path, template, monkeypatch):
    """hf-format prompts through a tokenizer with a chat template (one that asks for today's date, which
    both are given as the same fixed day; ChatML, whose turns end with a special token), or without one
    but with a tokenizer that adds its BOS (Llama 3's base models): lm-eval sees the prompt the
    benchmark's policy would encode, the BOS once, stops where the policy stops and generates the same
    completions."""
    folder, tokenizer = chat_folder(tmp_path, template)
    out, cap, limit = tmp_path / "scores.json", 8, 4
    args = ["eval", str(folder), "--suite", "strings", "--profile", "hf", "--limit", str(limit),
            "--max-new-tokens", str(cap), "--out", str(out), "--batch-size", "1"]
    fed, stops, generate = [], set(), HFLM._model_generate

    def recorded(self, context, *args, **kwargs):  # the token ids lm-eval feeds the model, one prompt a call
        fed.extend(context.tolist())
        stops.add(tuple(self.model.generation_config.eos_token_id))
        return generate(self, context, *args, **kwargs)

    monkeypatch.setattr(HFLM, "_model_generate", recorded)
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    samples = json.loads(out.read_text())["samples"]["opd_bench_strings_easy_hf_strings"]
    suite = get_suite("strings", "easy", "hf")
    policy = Policy("student", *load_model(folder), ledger=Ledger(), trainable=False, chat=True)
    problems = suite.heldout("strings")[:limit]
    texts, _ = Evaluator(suite, limit, cap).completions(policy, problems)
    encoded = [policy.encode_prompt(p.prompt) for p in problems]
    assert sorted(fed) == sorted(encoded)  # lm-eval orders its requests by length
    assert stops == {policy.stop_ids} and len(policy.stop_ids) == 1 + (template == CHATML)
    if template is None:
        assert [s["prompt"] for s in samples] == [p.prompt for p in problems]
        assert all(ids[0] == tokenizer.bos_token_id and ids.count(tokenizer.bos_token_id) == 1 for ids in encoded)
        assert encoded == [[tokenizer.bos_token_id] + policy.encode(s["prompt"]) for s in samples]
    else:
        if template == DATED:
            assert [s["prompt"] for s in samples] == [f"User: {p.prompt}\nAssistant ({CHAT_DATE}):" for p in problems]
        if template == TODAY:
            assert [s["prompt"] for s in samples] == [f"[SYSTEM]2024-07-26[INST]{p.prompt}[/INST]" for p in problems]
        assert encoded == [policy.encode(s["prompt"]) for s in samples]
    assert [s["completion"] for s in samples] == texts


# lm-eval's own command line, printing the stop tokens each `generate` call is given and the prompts it feeds
_LM_EVAL_CLI = """import json, runpy, sys
from transformers.generation.utils import GenerationMixin
generate = GenerationMixin.generate
def recorded(self, *args, **kwargs):
    print("STOPS", json.dumps(kwargs.get("eos_token_id")))
    for ids, mask in zip(kwargs["input_ids"].tolist(), kwargs["attention_mask"].tolist()):
        print("FED", json.dumps([i for i, m in zip(ids, mask) if m]))  # padding left out
    return generate(self, *args, **kwargs)
GenerationMixin.generate = recorded
sys.argv = ["lm_eval", *sys.argv[1:]]
runpy.run_module("lm_eval", run_name="__main__")
"""


@pytest.mark.parametrize("template", [DATED, CHATML, None])
def test_the_printed_lm_eval_command_of_a_model_feeds_and_stops_as_the_benchmark(tmp_path, template):
    """`bench export-lm-eval --model DIR` prints the command for that model's tokenizer: lm-eval's own
    command line then generates the completions the benchmark's evaluator does (prompt tokens, BOS,
    the fixed day) and stops at a policy's stop tokens (ChatML's end of turn as well as EOS)."""
    folder, tokenizer = chat_folder(tmp_path, template)
    exported, limit = tmp_path / "tasks", 2
    shown = CliRunner().invoke(app, ["export-lm-eval", "strings", "--out", str(exported), "--model", str(folder)])
    assert shown.exit_code == 0, shown.output
    command = shlex.split(shown.output.strip().splitlines()[-1])
    assert command[0] == "lm_eval" and ("--apply_chat_template" in command) == (template is not None)
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", _LM_EVAL_CLI, *command[1:], "--device", "cpu", "--limit", str(limit),
                           "--output_path", str(results), "--log_samples"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    policy = Policy("student", *load_model(folder), ledger=Ledger(), trainable=False, chat=True)
    stops = {tuple(json.loads(line.split(" ", 1)[1])) for line in done.stdout.splitlines() if line.startswith("STOPS ")}
    assert stops == {policy.stop_ids} and len(policy.stop_ids) == 1 + (template == CHATML)
    suite = get_suite("strings", "easy", "hf")
    problems = suite.heldout("strings")[:limit]
    fed = [json.loads(line.split(" ", 1)[1]) for line in done.stdout.splitlines() if line.startswith("FED ")]
    assert sorted(fed) == sorted(policy.encode_prompt(p.prompt) for p in problems)  # template, BOS, the day
    texts, _ = Evaluator(suite, limit, MAX_GEN_TOKS["hf"]).completions(policy, problems)
    samples = [json.loads(line) for f in results.rglob("samples_*.jsonl") for line in f.read_text().splitlines()]
    assert [s["resps"][0][0] for s in sorted(samples, key=lambda s: s["doc_id"])] == texts


def test_eval_runs_a_task_the_user_names(run_dir, tmp_path):
    extra = tmp_path / "extra"
    assert CliRunner().invoke(app, ["export-lm-eval", "strings", "--out", str(extra), "--format", "tiny"]).exit_code == 0
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--limit", "4", "--include-path", str(extra),
                                      "--task", "opd_bench_strings_easy_tiny", "--out", str(out)])
    assert result.exit_code == 0, result.output
    results = json.loads(out.read_text())["results"]
    assert 0.0 <= results["opd_bench_strings_easy_tiny"]["acc,none"] <= 1.0
    assert {"opd_bench_math_code_easy_tiny", "opd_bench_strings_easy_tiny"} <= {t for t, _, _ in metric_rows(results)}


@pytest.mark.parametrize("make_args, says", [
    (lambda run, tmp: ["eval", str(tmp / "nowhere")], "no model folder"),
    (lambda run, tmp: ["eval", str(run), "--task", "opd_bench_math_code_easy_tin"], "did you mean"),
    (lambda run, tmp: ["eval", str(run), "--suite", "math_cod"], "did you mean"),
    (lambda run, tmp: ["eval", str(run), "--limit", "0"], "--limit"),
    (lambda run, tmp: ["eval", str(run), "--max-new-tokens", "100000"], "leaves no room for a prompt"),
    (lambda run, tmp: ["eval", "tiny-llama", "--profile", "hf"], "the hf profile's, or --max-new-tokens"),
])
def test_eval_bad_input_is_one_line_and_exit_2(run_dir, tmp_path, make_args, says):
    result = CliRunner().invoke(app, make_args(run_dir, tmp_path))
    assert result.exit_code == 2, result.output
    message = result.stderr or result.output
    assert says in message and "Traceback" not in message


@pytest.mark.parametrize("breaks, says", [
    (lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:1000]), "SafetensorError"),
    (lambda f: [(f / name).unlink() for name in ("tokenizer.json", "tokenizer_config.json")], "tokenizer"),
    (lambda f: (f / "model.safetensors").unlink(), "model.safetensors"),
])
@pytest.mark.parametrize("profile", ["tiny", "hf"])
def test_eval_of_a_broken_model_folder_is_one_line(tmp_path, breaks, says, profile):
    """Truncated weights, no tokenizer, no weights: one line, as `bench run` says it, not lm-eval's traceback."""
    folder = tmp_path / "model"
    save_model(*load_model(tiny_model_dir("tiny-llama")), folder)
    breaks(folder)
    result = CliRunner().invoke(app, ["eval", str(folder), "--profile", profile, "--limit", "1",
                                      "--max-new-tokens", "8"])
    assert result.exit_code == 2, result.output
    message = result.stderr or result.output
    assert message.startswith(f"error: cannot load the model in {folder}") and says in message, message
    assert len(message.strip().splitlines()) == 1


def test_an_unknown_lm_eval_task_is_named_with_the_closest_few_not_every_task(monkeypatch, tmp_path):
    import lm_eval.tasks

    from bench.errors import UnknownNameError
    from bench.run.harness import evaluate

    class Manager:  # lm-eval's own index, as large as it is, without the seconds it takes to build
        all_tasks = ["gsm8k", "gsm8k_cot", "mmlu", *(f"task_{i:05d}" for i in range(14000))]

        def __init__(self, **kwargs):
            pass

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", Manager)
    with pytest.raises(UnknownNameError) as caught:
        evaluate(tmp_path, ["gsm8kk"], [], task_format="tiny", limit=1, include_defaults=True)
    assert str(caught.value) == ("unknown lm-eval task 'gsm8kk' (did you mean 'gsm8k' or 'gsm8k_cot'?); "
                                 "14003 lm-eval tasks are known here")
    with pytest.raises(UnknownNameError) as caught:
        evaluate(tmp_path, ["nothing-like-it"], [], task_format="tiny", limit=1, include_defaults=True)
    assert str(caught.value) == "unknown lm-eval task 'nothing-like-it'; 14003 lm-eval tasks are known here"


@pytest.mark.slow  # ~30 s: indexes lm-eval's 14,000 built-in tasks
def test_eval_of_an_uncached_lm_eval_task_is_one_line(run_dir):
    result = CliRunner().invoke(app, ["eval", str(run_dir), "--limit", "1", "--task", "gsm8k"])
    assert result.exit_code == 2, result.output
    message = result.stderr or result.output
    assert "not in the local datasets cache" in message and "Traceback" not in message


def test_a_tiny_spec_is_scored_in_the_tiny_format_unless_told():
    from bench.run.harness import resolve_target

    assert resolve_target("tiny-llama", suite=None, difficulty=None, profile=None).profile == "tiny"
    assert resolve_target("tiny-llama", suite=None, difficulty=None, profile="worked").profile == "worked"


def test_eval_refuses_an_unfinished_run(tmp_path):
    unfinished = tmp_path / "run"
    unfinished.mkdir()
    (unfinished / "ledger.jsonl").write_text("")
    result = CliRunner().invoke(app, ["eval", str(unfinished)])
    assert result.exit_code == 2 and "final/" in (result.stderr or result.output)


def test_a_teacher_named_by_its_run_directory_is_the_runs_final_model(run_dir, fast_profile, tmp_path):
    """`--teacher NAME=RUN_DIR`, as `bench eval RUN_DIR`: the run's final/ (not its config.json taken for
    a model's); a run that has not finished is refused in one line."""
    config = dataclasses.replace(run_config(fast_profile, tmp_path, "sft", 4e10), teachers=(("math", str(run_dir)),))
    assert Runner(config, progress=False).models().extra_teachers == {"math": run_dir / "final"}
    assert resolve_model(run_dir) == run_dir / "final"
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "ledger.jsonl").write_text("")
    with pytest.raises(RunError, match="the run has not finished"):
        resolve_model(unfinished)
    # a model folder with a `final/` of its own (a trainer's logs, another model) is that model, no run
    model = tmp_path / "my-model"
    shutil.copytree(run_dir / "final", model)
    (model / "final").mkdir()
    assert resolve_model(model) == model
    shutil.copytree(run_dir / "final", model / "final", dirs_exist_ok=True)
    assert resolve_model(model) == model


def test_save_milestones_keeps_the_student_behind_every_curve_point(fast_profile, tmp_path):
    """`--save-milestones`: one HF folder per evaluation, holding the very model that point scored."""
    from bench.world.models import state_digest

    config = dataclasses.replace(run_config(fast_profile, tmp_path, "sft", 4e10, keep="all", prompts_per_step=8),
                                 save_milestones=True)
    summary = Runner(config, progress=False).run()
    run_dir = tmp_path / summary["run_id"]
    curve = summary["curve"]
    folders = [p["model_dir"] for p in curve]
    assert len(curve) >= 3 and sorted(p.name for p in (run_dir / "milestones").iterdir()) == \
        sorted(f.split("/")[1] for f in folders)
    suite = get_suite("math_code", "easy", fast_profile.task_format)
    digests = []
    for point, folder in zip(curve, folders):
        scored = bench_accuracy(run_dir / folder, suite, fast_profile.eval_max_new_tokens)
        assert scored["domain_accuracy"] == pytest.approx(point["domain_accuracy"], abs=1e-12)
        assert scored["domain_mean_length"] == pytest.approx(point["domain_mean_length"], abs=1e-12)
        digests.append(state_digest(load_model(run_dir / folder)[0]))
    assert len(set(digests)) == len(digests)  # training moved the student between evaluations
    assert digests[-1] == state_digest(load_model(run_dir / "final")[0])
    assert digests[0] != digests[-1]
    # bench eval on a milestone folder: the run's suite and profile by default, that point's accuracy
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(app, ["eval", str(run_dir / folders[1]), "--limit", "16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    scores = json.loads(out.read_text())
    assert scores["suite"] == "math_code-easy-tiny"
    assert scores["domain_accuracy"] == pytest.approx(curve[1]["domain_accuracy"], abs=1e-12)


def test_milestones_are_off_by_default(run_dir):
    assert (run_dir / "final").is_dir() and not (run_dir / "milestones").exists()


def test_a_model_is_scored_in_the_dtype_its_runs_used():
    """bf16 only for real models on CUDA (`bench.world.hf`); the worlds this project builds train and
    evaluate in fp32 on a GPU too (`gpu-small`), and scored in bf16 their answers would differ."""
    from bench.world.profiles import PROFILES

    dtypes = [eval_dtype(device, "hf") for device in ("cpu", "cuda", "cuda:1")]
    assert dtypes == ["float32", "bfloat16", "bfloat16"]
    assert eval_dtype("cuda", PROFILES["gpu-small"].task_format) == eval_dtype("cuda", "tiny") == "float32"
