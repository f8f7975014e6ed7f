"""sft: supervised training of the student on the external teacher's samples (counted)."""

from __future__ import annotations

import pytest
import torch

from bench.api import Rollouts
from methods.sft import SFTConfig, ended_with_eos, split
from tests.methods.support import check_curve, ledger_keys, run_method, spent_budget


def test_trains_on_teacher_samples_until_the_budget(fast_profile, tmp_path):
    summary = run_method(fast_profile, tmp_path, "sft", 2e10, keep="all", prompts_per_step=8)
    assert ledger_keys(summary) == {("train", "rollout", "external"), ("train", "update", "student")}
    assert spent_budget(summary)
    check_curve(summary)


def test_minibatches_make_one_update_per_nonempty_share_of_a_step(fast_profile, tmp_path):
    def charges_per_update(minibatches: int) -> float:
        summary = run_method(fast_profile, tmp_path / str(minibatches), "sft", 2e10, keep="all", prompts_per_step=8,
                             minibatches=minibatches)
        (row,) = [r for r in summary["ledger"] if r["kind"] == "update" and r["category"] == "counted"]
        assert any(s["kept"] > 1 for s in summary["steps"])  # some step has samples for more than one update
        return row["calls"] / sum(min(int(s["kept"]), minibatches) for s in summary["steps"])

    assert charges_per_update(3) == charges_per_update(1)  # the update's ledger charges, per update


def test_split_keeps_order_and_balances_shares():
    assert split(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split([4, 9], 4) == [[4], [9], [], []]
    assert split([1, 2, 3], 1) == [[1, 2, 3]]


def test_ended_with_eos_spots_truncated_samples():
    eos, turn_end, pad = 1, 3, 0
    ids = torch.tensor([[5, 6, 7, eos, pad], [5, 6, 7, 8, 9], [5, 6, pad, pad, pad], [5, 6, 7, turn_end, pad]])
    attention = (torch.arange(5)[None] < torch.tensor([[4], [5], [2], [4]])).long()  # [B, T]
    completion = attention * (torch.arange(5)[None] >= 2).long()
    batch = Rollouts(problems=[None] * 4, n=1, input_ids=ids, attention_mask=attention,
                     completion_mask=completion, completions=[""] * 4, rewards=torch.zeros(4),
                     lengths=completion.sum(1).float())
    assert ended_with_eos(batch, (eos,)) == [True, False, False, False]
    assert ended_with_eos(batch, (turn_end, eos)) == [True, False, False, True]  # a chat turn's end too


@pytest.mark.parametrize("bad", [{"keep": "best"}, {"lr": 0.0}, {"samples_per_prompt": 0}, {"minibatches": 0},
                                 {"teacher": ""}])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        SFTConfig(**bad)
