"""FLOP accounting: FlopSpec by hand, metering charges, the bypass test, and the instrumented audit.

Every supported family is built as a tiny random model from its transformers config class and audited
against torch's FlopCounterMode (2% tolerance, docs/design.md, FLOP accounting); fvcore is the second opinion.
"""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import pytest
import torch
import transformers

from bench.accounting import audit, counting
from bench.errors import UnsupportedModelError
from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger, ledger_context
from bench.accounting.metering import is_metered, meter, unmeter
from bench.policy import Policy
from bench.world.models import build_tokenizer

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")  # fvcore

B, S, P, G = 2, 32, 8, 8  # batch, full-pass length, prompt length, generated tokens
VOCAB = 300
_GQA = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4)
_GQA["num_key_value_heads"] = 2
_IDS = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0)

# family -> config; tie_word_embeddings is left at each family's default (GPT-2 ties, the others not)
CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(**_GQA, **_IDS),
    "qwen2": lambda: transformers.Qwen2Config(**_GQA, **_IDS),
    # head_dim 24 != hidden / heads: the formula must read Qwen3's explicit head_dim
    "qwen3": lambda: transformers.Qwen3Config(**_GQA, **_IDS, head_dim=24),
    "mistral": lambda: transformers.MistralConfig(**_GQA, **_IDS),
    # GPT-2: Conv1D layers, no GQA, 2-matrix MLP, tied head, dropout on (the audit must switch it off)
    "gpt2": lambda: transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, **_IDS),
}


def build(family: str, attn: str = "sdpa") -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(CONFIGS[family](), attn_implementation=attn)


def token_ids(batch: int = B, length: int = S, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def close(a: float, b: float, tol: float = audit.TOLERANCE) -> bool:
    return abs(a - b) <= tol * abs(b)


# -- FlopSpec by hand ---------------------------------------------------------------------------
def test_flopspec_llama_by_hand():
    spec = FlopSpec.from_config(CONFIGS["llama"]())
    L, d, nq, nkv, dh, f, V = 2, 64, 4, 2, 16, 128, VOCAB
    assert (spec.layers, spec.hidden, spec.heads, spec.kv_heads, spec.head_dim) == (L, d, nq, nkv, dh)
    n_mm = L * (d * dh * (2 * nq + 2 * nkv) + 3 * d * f) + V * d
    assert n_mm == 92_928 == spec.matmul_params  # 2 * (12_288 + 24_576) + 19_200
    # a causal forward over S tokens costs 2 N_mm S + 2 L n_q d_h S (S + 1) (docs/design.md, FLOP accounting)
    assert spec.forward_flops(S) == 2 * n_mm * S + 2 * L * nq * dh * S * (S + 1) == 6_217_728
    assert spec.forward_flops(S, batch=3) == 3 * 6_217_728
    assert spec.train_flops(S) == 3 * 6_217_728
    # a cached step attends past + 1 keys; a prefill with logits_to_keep=1 pays the head once
    assert spec.forward_flops(1, past_tokens=10) == 2 * n_mm + 4 * L * nq * dh * 11
    body = n_mm - V * d
    assert spec.forward_flops(P, logit_tokens=1) == 2 * body * P + 2 * V * d + 4 * L * nq * dh * P * (P + 1) // 2
    assert spec.forward_flops(0) == 0


def test_flopspec_gpt2_and_qwen3_shapes():
    gpt2 = FlopSpec.from_config(CONFIGS["gpt2"]())
    # no GQA, MLP of 2 matrices with n_inner = 4 d
    assert (gpt2.kv_heads, gpt2.mlp_matrices, gpt2.ffn) == (4, 2, 256)
    assert gpt2.matmul_params == 2 * (64 * 16 * 16 + 2 * 64 * 256) + VOCAB * 64 == 117_504
    qwen3 = FlopSpec.from_config(CONFIGS["qwen3"]())
    assert qwen3.head_dim == 24
    assert qwen3.body_params == 2 * (64 * 24 * (2 * 4 + 2 * 2) + 3 * 64 * 128)


def test_generate_flops_is_prefill_plus_cached_steps():
    spec = FlopSpec.from_config(CONFIGS["llama"]())
    steps = sum(spec.forward_flops(1, past_tokens=P + g - 1) for g in range(1, G))
    assert spec.generate_flops(P, G) == spec.forward_flops(P, logit_tokens=1) + steps
    # "a forward over P+G minus the head of P-1" counts one more token: the last, at full context
    assert audit.full_pass_generate_flops(spec, P, G) - spec.generate_flops(P, G) == spec.forward_flops(1, P + G - 1)


def test_unknown_architecture_is_rejected():
    with pytest.raises(UnsupportedModelError, match="model_type='bert'.*supported: .*llama"):
        FlopSpec.from_config(SimpleNamespace(model_type="bert"))
    with pytest.raises(UnsupportedModelError):
        FlopSpec.from_config(SimpleNamespace())


def test_opt_reads_ffn_dim():
    cfg = transformers.OPTConfig(hidden_size=64, ffn_dim=96, num_hidden_layers=2, num_attention_heads=4,
                                 vocab_size=VOCAB, word_embed_proj_dim=64)
    assert FlopSpec.from_config(cfg).ffn == 96
    with pytest.raises(UnsupportedModelError, match="word_embed_proj_dim"):
        FlopSpec.from_config(transformers.OPTConfig(hidden_size=64, word_embed_proj_dim=32))


# -- the instrumented audit ---------------------------------------------------------------------
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("family", sorted(CONFIGS))
def test_audit_agrees(family, attn):
    model = build(family, attn)
    model.train()
    rows = audit.audit_model(model, batch=B, seq_len=S, gen_prompt=P, gen_tokens=G, fvcore=False)
    spec = FlopSpec.from_config(model.config)
    charges = [spec.forward_flops(S, batch=B), spec.train_flops(S, batch=B), B * spec.generate_flops(P, G)]
    assert [r.phase for r in rows] == ["forward", "forward+backward", "generate"]
    for row, charge in zip(rows, charges):
        assert row.ok and close(row.instrumented_flops, row.analytic_flops), row
        assert row.charged_flops == charge, row  # metering books exactly FlopSpec's numbers
        if attn == "eager":  # eager multiplies the whole score matrix: more than the causal charge
            assert row.attention == "full" and row.analytic_flops > charge
        else:
            assert row.attention == "causal" and row.analytic_flops == charge
    assert model.training and not is_metered(model)  # left as it was
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_fvcore_agrees_on_the_matmul_and_attention_terms(family):
    model = build(family).eval()
    spec = FlopSpec.from_config(model.config)
    split = counting.fvcore_forward_flops(model, token_ids())
    assert close(split.matmul, 2 * spec.matmul_params * B * S)
    assert close(split.attention, B * spec.attention_flops(S))
    assert close(counting.count_flops(lambda: audit._forward(model, token_ids())).matmul, split.matmul)


def test_fvcore_counts_eager_attention_in_full():
    model = build("llama", "eager").eval()
    spec = FlopSpec.from_config(model.config)
    full = B * spec.attention_flops(1) * S * S
    assert close(counting.fvcore_forward_flops(model, token_ids()).attention, full)


def test_generation_convention_against_the_counter():
    """What an engine runs (P+G-1 tokens) matches the counter; counting P+G tokens is over."""
    model = build("llama").eval()
    spec = FlopSpec.from_config(model.config)
    measured = counting.instrumented_flops(lambda: audit.greedy_generate(model, token_ids(length=P), G))
    assert close(measured, B * spec.generate_flops(P, G), tol=1e-9)
    design = B * audit.full_pass_generate_flops(spec, P, G)
    assert (design - measured) / measured > audit.TOLERANCE  # one extra token at full context: ~7% here


def test_flops_report_and_table():
    report = audit.flops_report(build("llama"), context=64)
    spec = FlopSpec.from_config(build("llama").config)
    assert report["within_tolerance"] and len(report["audit"]) == 3
    assert report["forward_flops_per_token"] == spec.forward_flops(1, past_tokens=63)
    assert report["train_flops_per_token_mean"] == 3 * spec.forward_flops(64) / 64
    assert report["audit"][0]["fvcore_flops"] is not None
    text = io.StringIO()
    from rich.console import Console

    from bench.cli import audit_table

    Console(file=text, width=160).print(audit_table(report))
    assert "forward+backward" in text.getvalue() and "+0.00%" in text.getvalue()


def test_audit_refuses_a_metered_model():
    model = meter(build("llama"), "student", Ledger())
    with pytest.raises(ValueError, match="unmetered"):
        audit.audit_model(model)


# -- the SDPA formulas --------------------------------------------------------------------------
def _qkv(q_len=6, k_len=6, heads=4, kv_heads=2, dim=8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, heads, q_len, dim, generator=g), torch.randn(2, kv_heads, k_len, dim, generator=g),
            torch.randn(2, kv_heads, k_len, dim, generator=g))


def _sdpa_flops(**kwargs) -> int:
    q, k, v = _qkv(**{k: kwargs.pop(k) for k in ("q_len", "k_len") if k in kwargs})
    return counting.instrumented_flops(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    )


def test_cpu_sdpa_counts_the_pairs_it_attends():
    per_pair = 2 * 4 * 2 * (8 + 8)  # batch 2, 4 query heads, QK^T and AV of head dim 8
    assert _sdpa_flops() == per_pair * 36
    assert _sdpa_flops(is_causal=True) == per_pair * 21  # 6 * 7 / 2
    assert _sdpa_flops(attn_mask=torch.ones(6, 6, dtype=torch.bool).tril()) == per_pair * 21
    float_mask = torch.zeros(6, 6).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    assert _sdpa_flops(attn_mask=float_mask) == per_pair * 21
    assert _sdpa_flops(q_len=1, k_len=9) == per_pair * 9  # a cached step sees the whole cache


def test_sdpa_backward_is_twice_forward():
    q, k, v = (t.requires_grad_() for t in _qkv())
    fwd = counting.instrumented_flops(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True))
    both = counting.instrumented_flops(lambda: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True, enable_gqa=True).sum().backward())
    assert both == 3 * fwd


def test_causal_formulas_for_cuda_kernels_bind_their_arguments():
    q, k, v = _qkv()
    causal = 2 * 2 * 4 * 21 * (8 + 8)
    aten = torch.ops.aten
    efficient = counting._CAUSAL_SDPA[aten._scaled_dot_product_efficient_attention]
    assert efficient(q, k, v, None, False, 0.0, True) == causal
    assert efficient(q, k, v, None, False, 0.0, False) == 36 * causal // 21
    flash = counting._CAUSAL_SDPA[aten._scaled_dot_product_flash_attention]
    assert flash(q, k, v, 0.0, True) == causal
    flash_bwd = counting._CAUSAL_SDPA[aten._scaled_dot_product_flash_attention_backward]
    assert flash_bwd(q, q, k, v, q, None, None, None, 6, 6, 0.0, True, None, None) == 2 * causal


def test_a_policy_with_dropout_trains_without_it_and_is_charged_every_flop():
    """GPT-2's checkpoints keep dropout on (0.1 on attention, residuals and embeddings). A policy never
    applies it: its log-probs with gradients are those it samples and scores by, and two updates are
    charged exactly what runs (in training mode, CPU attention with dropout computes the masked half
    of every score matrix too, which the ledger would not charge)."""
    model = build("gpt2").train()
    assert model.config.attn_pdrop == model.config.resid_pdrop == 0.1
    policy = Policy("student", model, build_tokenizer(), ledger=Ledger())
    ids = token_ids()
    mask = torch.ones_like(ids)
    with torch.no_grad():
        sampled = policy.logprobs(ids, mask)
    with audit.audited(policy._ledger, "student") as result:
        for update in range(2):
            logprobs = policy.logprobs(ids, mask)
            assert update or torch.equal(logprobs, sampled)  # no dropout: the function it samples by
            policy.step(-logprobs.mean(), lr=1e-3)
    assert result.charged_flops > 0 and result.instrumented_flops == result.charged_flops, result
    assert not model.training


# -- the metered ledger -------------------------------------------------------------------------
def _charges(ledger: Ledger) -> dict[tuple, tuple]:
    return {(r["category"], r["phase"], r["kind"]): (r["flops"], r["calls"]) for r in ledger.rows()}


def test_ledger_charges_flopspec_by_phase_and_kind():
    model, ledger = build("qwen3"), Ledger()
    meter(model, "student", ledger)
    spec, ids = FlopSpec.from_config(model.config), token_ids()
    with ledger_context(phase="score"), torch.no_grad():
        model(input_ids=ids)
    with ledger_context(phase="expert:math"):
        logits = model(input_ids=ids).logits
    logits.float().logsumexp(-1).mean().backward()  # outside the block: booked to the forward's phase
    with ledger_context(phase="distill", kind="rollout", category="eval"):
        audit.greedy_generate(model, ids[:, :P], G)
    forward = spec.forward_flops(S, batch=B)
    assert _charges(ledger) == {
        ("counted", "score", "score"): (forward, 1),
        ("counted", "expert:math", "update"): (3 * forward, 2),
        ("eval", "distill", "rollout"): (B * spec.generate_flops(P, G), G),
    }
    unmeter(model)
    with torch.no_grad():
        model(input_ids=ids)
    assert ledger.total("counted") == 4 * forward  # unmetered: no longer charged


def test_hf_generate_is_charged_what_it_runs():
    model, ledger = build("llama").eval(), Ledger()
    meter(model, "student", ledger)
    gen = dict(max_new_tokens=G, min_new_tokens=G, do_sample=False, pad_token_id=0)
    with ledger_context(kind="rollout"):
        measured = counting.instrumented_flops(lambda: model.generate(token_ids(length=P), **gen))
    assert close(ledger.total(), measured)


@pytest.mark.parametrize("keep", [1, 5, -10, -S, -(S + 5), torch.tensor(-10), torch.tensor([0, 3, 7])])
def test_the_head_is_charged_on_the_positions_logits_to_keep_keeps(keep):
    """Every form of `logits_to_keep` transformers takes: its LM head runs where the charge says."""
    model, ledger = build("llama").eval(), Ledger()
    meter(model, "student", ledger)
    with torch.no_grad(), audit.audited(ledger, "student") as result:
        logits = model(input_ids=token_ids(), logits_to_keep=keep).logits
    spec = FlopSpec.from_config(model.config)
    kept = logits.shape[1] if logits.dim() == 3 else 1  # a 0-dim tensor picks one position
    head = 2 * B * spec.vocab * spec.hidden * kept  # what the head computed
    assert result.charged_flops == spec.forward_flops(S, batch=B) - 2 * B * spec.vocab * spec.hidden * S + head
    assert close(result.instrumented_flops, result.charged_flops), result


def _method_calling_model_directly(model: torch.nn.Module, ids: torch.Tensor, positional: bool) -> None:
    """A 'method' that uses the raw module, none of our helpers: a training pass, then a cached step."""
    out = model(ids)
    out.logits[:, -1].float().logsumexp(-1).sum().backward()
    cache = out.cache if "cache" in out else out.past_key_values
    with torch.no_grad():
        if positional:  # GPT-2's forward takes the cache as its second argument
            model(ids[:, :1], cache)
        else:  # the name transformers < 5 used, still accepted as a deprecated alias
            model(ids[:, :1], past_key_values=cache)


@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_bypass_is_charged(family):
    """A method calling model(...) directly is still charged, and the charge is right (docs/design.md, FLOP accounting)."""
    model, ledger = build(family).eval(), Ledger()
    meter(model, "student", ledger)
    spec = FlopSpec.from_config(model.config)
    with ledger_context(phase="bypass"), audit.audited(ledger, "student") as result:
        _method_calling_model_directly(model, token_ids(), positional=family == "gpt2")
    expected = 3 * spec.forward_flops(S, batch=B) + spec.forward_flops(1, past_tokens=S, batch=B)
    assert ledger.total(phase_prefix="bypass") == result.charged_flops == expected
    assert close(result.instrumented_flops, result.charged_flops), result
    rows = ledger.rows()
    assert {r["kind"] for r in rows} == {"update", "score"}
    assert all(close(r["audit_flops"], r["flops"]) for r in rows)  # the count is recorded by the charges


def test_audited_shows_uncharged_compute():
    ledger = Ledger()
    model = build("llama").eval()  # never metered: a method hiding compute from the ledger
    with ledger_context(phase="hidden"), audit.audited(ledger, "student") as result, torch.no_grad():
        model(input_ids=token_ids())
    [row] = ledger.rows()
    assert row["flops"] == 0 and row["audit_flops"] == result.instrumented_flops > 0
    assert (row["phase"], row["kind"], row["model"]) == ("hidden", "score", "student")


def test_audited_refuses_a_block_with_other_models():
    ledger = Ledger()
    student, teacher = meter(build("llama"), "student", ledger), meter(build("gpt2"), "teacher", ledger)
    with pytest.raises(ValueError, match="teacher"), contextlib.ExitStack() as stack:
        stack.enter_context(audit.audited(ledger, "student"))
        stack.enter_context(torch.no_grad())
        student(input_ids=token_ids())
        teacher(input_ids=token_ids())


def test_each_gpu_gets_its_own_cards_peak():
    """The longest name in the table that a device's name holds wins: a PCIe or NVL card of a Hopper
    die is not taken for its SXM module, whose peak would understate its MFU by 15-24%."""
    from bench.accounting.flops import device_peak_flops

    names = {"NVIDIA H100 80GB HBM3": 989e12, "NVIDIA H100 PCIe": 756e12, "NVIDIA H100 NVL": 835e12,
             "NVIDIA H200": 989e12, "NVIDIA H200 NVL": 835e12, "NVIDIA H800 PCIe": 756e12, "NVIDIA H800": 989e12,
             "NVIDIA GH200 480GB": 989e12, "NVIDIA A100-SXM4-80GB": 312e12, "NVIDIA L40S": 362e12,
             "NVIDIA L40": 181e12, "Tesla T4": None, None: None}
    assert {name: device_peak_flops(name) for name in names} == names


def test_a_run_on_a_gpu_records_its_own_card(monkeypatch):
    """On a machine of mixed cards, a `cuda:1` run's record names GPU 1 and its peak, not GPU 0's."""
    from bench.run import provenance

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cards = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]
    monkeypatch.setattr(torch.cuda, "get_device_name", cards.__getitem__)
    peaks = [provenance.hardware(device)["gpu_peak_bf16_flops"] for device in ("cpu", "cuda", "cuda:1")]
    assert peaks == [989e12, 989e12, 312e12]
