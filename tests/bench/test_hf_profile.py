"""The hf profile on this CPU: a local HF model folder, chat-formatted prompts, the same adapters.

The same code path a GPU user takes (`--profile hf --model DIR`), on tiny random Qwen2-style
folders that carry a chat template.
"""

import datetime
import json
import shutil
from pathlib import Path

import pytest
import torch
from tokenizers import AddedToken
from typer.testing import CliRunner

from bench.cli import app
from bench.accounting.ledger import Ledger
from bench.world.hf import folder_digest
from bench.world.models import load_model, save_model, tiny_model_dir
from bench.errors import RunError
from bench.policy import Policy, end_of_turn
from bench.rollout.torch_engine import TorchRollout
from reports.schema import validate_record

TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _chat_folder(spec: str, dest):
    shutil.copytree(tiny_model_dir(spec), dest)
    _, tokenizer = load_model(dest)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return _chat_folder("tiny-qwen2", root / "student"), _chat_folder("tiny-qwen2", root / "teacher")


def test_chat_policies_wrap_prompts_in_the_template(folders):
    model, tokenizer = load_model(folders[0])
    policy = Policy("s", model, tokenizer, ledger=Ledger(), chat=True)
    text = tokenizer.decode(policy.encode_prompt("What is 2+2?"))
    assert text == "<|user|>What is 2+2?\n<|assistant|>"
    plain = Policy("p", model, tokenizer, ledger=Ledger())
    assert tokenizer.decode(plain.encode_prompt("What is 2+2?")) == "What is 2+2?"


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("template, ends", [
    (CHATML, "<|im_end|>"), (CHATML.replace("}}<|im_end|>", "}}\n<|im_end|>"), "<|im_end|>"),  # after whitespace
    (TEMPLATE, None),
    ("{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}", "<eos>"), (None, None)])
def test_a_chat_policy_stops_at_its_templates_end_of_turn(folders, template, ends):
    """Qwen's base models chat in ChatML and end a turn with <|im_end|>, never with their tokenizer's
    EOS (<|endoftext|>): a chat policy stops at both and ends its answers (SFT targets) with the turn's
    end, whitespace before it passed over (here a newline that is a special token). A template that
    ends a turn with text, or with EOS, leaves EOS alone; so does plain text."""
    model, tokenizer = load_model(folders[0])
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.add_tokens([AddedToken("\n", special=True, normalized=False)])  # never a turn's end
    tokenizer.chat_template = template
    eos = tokenizer.eos_token_id
    turn_end = None if ends is None else tokenizer.convert_tokens_to_ids(ends)
    assert end_of_turn(tokenizer) == turn_end
    chat = Policy("s", model, tokenizer, ledger=Ledger(), chat=True)
    assert chat.eos_id == (turn_end if turn_end is not None else eos)
    assert chat.stop_ids == tuple(dict.fromkeys((chat.eos_id, eos)))
    assert Policy("p", model, tokenizer, ledger=Ledger()).stop_ids == (eos,)  # plain prompts: EOS alone


def test_a_chatml_run_rolls_out_and_evaluates_with_both_stop_tokens(folders, tmp_path, monkeypatch):
    """Every generation of a run on a ChatML folder, the evaluations' and the method's rollouts, stops
    at <|im_end|> and at EOS."""
    student = tmp_path / "chatml"
    shutil.copytree(folders[0], student)
    _, tokenizer = load_model(student)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tokenizer.chat_template = CHATML
    tokenizer.save_pretrained(student)
    seen, generate = [], TorchRollout.generate

    def recorded(self, model, prompts, **kwargs):
        seen.append((kwargs["greedy"] if "greedy" in kwargs else False, tuple(kwargs["eos_id"])))
        return generate(self, model, prompts, **kwargs)

    monkeypatch.setattr(TorchRollout, "generate", recorded)
    out = CliRunner().invoke(app, ["run", "--profile", "hf", "--model", str(student), "--method", "grpo-joint",
                                   "--suite", "math_code", "--budget", "2e9", "--eval-size", "2",
                                   "--max-new-tokens", "8", "--runs", str(tmp_path / "runs"), "--no-progress"])
    assert out.exit_code == 0, out.output
    ends = (tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id)
    assert {greedy for greedy, _ in seen} == {True, False}  # evaluations and rollouts both ran
    assert {stops for _, stops in seen} == {ends}


# Two ways chat templates write today's date: Llama 3.x's reads `date_string` if given, else calls
# `strftime_now`; Mistral Small 3's calls `strftime_now` itself.
DATED = {"date_string": "{% if date_string is not defined %}{% set date_string = strftime_now('%d %b %Y') %}"
                        "{% endif %}Today: {{ date_string }}\n{% for m in messages %}{{ m['content'] }}{% endfor %}",
         "strftime_now": "Today: {{ strftime_now('%Y-%m-%d') }}\n{% for m in messages %}{{ m['content'] }}{% endfor %}"}


@pytest.mark.parametrize("template, today", [(DATED["date_string"], "26 Jul 2024"),
                                             (DATED["strftime_now"], "2024-07-26")], ids=list(DATED))
def test_a_template_that_writes_todays_date_is_given_one_fixed_day(folders, template, today):
    """A prompt's tokens are the same on every day (a run resumed, or scored by `bench eval`, later), and
    the day's date is left alone outside a policy's prompts."""
    model, tokenizer = load_model(folders[0])
    tokenizer.chat_template = template
    text = tokenizer.decode(Policy("s", model, tokenizer, ledger=Ledger(), chat=True).encode_prompt("Q"))
    assert text == f"Today: {today}\nQ"
    assert tokenizer.apply_chat_template([{"role": "user", "content": "Q"}], tokenize=False) == \
        f"Today: {datetime.date.today().strftime('%d %b %Y' if 'date_string' in template else '%Y-%m-%d')}\nQ"


def test_a_template_that_cannot_format_a_user_turn_is_one_line(folders):
    model, tokenizer = load_model(folders[0])
    tokenizer.chat_template = "{{ raise_exception('This model requires a system message') }}"
    with pytest.raises(RunError, match="chat template cannot format one user turn .This model requires a system"):
        Policy("s", model, tokenizer, ledger=Ledger(), chat=True).encode_prompt("What is 2+2?")


def test_a_teacher_with_another_vocabulary_is_refused_in_one_line(folders, tmp_path):
    """On-policy distillation compares log-probs token by token: a teacher whose tokenizer differs is
    refused with one line and exit 2, not a traceback."""
    teacher = tmp_path / "teacher"
    shutil.copytree(folders[1], teacher)
    _, tokenizer = load_model(teacher)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    tokenizer.save_pretrained(teacher)
    out = CliRunner().invoke(app, [
        "run", "--profile", "hf", "--model", str(folders[0]), "--external", str(teacher), "--method", "opd-external",
        "--suite", "math_code", "--budget", "2e9", "--eval-size", "2", "--max-new-tokens", "8",
        "--runs", str(tmp_path / "runs"), "--no-progress",
    ])
    said = (out.stderr or out.output).strip()
    assert out.exit_code == 2 and "Traceback" not in out.output, out.output
    assert "teacher 'external' has a different tokenizer from the student" in said and len(said.splitlines()) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hf_profile_runs_an_adapter_on_local_folders(dtype, folders, tmp_path, monkeypatch):
    # on CUDA the hf profile loads its models in bf16: every step of a run (the weights' digest that decides
    # whether an evaluation can be reused included) must take that dtype, here on the CPU
    import bench.world.hf as hf

    monkeypatch.setattr(hf, "_dtype", lambda device: dtype)
    student, teacher = folders
    out = CliRunner().invoke(app, [
        "run", "--profile", "hf", "--model", str(student), "--external", str(teacher), "--method", "opd-external",
        "--suite", "math_code", "--budget", "2e9", "--eval-size", "4", "--max-new-tokens", "12",
        "--runs", str(tmp_path), "--no-progress",
    ])
    assert out.exit_code == 0, out.output
    record = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert record["profile"] == "hf"
    assert record["flops"]["shared"] == 0 and record["flops"]["external"] == 0  # trained elsewhere
    kinds = {(r["model"], r["kind"]) for r in record["ledger"] if r["category"] == "counted"}
    assert ("external", "score") in kinds and ("student", "update") in kinds
    assert set(record["provenance"]["model_hashes"]) == {"base", "external"}
    final = json.loads(next(tmp_path.glob("*/final/config.json")).read_text())
    assert final.get("dtype", final.get("torch_dtype")) == str(dtype).removeprefix("torch.")


def test_a_sweep_gives_every_run_the_run_options_on_local_folders(folders, tmp_path):
    """`bench sweep` takes `bench run`'s options for every run: the hf profile's model folders, the
    evaluation settings and the generation limit."""
    student, teacher = folders
    out = CliRunner().invoke(app, [
        "sweep", "--methods", "grpo-joint,opd-external", "--suites", "math_code", "--seeds", "1", "--profile", "hf",
        "--model", str(student), "--external", str(teacher), "--budget", "2e9", "--eval-size", "4",
        "--max-new-tokens", "12", "--eval-every", "0.5", "--eval-early", "", "--runs", str(tmp_path), "--jobs", "2",
    ])
    assert out.exit_code == 0, out.output
    assert "2 runs done, 0 already complete, 0 failed" in out.output
    configs = [json.loads(path.read_text()) for path in tmp_path.glob("*/config.json")]
    assert sorted(c["method"] for c in configs) == ["grpo-joint", "opd-external"]
    for config in configs:
        assert (config["eval_size"], config["max_new_tokens"], config["eval_every"], config["eval_early"]) == \
            (4, 12, 0.5, [])
        assert config["models"] == {"student": str(student), "external": str(teacher), "teachers": {}}
    records = [json.loads(path.read_text()) for path in tmp_path.glob("*/summary.json")]
    assert all(r["profile"] == "hf" and r["eval_size"] == 4 for r in records)


def _retrain(folder):
    """The folder's model with other weights, saved in its place (a model fine-tuned again, in place)."""
    model, tokenizer = load_model(folder)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    save_model(model, tokenizer, folder)


def test_a_run_made_from_other_models_is_not_taken_for_this_run(folders, tmp_path):
    """A complete run whose teacher folder has since been overwritten with other weights is neither
    returned as this run's record by `bench run` nor skipped as complete by `bench sweep`: each stops
    with one line naming the model whose hash differs, and the run folder is left as it was."""
    student, teacher = (Path(shutil.copytree(f, tmp_path / f.name)) for f in folders)
    runs = tmp_path / "runs"
    args = ["--profile", "hf", "--model", str(student), "--external", str(teacher), "--budget", "2e9",
            "--eval-size", "4", "--max-new-tokens", "12", "--runs", str(runs)]
    run = ["run", "--method", "opd-external", "--suite", "math_code", *args, "--no-progress"]
    sweep = ["sweep", "--methods", "opd-external", "--suites", "math_code", "--seeds", "1", *args]
    assert (out := CliRunner().invoke(app, run)).exit_code == 0, out.output
    assert "already complete" in (again := CliRunner().invoke(app, run)).output, again.output
    record = json.loads(next(runs.glob("*/summary.json")).read_text())
    before = {p: p.read_bytes() for p in runs.rglob("*") if p.is_file() and not p.name.endswith(".lock")}

    _retrain(teacher)
    now = folder_digest(teacher)
    assert now != record["provenance"]["model_hashes"]["external"]
    difference = f"model_hashes.external is {record['provenance']['model_hashes']['external']} there, {now} here"
    for command, message in [(run, "is a complete run made from other models"),
                             (sweep, "holds a run made from other models")]:
        out = CliRunner().invoke(app, command)
        assert out.exit_code == 2, out.output
        assert message in out.output and difference in out.output, out.output
        assert "Traceback" not in out.output
    assert {p: p.read_bytes() for p in runs.rglob("*") if p.is_file() and not p.name.endswith(".lock")} == before


def test_a_model_folders_hash_covers_every_byte_of_its_files(tmp_path):
    """One byte changed anywhere in a weights file, or in the tokenizer, is another hash."""
    folder = tmp_path / "m"
    folder.mkdir()
    weights = bytearray(range(256)) * (12 << 12)  # 12 MiB
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "tokenizer.json").write_text('{"a": 1}')
    (folder / "notes.txt").write_text("not part of the model")
    digest = folder_digest(folder)
    (folder / "notes.txt").write_text("edited")
    assert folder_digest(folder) == digest
    weights[6 << 20] ^= 1
    (folder / "model.safetensors").write_bytes(weights)
    assert folder_digest(folder) != digest
    weights[6 << 20] ^= 1
    (folder / "model.safetensors").write_bytes(weights)
    assert folder_digest(folder) == digest
    (folder / "tokenizer.json").write_text('{"a": 2}')
    assert folder_digest(folder) != digest
    # the tokenizer's other files too: a chat template saved apart, BPE merges, a SentencePiece model
    for name in ("chat_template.jinja", "merges.txt", "tokenizer.model"):
        before = folder_digest(folder)
        (folder / name).write_text("x")
        assert folder_digest(folder) != before, name


def test_hf_profile_needs_a_model(tmp_path):
    out = CliRunner().invoke(app, ["run", "--profile", "hf", "--method", "grpo-joint", "--runs", str(tmp_path)])
    assert out.exit_code == 2
    assert "--model PATH" in (out.stderr or out.output)


def test_hf_profile_trains_and_evaluates_on_standard_benchmarks_from_local_files(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_DATA", str(Path(__file__).resolve().parents[1] / "fixtures" / "standard"))
    out = CliRunner().invoke(app, [
        "run", "--profile", "hf", "--model", str(folders[0]), "--method", "grpo-joint", "--suite", "std_math_code",
        "--budget", "2e9", "--eval-size", "8", "--max-new-tokens", "12", "--runs", str(tmp_path), "--no-progress",
    ])
    assert out.exit_code == 0, out.output
    record = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert record["suite"] == "std_math_code" and record["domains"] == ["gsm8k", "mbpp"]
    # the fixture's MBPP test split has 6 problems, fewer than the 8 asked for: scored whole, and said so
    assert record["eval_size"] == 8 and record["domain_eval_size"] == {"gsm8k": 8, "mbpp": 6}
    assert validate_record(record) == []
    # trained: the student's rollouts and updates are counted, and steps were logged
    counted = {r["kind"]: r for r in record["ledger"] if r["category"] == "counted" and r["model"] == "student"}
    assert {"rollout", "update"} <= set(counted)
    assert all(counted[kind]["flops"] > 0 and counted[kind]["calls"] > 0 for kind in ("rollout", "update"))
    assert record["steps"] and record["steps"][-1]["flops"] > 0
    assert record["flops"]["counted"] == pytest.approx(sum(r["flops"] for r in counted.values()))
    # evaluated: eval FLOPs spent, a curve point before and after training, each with both domains' accuracy
    assert record["flops"]["eval"] > 0
    curve = record["curve"]
    assert len(curve) >= 2 and curve[0]["flops"] == 0 and curve[-1]["flops"] > 0
    assert all(set(point["domain_accuracy"]) == {"gsm8k", "mbpp"} for point in curve)
    assert set(record["final_domain_accuracy"]) == {"gsm8k", "mbpp"}


def test_hf_profile_names_the_missing_data_folder_in_one_line(folders, tmp_path, monkeypatch):
    monkeypatch.setenv("OPD_BENCH_DATA", str(tmp_path / "data"))
    out = CliRunner().invoke(app, ["run", "--profile", "hf", "--model", str(folders[0]), "--method", "grpo-joint",
                                   "--suite", "gsm8k", "--runs", str(tmp_path)])
    assert out.exit_code == 2
    message = (out.stderr or out.output).strip()
    assert str(tmp_path / "data" / "gsm8k") in message and "hf download openai/gsm8k" in message
