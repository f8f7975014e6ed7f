"""GraphRollout's static decode step, run eagerly on the CPU (`graphs=False`): the same tokens and
log-probs as TorchRollout, greedy and sampled, and a charge per step that the FLOP counter confirms.

On CUDA the same step is captured as a graph and replayed; replays run no hooks, which is why each
is charged analytically, and this file proves that charge equal to the instrumented count of the
step it replays (benchmarks/gpu_check.py repeats the comparison on a GPU). It also proves, op by op,
that the step can be captured: no host synchronisation and no host tensor made inside it. With the
capture stood in for on the CPU, it checks the graphed path's bookkeeping: each step computed once
and charged once, first uses included, and captures reused across calls.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from bench.accounting.audit import audited
from bench.accounting.flops import FlopSpec
from bench.accounting.ledger import Ledger
from bench.accounting.metering import meter
from bench.rollout.engines import make_backend
from bench.rollout.graphs import GraphRollout, graph_supported
from bench.rollout.torch_engine import TorchRollout
from tests.bench.rollout_models import SMALL_VOCAB, VOCAB, build_model, random_prompts


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def stopper(request):
    """12-token vocabulary: EOS (id 1) is sampled often, so rows finish at many different steps."""
    return build_model(request.param, vocab=SMALL_VOCAB)


def _same(ours, theirs) -> None:
    assert ours.completion_ids == theirs.completion_ids
    assert ours.lengths == theirs.lengths and ours.finished == theirs.finished
    for a, b in zip(ours.logprobs, theirs.logprobs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("key_bucket", [4, 128])
@pytest.mark.parametrize("greedy", [True, False])
def test_static_decoding_samples_what_torch_rollout_samples(stopper, greedy, key_bucket):
    """Rows finish at different steps (compaction into smaller row buckets), prompts of mixed lengths
    share decode groups (left padding, masked), and keys are bucketed: the tokens are TorchRollout's."""
    prompts = random_prompts(SMALL_VOCAB)
    args = dict(n=3, max_new_tokens=20, eos_id=1, greedy=greedy, temperature=1.0)
    ours = GraphRollout(max_rows=12, static=True, graphs=False, key_bucket=key_bucket).generate(
        stopper, prompts, generator=torch.Generator().manual_seed(3), **args)
    theirs = TorchRollout(max_rows=12).generate(stopper, prompts, generator=torch.Generator().manual_seed(3), **args)
    assert len(set(ours.lengths)) >= 3  # rows finished at two steps or more: the compaction was exercised
    _same(ours, theirs)


def test_prompts_a_key_bucket_apart_decode_as_one_group_after_padded_prefills(stopper):
    """On the static path prompts whose lengths differ by up to a key bucket decode together, and
    those within `max_pad_tokens` share a prefill forward (left-padded, masked, positions from 0):
    the tokens TorchRollout samples decoding them as one group, with 2 prefill forwards, not 5."""
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(2, SMALL_VOCAB, (n,), generator=gen).tolist() for n in (3, 4, 20, 21, 30)]
    args = dict(n=2, max_new_tokens=12, eos_id=1)
    engine = GraphRollout(static=True, graphs=False, key_bucket=32)
    one_group, apart = TorchRollout(max_pad_tokens=32), TorchRollout()
    ours = engine.generate(stopper, prompts, generator=torch.Generator().manual_seed(8), **args)
    _same(ours, one_group.generate(stopper, prompts, generator=torch.Generator().manual_seed(8), **args))
    apart.generate(stopper, prompts, generator=torch.Generator().manual_seed(8), **args)
    assert engine.last_stats["forwards"] == one_group.last_stats["forwards"] - 3  # 2 prefills, not 5
    assert one_group.last_stats["forwards"] < apart.last_stats["forwards"]  # groups 3 to 30 tokens apart
    assert engine.last_stats["pad_keys"] > 0


def test_top_p_and_temperature_sample_what_torch_rollout_samples(stopper):
    prompts = random_prompts(SMALL_VOCAB)
    args = dict(n=4, max_new_tokens=12, eos_id=1, temperature=0.7, top_p=0.8)
    ours = GraphRollout(static=True, graphs=False, key_bucket=8).generate(
        stopper, prompts, generator=torch.Generator().manual_seed(5), **args)
    theirs = TorchRollout().generate(stopper, prompts, generator=torch.Generator().manual_seed(5), **args)
    _same(ours, theirs)


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_in_bf16_the_static_step_decodes_as_torch_rollout(family):
    """The GPU's dtype: the static step's caches, mask, attention and sampling run in bf16 as the
    model's own forward does (a dtype mismatch anywhere would raise or drift here first). On this
    CPU, llama's log-probs differ in one place of 192, by 1.1%; qwen2's not at all."""
    model = build_model(family, vocab=VOCAB).to(torch.bfloat16)
    prompts, args = random_prompts(VOCAB), dict(n=2, max_new_tokens=12, eos_id=1, temperature=1.0)
    ours = GraphRollout(static=True, graphs=False, key_bucket=8).generate(
        model, prompts, generator=torch.Generator().manual_seed(6), **args)
    theirs = TorchRollout().generate(model, prompts, generator=torch.Generator().manual_seed(6), **args)
    assert ours.completion_ids == theirs.completion_ids and ours.lengths == theirs.lengths
    for a, b in zip(ours.logprobs, theirs.logprobs):  # from bf16 logits: torch.testing's bf16 tolerance
        torch.testing.assert_close(a, b, rtol=1.6e-2, atol=1e-5)


def test_each_static_step_is_charged_what_the_flop_counter_counts(stopper):
    """The whole generation under FlopCounterMode (metered prefills, analytic charges for the static
    steps, padding rows and masked keys included) against the ledger's charge."""
    ledger = Ledger()
    meter(stopper, "student", ledger)
    engine = GraphRollout(static=True, graphs=False, key_bucket=8)
    try:
        with audited(ledger, "student") as result:
            batch = engine.generate(stopper, random_prompts(SMALL_VOCAB), n=3, max_new_tokens=16, eos_id=1,
                                    generator=torch.Generator().manual_seed(2))
    finally:
        from bench.accounting.metering import unmeter

        unmeter(stopper)
    assert batch.total_tokens > 0 and result.charged_flops > 0
    # the prompts (2-11 tokens) share one padded prefill: the counter leaves out the pairs its mask
    # does (4 L H d_h FLOPs each), the ledger charges them; everything else is equal
    spec, pad_pairs = FlopSpec.from_config(stopper.config), engine.last_stats["pad_keys"]
    assert pad_pairs > 0
    assert result.charged_flops == result.instrumented_flops + spec.pair_flops * pad_pairs
    # the buckets cost more than the exact work TorchRollout does, and the ledger says so
    exact = Ledger()
    meter(stopper, "student", exact)
    try:
        TorchRollout().generate(stopper, random_prompts(SMALL_VOCAB), n=3, max_new_tokens=16, eos_id=1,
                                generator=torch.Generator().manual_seed(2))
    finally:
        unmeter(stopper)
    assert result.charged_flops > exact.counted_flops


class _Replayed:
    """What a captured graph does when replayed: the step it recorded, run again."""

    def __init__(self, step) -> None:
        self.step = step

    def replay(self) -> None:
        self.step()


class _CpuCapture(GraphRollout):
    """GraphRollout's capture bookkeeping on the CPU: `_capture`'s contract without CUDA, i.e. the
    step run once eagerly (the call's own step) and a graph that runs it on each replay."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.captures = 0

    def _capture(self, step):
        self.captures += 1
        step()
        return _Replayed(step)


def test_a_first_use_computes_its_step_once_and_replays_reuse_the_capture(stopper, monkeypatch):
    """The graphed path (graphs=True, capture stood in for on the CPU): the static step is computed
    exactly once per step the ledger charges, captures included (a capture's warm-up is the step
    itself), one capture per (rows, keys) bucket, none new when a second call reuses the buckets,
    and the tokens are TorchRollout's."""
    from bench.rollout import graphs

    runs, charges = [], []
    step, charge = graphs._static_step, graphs.charge_outside
    monkeypatch.setattr(graphs, "_static_step", lambda *a: (runs.append(a[2:4]), step(*a))[1])
    monkeypatch.setattr(graphs, "charge_outside", lambda *a, **k: (charges.append(k["flops"]), charge(*a, **k))[1])
    engine = _CpuCapture(static=True, graphs=True, key_bucket=4)
    prompts, args = random_prompts(SMALL_VOCAB), dict(n=3, max_new_tokens=14, eos_id=1)
    for call in range(2):
        ours = engine.generate(stopper, prompts, generator=torch.Generator().manual_seed(7), **args)
        _same(ours, TorchRollout().generate(stopper, prompts, generator=torch.Generator().manual_seed(7), **args))
        assert len(runs) == len(charges) > 0  # every step computed is charged, once
        if call == 0:
            captured = engine.captures
            assert captured == len(set(runs)) >= 3  # one per (rows, keys) bucket; rows finished: several
        runs.clear()
        charges.clear()
    assert engine.captures == captured  # the second call found every bucket captured


def test_graphs_of_freed_models_are_dropped(stopper):
    """A snapshot or an expert that is freed takes its captured graphs with it at the next capture."""
    import copy
    import gc

    engine = _CpuCapture(static=True, graphs=True, key_bucket=4)
    prompts, args = random_prompts(SMALL_VOCAB), dict(n=2, max_new_tokens=6, eos_id=1, greedy=True)
    snapshot = copy.deepcopy(stopper)
    engine.generate(snapshot, prompts, **args)
    assert engine._captured and all(ref() is snapshot for _, ref in engine._captured.values())
    for graph, _ in engine._captured.values():
        graph.step = None  # unlike the stand-in's, a CUDA graph keeps no reference to the model
    del snapshot
    gc.collect()
    engine.generate(stopper, prompts, **args)
    assert engine._captured and all(ref() is stopper for _, ref in engine._captured.values())


def test_a_pickled_engine_starts_without_the_originals_buffers_and_graphs(stopper):
    """A parallel phase gets the run's engine through pickle (`isolated`, Ray): graphs and weak
    references cannot be pickled, and the static buffers are the parent's device memory."""
    import pickle

    engine = _CpuCapture(static=True, graphs=True, key_bucket=4)
    prompts, args = random_prompts(SMALL_VOCAB), dict(n=2, max_new_tokens=6, eos_id=1, greedy=True)
    first = engine.generate(stopper, prompts, **args)
    assert engine._captured and engine._buffers
    copied = pickle.loads(pickle.dumps(engine))
    assert not copied._captured and not copied._buffers and engine._captured and engine._buffers
    _same(copied.generate(stopper, prompts, **args), first)


def test_one_engine_serves_calls_of_growing_size(stopper):
    """The static buffers grow when a call needs more rows or keys, and keep serving smaller calls."""
    engine = GraphRollout(static=True, graphs=False, key_bucket=4)
    prompts = random_prompts(SMALL_VOCAB)
    for n, new in ((1, 4), (3, 20), (2, 8)):
        args = dict(n=n, max_new_tokens=new, eos_id=1)
        _same(engine.generate(stopper, prompts, generator=torch.Generator().manual_seed(n), **args),
              TorchRollout().generate(stopper, prompts, generator=torch.Generator().manual_seed(n), **args))
    (static,) = engine._buffers.values()
    assert static.rows >= 3 * len(prompts) and static.capacity >= max(map(len, prompts)) + 20


def test_other_architectures_and_the_cpu_decode_as_torch_rollout():
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=SMALL_VOCAB, n_embd=32, n_layer=2, n_head=2)).eval()
    assert not graph_supported(gpt2)
    engine = make_backend("torch")
    assert isinstance(engine, GraphRollout) and not engine._uses_static(build_model("llama", SMALL_VOCAB))
    args = dict(n=2, max_new_tokens=6, eos_id=1, greedy=True)
    prompts = random_prompts(SMALL_VOCAB)
    _same(GraphRollout(static=True).generate(gpt2, prompts, **args), TorchRollout().generate(gpt2, prompts, **args))
    engine = GraphRollout(static=True)
    engine.generate(gpt2, prompts, **args)
    assert not engine._buffers


def test_models_of_two_layouts_keep_their_own_buffers(stopper):
    """A student and a bigger teacher sampling in turn (sft, distillation's evaluations) each decode
    from their own static cache: neither evicts the other's buffers."""
    wide = GraphRollout(static=True, graphs=False)
    torch.manual_seed(1)
    teacher = LlamaForCausalLM(LlamaConfig(vocab_size=SMALL_VOCAB, hidden_size=96, intermediate_size=128,
                                           num_hidden_layers=3, num_attention_heads=3, num_key_value_heads=3,
                                           initializer_range=0.2, bos_token_id=None, eos_token_id=None)).eval()
    prompts, args = random_prompts(SMALL_VOCAB), dict(n=2, max_new_tokens=10, eos_id=1, greedy=True)
    for model in (stopper, teacher, stopper):
        _same(wide.generate(model, prompts, **args), TorchRollout().generate(model, prompts, **args))
    assert len(wide._buffers) == 2


class _Ops(TorchDispatchMode):
    """Every aten op run inside the block, with whether it made a tensor from host data or moved one
    between devices (what a CUDA-graph capture refuses or silently bakes in)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in ("_to_copy", "to") and kwargs.get("device") not in (None, args[0].device):
            name += ":device"  # a copy to another device (the CPU, say): a sync the step must not make
        self.names.append(name)
        return func(*args, **kwargs)


# What stops a capture or makes a replay wrong: a host sync (reading a value, a shape that depends on
# data) or a tensor made from host memory inside the step.
NOT_CAPTURABLE = {"_local_scalar_dense", "item", "is_nonzero", "nonzero", "masked_select", "unique",
                  "_unique2", "equal", "lift_fresh", "_to_copy:device", "to:device", "_assert_async"}


@pytest.mark.parametrize("sampling", [dict(greedy=True), dict(temperature=1.0), dict(temperature=0.7, top_p=0.8)])
def test_the_static_step_is_capturable(stopper, sampling, monkeypatch):
    """On the CPU no graph is captured, so this proves what capture needs of each step on CUDA: no
    host synchronisation, no data-dependent shape, no host tensor made inside it."""
    import bench.rollout.graphs as graphs

    seen, step = [], graphs._static_step

    def watched(*args, **kwargs):
        with _Ops() as ops:
            step(*args, **kwargs)
        seen.append(ops.names)

    monkeypatch.setattr(graphs, "_static_step", watched)
    GraphRollout(static=True, graphs=False, key_bucket=8).generate(
        stopper, random_prompts(SMALL_VOCAB), n=3, max_new_tokens=12, eos_id=1,
        generator=torch.Generator().manual_seed(6), **sampling)
    assert len(seen) > 5 and all({"linear", "matmul", "softmax", "index_copy_"} <= set(ops) for ops in seen)
    assert {name for ops in seen for name in ops} & NOT_CAPTURABLE == set()
