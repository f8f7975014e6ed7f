"""TorchRollout against transformers' own generate, a full-sequence forward, and the FLOP ledger.

Tiny random Llama and Qwen2 models built from config classes (no tokenizer: prompts are ids), from
tests/bench/rollout_models.py.
"""

from __future__ import annotations

import pytest
import torch
import transformers
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger
from bench.losses import token_logprobs
from bench.accounting.metering import meter, unmeter
from bench.errors import RunError
from bench.rollout.base import RolloutBackend, RolloutBatch, padded_logprobs, position_table, to_padded
from bench.rollout.torch_engine import TorchRollout, sample_next
from bench.hf_compat import cache_argument
from bench.rollout.kv import decode_attention, drop_rows, make_cache
from tests.bench.rollout_models import EOS, SMALL_VOCAB, VOCAB, build_model, random_prompts


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def model(request):
    return build_model(request.param)


@pytest.fixture(scope="module")
def llama():
    return build_model("llama")


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def stopper(request):
    """A model with a 12-token vocabulary: EOS (id 1) is sampled often, so about half the rows stop early."""
    return build_model(request.param, vocab=SMALL_VOCAB)


@pytest.fixture(scope="module")
def prompts():
    return random_prompts(VOCAB)


@pytest.fixture(scope="module")
def short_prompts():
    return random_prompts(SMALL_VOCAB)


def _hf_greedy(model, prompt, max_new, eos_id) -> list[int]:
    """transformers' greedy decoding of one prompt (no padding), cut after the first EOS."""
    ids = torch.tensor([prompt])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
        eos_token_id=eos_id if eos_id >= 0 else None, pad_token_id=0,
    )[0, len(prompt):].tolist()  # fmt: skip
    return out[: out.index(eos_id) + 1] if eos_id in out else out


@pytest.mark.parametrize("max_pad_tokens", [0, 16])
def test_greedy_equals_transformers_generate(model, prompts, max_pad_tokens):
    free = [_hf_greedy(model, p, 12, eos_id=-1) for p in prompts]
    eos = free[0][4]  # greedy emits it mid-way for at least one prompt: EOS stopping is compared too
    batch = TorchRollout(max_pad_tokens=max_pad_tokens).generate(
        model, prompts, n=2, max_new_tokens=12, eos_id=eos, greedy=True
    )
    for i, p in enumerate(prompts):
        expected = _hf_greedy(model, p, 12, eos)
        assert batch.completion_ids[2 * i] == expected, f"prompt {i}"
        assert batch.completion_ids[2 * i + 1] == expected
        assert batch.finished[2 * i] == (expected[-1] == eos)
    assert any(batch.finished) and not all(batch.finished)


@pytest.mark.parametrize("max_pad_tokens", [0, 16])
def test_logprobs_equal_full_sequence_forward(stopper, short_prompts, max_pad_tokens):
    """At temperature 0.7 / top_p 0.9 the log-probs are still those of the unscaled model distribution."""
    model = stopper
    batch = TorchRollout(max_pad_tokens=max_pad_tokens).generate(
        model, short_prompts, n=3, max_new_tokens=10, temperature=0.7, top_p=0.9, eos_id=EOS,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    input_ids, attention_mask, completion_mask = to_padded(batch, pad_id=0)
    with torch.no_grad():
        full = token_logprobs(model(input_ids=input_ids, attention_mask=attention_mask).logits, input_ids)  # [B, T]
    ours = padded_logprobs(batch)  # [B, T]
    assert ours.shape == full.shape
    assert torch.allclose(ours * completion_mask, full * completion_mask, atol=1e-4)
    assert int(completion_mask.sum()) == batch.total_tokens
    assert 4 <= sum(batch.finished) < len(batch.finished) - 4
    assert not batch.logprobs[0].is_inference()  # usable in a later autograd graph


def test_same_seed_same_samples(llama, prompts):
    def run(seed):
        return TorchRollout().generate(
            llama, prompts, n=4, max_new_tokens=8, eos_id=1, generator=torch.Generator().manual_seed(seed)
        )

    a, b, c = run(7), run(7), run(8)
    assert a.completion_ids == b.completion_ids
    assert all(torch.equal(x, y) for x, y in zip(a.logprobs, b.logprobs))
    assert a.completion_ids != c.completion_ids


def _expected_flops(spec: FlopSpec, batch: RolloutBatch) -> tuple[int, int]:
    """One prefill per prompt (last logit only), then one cached step per fed token; and tokens fed."""
    flops = sum(spec.forward_flops(len(p), logit_tokens=1) for p in batch.prompt_ids)
    tokens = sum(len(p) for p in batch.prompt_ids)
    for k, g in enumerate(batch.lengths):
        plen = len(batch.prompt_ids[k // batch.n])
        flops += sum(spec.forward_flops(1, past_tokens=plen + s - 1) for s in range(1, g))  # last token not fed
        tokens += g - 1
    return flops, tokens


@pytest.mark.parametrize("max_pad_tokens", [0, 16])
def test_ledger_charges_one_prefill_per_prompt_and_no_finished_rows(stopper, short_prompts, max_pad_tokens):
    model, ledger = stopper, Ledger()
    meter(model, "policy", ledger)
    try:
        engine = TorchRollout(max_pad_tokens=max_pad_tokens)
        batch = engine.generate(
            model, short_prompts, n=4, max_new_tokens=10, eos_id=EOS,
            generator=torch.Generator().manual_seed(3),
        )  # fmt: skip
    finally:
        unmeter(model)
    spec = FlopSpec.from_config(model.config)
    flops, tokens = _expected_flops(spec, batch)
    pad_keys = engine.last_stats["pad_keys"]
    assert (pad_keys == 0) == (max_pad_tokens == 0)
    # padded keys are attended (and charged) only in decode: 4 L H d_h FLOPs each
    flops += spec.pair_flops * pad_keys
    rows = ledger.rows()
    assert [r["kind"] for r in rows] == ["rollout"]
    assert rows[0]["flops"] == flops
    assert rows[0]["tokens"] == tokens == engine.last_stats["prefill_tokens"] + engine.last_stats["decode_tokens"]
    assert 4 <= sum(batch.finished) < len(batch.finished) - 4  # rows did leave the batch early


def test_eos_stops_a_sequence(stopper, short_prompts):
    eos = EOS
    batch = TorchRollout().generate(
        stopper, short_prompts, n=4, max_new_tokens=10, eos_id=eos, generator=torch.Generator().manual_seed(2)
    )
    for ids, lp, g, done in zip(batch.completion_ids, batch.logprobs, batch.lengths, batch.finished):
        assert len(ids) == g == lp.numel()
        assert eos not in ids[:-1]
        assert done == (ids[-1] == eos)
        assert done or g == 10
    assert 0 < sum(batch.finished) < len(batch.finished)


def test_tiny_top_p_is_greedy(model, prompts):
    engine = TorchRollout()
    greedy = engine.generate(model, prompts, n=2, max_new_tokens=8, eos_id=1, greedy=True)
    nucleus = engine.generate(
        model, prompts, n=2, max_new_tokens=8, top_p=1e-6, eos_id=1,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    assert nucleus.completion_ids == greedy.completion_ids


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature_is_respected(llama, temperature):
    """The mean of log p_T(y) over 4000 first tokens matches its expectation under p_T = softmax(z / T)
    within 4 standard errors, and would be far off had the engine sampled from softmax(z)."""
    prompt, draws = [5, 17, 42], 4000
    batch = TorchRollout().generate(
        llama, [prompt], n=draws, max_new_tokens=1, temperature=temperature, eos_id=-1,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    with torch.no_grad():
        logits = llama(input_ids=torch.tensor([prompt])).logits[0, -1].double()
    log_pt = torch.log_softmax(logits / temperature, -1)
    pt, p1 = log_pt.exp(), torch.softmax(logits, -1)
    expected = (pt * log_pt).sum()
    stderr = (((pt * log_pt**2).sum() - expected**2) / draws).sqrt()
    observed = log_pt[torch.tensor([c[0] for c in batch.completion_ids])].mean()
    assert abs(observed - expected) < 4 * stderr
    assert abs((p1 * log_pt).sum() - expected) > 10 * stderr  # the check can tell T from 1


def test_sample_next_top_p_keeps_the_smallest_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(2000, 4)
    tokens, logp = sample_next(logits, top_p=0.75, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(tokens, minlength=4)
    assert counts[2:].sum() == 0  # 0.5 + 0.3 reaches 0.75: tokens 2 and 3 are cut
    assert 0.55 < counts[0] / 2000 < 0.70  # renormalised: 0.5 / 0.8 = 0.625
    assert torch.allclose(logp, torch.log(torch.tensor([0.5, 0.3]))[tokens])


def test_chunking_and_greedy_copies_do_not_change_results(llama, prompts):
    small = TorchRollout(max_rows=3).generate(llama, prompts, n=3, max_new_tokens=6, eos_id=1, greedy=True)
    big = TorchRollout().generate(llama, prompts, n=3, max_new_tokens=6, eos_id=1, greedy=True)
    assert small.completion_ids == big.completion_ids
    assert small.prompt_ids == prompts and small.n == 3


def test_to_padded_layout():
    batch = RolloutBatch(
        prompt_ids=[[5, 6], [7]],
        completion_ids=[[8], [9, 1], [10, 11, 12], [1]],
        logprobs=[torch.tensor(x) for x in ([-0.1], [-0.2, -0.3], [-1.0, -2.0, -3.0], [-0.5])],
        lengths=[1, 2, 3, 1],
        finished=[False, True, False, True],
    )
    input_ids, attention_mask, completion_mask = to_padded(batch, pad_id=0)
    assert input_ids.tolist() == [[5, 6, 8, 0], [5, 6, 9, 1], [7, 10, 11, 12], [7, 1, 0, 0]]
    assert attention_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert completion_mask.tolist() == [[0, 0, 1, 0], [0, 0, 1, 1], [0, 1, 1, 1], [0, 1, 0, 0]]
    assert padded_logprobs(batch).tolist()[2] == [0.0, -1.0, -2.0, -3.0]


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(n=0), "n and max_new_tokens"),
        (dict(max_new_tokens=0), "n and max_new_tokens"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(prompts=[[1, 2], []]), "prompt 1 is empty"),
        (dict(prompts=[[1, VOCAB]]), "outside"),
    ],
)
def test_bad_arguments_are_rejected(llama, bad, message):
    args = dict(prompts=[[1, 2]], n=1, max_new_tokens=2, eos_id=1) | bad
    with pytest.raises(ValueError, match=message):
        TorchRollout().generate(llama, args.pop("prompts"), **args)


def test_model_state_is_restored_and_protocol_met(llama):
    llama.train()
    try:
        TorchRollout().generate(llama, [[3, 4]], n=1, max_new_tokens=2, eos_id=1)
        assert llama.training and llama.config._attn_implementation == "sdpa"
    finally:
        llama.eval()
    assert isinstance(TorchRollout(), RolloutBackend)


@pytest.mark.parametrize("masked", [False, True])
def test_decode_attention_equals_sdpa(llama, masked):
    attention = llama.model.layers[0].self_attn  # 4 query heads share 2 KV heads
    g = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(3, h, s, 16, generator=g) for h, s in ((4, 1), (2, 6), (2, 6)))
    mask = torch.rand(3, 1, 1, 6, generator=g) > 0.3 if masked else None
    if masked:
        mask[..., -1] = True  # every row attends to at least its own key
    ours, _ = decode_attention(attention, query, key, value, mask, scaling=0.25)
    theirs, _ = sdpa_attention_forward(attention, query, key, value, mask, scaling=0.25)
    assert ours.shape == theirs.shape == (3, 1, 4, 16)
    assert torch.allclose(ours, theirs, atol=1e-5)


def test_drop_rows_moves_running_rows_into_the_gaps(llama):
    cache = make_cache(llama, capacity=6)
    with torch.no_grad():
        llama(input_ids=torch.arange(10, 25).view(5, 3), **{cache_argument(llama): cache}, use_cache=True)
    before = cache.layers[1].keys.clone()  # [5, H_kv, 3, D]
    order = drop_rows(cache, torch.tensor([True, False, True, False, False]))
    assert order.tolist() == [3, 1, 4]  # rows 3 and 4 fill the gaps left by 0 and 2
    assert torch.equal(cache.layers[1].keys, before[order])
    assert cache.get_seq_length() == 3 and cache.layers[1].capacity == 6


def test_a_learned_position_table_bounds_prompt_and_new_tokens_in_one_line():
    """GPT-2 embeds positions from a table: a prompt and its new tokens past it would fail deep in the
    model (an index error). Up to the table's last position it generates; one more is refused first."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, n_positions=32, vocab_size=VOCAB,
                                     bos_token_id=2, eos_token_id=EOS, pad_token_id=0)
    gpt2 = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    assert position_table(gpt2) == 32 and position_table(build_model("llama")) is None  # rotary: computed
    prompt = [[5] * 20]
    batch = TorchRollout().generate(gpt2, prompt, n=2, max_new_tokens=13, eos_id=-1, greedy=True)
    assert batch.lengths == [13, 13]  # positions 0-31: the 13th new token is never fed back
    with pytest.raises(RunError, match="need 33 positions, more than the model's table of 32 learned positions; "
                                       "use --max-new-tokens 13 or less"):
        TorchRollout().generate(gpt2, prompt, n=2, max_new_tokens=14, eos_id=-1, greedy=True)


def test_a_sliding_window_shorter_than_the_sequence_is_refused_in_one_line():
    """Past its window a sliding-window layer no longer attends every earlier position, which the
    ledger charges: refused before any work, with what to change."""
    torch.manual_seed(0)
    config = transformers.MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, sliding_window=8,
                                        vocab_size=VOCAB, bos_token_id=2, eos_token_id=EOS, pad_token_id=0)
    mistral = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    assert TorchRollout().generate(mistral, [[5] * 4], n=1, max_new_tokens=4, eos_id=-1, greedy=True).lengths == [4]
    with pytest.raises(RunError, match=r"layer 0 of this model attends a sliding window of 8 positions, fewer "
                                       r"than the \d+ a prompt and its new tokens take here; use a smaller "
                                       "--max-new-tokens"):
        TorchRollout().generate(mistral, [[5] * 6], n=1, max_new_tokens=6, eos_id=-1, greedy=True)


def test_several_stop_ids_end_each_completion_at_the_first_of_them(stopper, short_prompts):
    """A chat policy stops at the template's end of turn and at EOS: each completion ends at its first
    token of either, and only there; a negative id stops nothing."""
    engine, stops = TorchRollout(), (EOS, 3)
    batch = engine.generate(stopper, short_prompts, n=4, max_new_tokens=10, eos_id=stops,
                            generator=torch.Generator().manual_seed(2))
    ends = {ids[-1] for ids, done in zip(batch.completion_ids, batch.finished) if done}
    assert ends == set(stops)  # both ended some completions
    for ids, done, length in zip(batch.completion_ids, batch.finished, batch.lengths):
        assert len(ids) == length and not set(ids[:-1]) & set(stops)
        assert done == (ids[-1] in stops) and (done or length == 10)
    never = engine.generate(stopper, short_prompts, n=2, max_new_tokens=6, eos_id=-1, greedy=True)
    assert never.lengths == [6] * len(never.lengths) and not any(never.finished)
