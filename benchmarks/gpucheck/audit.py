"""The check's first part: the FLOP ledger against torch's counter on the device, graph replays included."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch

from bench.accounting.flops import FlopSpec
from gpucheck import common
from gpucheck.common import Check, load, random_prompts


def audit(check: Check, folder: Path, out: dict) -> None:
    from bench.accounting.audit import audit_model, audited
    from bench.accounting.ledger import Ledger
    from bench.accounting.metering import meter, unmeter
    from bench.rollout.graphs import GraphRollout

    model, _ = load(folder)
    rows = audit_model(model, **common.SIZES["audit"], fvcore=False)
    out["rows"] = [{"phase": r.phase, "analytic": r.analytic_flops, "instrumented": r.instrumented_flops,
                    "charged": r.charged_flops, "rel_diff": r.rel_diff} for r in rows]
    out["within_2pct"] = all(abs(r.rel_diff) <= 0.02 for r in rows)
    check.save()
    # GraphRollout: its static steps run eagerly under the counter, then the same generation graphed
    # (replays are invisible to the counter, which is why they are charged analytically). Its padded
    # prefills' masked query-key pairs are charged, not counted (4 L H d_h FLOPs each): set apart.
    prompts, runs, spec = random_prompts(8, model.config.vocab_size), {}, FlopSpec.from_config(model.config)
    for graphs in (False, True):
        ledger = Ledger()
        meter(model, "student", ledger)
        engine = GraphRollout(static=True, graphs=graphs and not check.dry)
        with torch.inference_mode(), (audited(ledger, "student") if not graphs else contextlib.nullcontext()) as result:
            batch = engine.generate(model, prompts, n=4, max_new_tokens=32, eos_id=-1,
                                    generator=torch.Generator().manual_seed(4))
        unmeter(model)
        runs[graphs] = (batch.completion_ids, result, ledger.counted_flops)
        padding = spec.pair_flops * engine.last_stats["pad_keys"]
    eager = runs[False][1]
    out["graph_rollout"] = {
        "eager_steps_instrumented": eager.instrumented_flops, "eager_steps_charged": eager.charged_flops,
        "padding_flops": padding, "eager_rel_diff": (eager.charged_flops - padding) / eager.instrumented_flops - 1,
        "graphed_charged": runs[True][2],
        "same_charge": runs[True][2] == runs[False][2], "same_tokens": runs[False][0] == runs[True][0]}
