"""The sentence above each board's table: which method is ahead at each fraction of the budget."""

from types import SimpleNamespace

import pytest

from reports.leaders import board_leads, lead_clause, lead_sentence
from reports.stats import Estimate


def _est(value, low=None, high=None):
    return Estimate(value, low, high, 3 if low is not None else 1, "iqm" if low is not None else "single")


def _board(**methods):
    """methods: name -> {fraction: Estimate}."""
    return SimpleNamespace(methods=[SimpleNamespace(method=name, accuracy_at=at, is_protocol=name == "recover")
                                    for name, at in methods.items()])


def test_the_leader_at_each_fraction_is_the_highest_and_the_gap_is_in_points():
    board = _board(a={0.1: _est(0.612, 0.590, 0.631), 1.0: _est(0.70, 0.69, 0.71)},
                   b={0.1: _est(0.500, 0.480, 0.520), 1.0: _est(0.666, 0.65, 0.68)})
    leads = board_leads(board, (0.1, 1.0))
    assert [(lead.leader, lead.runner_up, lead.state) for lead in leads] == [("a", "b", "ahead"), ("a", "b", "ahead")]
    assert leads[1].gap_points == pytest.approx(3.4)
    assert lead_sentence(leads) == ("At 10% of the budget a leads (61.2% [59.0, 63.1]), b is 11.2 points behind; "
                                    "at 100% a leads (70.0% [69.0, 71.0]), b is 3.4 points behind.")


def test_overlapping_intervals_are_called_a_tie():
    board = _board(a={1.0: _est(0.62, 0.58, 0.66)}, b={1.0: _est(0.60, 0.57, 0.63)}, c={1.0: _est(0.1, 0.0, 0.2)})
    lead = board_leads(board, (1.0,))[0]
    assert (lead.leader, lead.runner_up, lead.state) == ("a", "b", "tied")
    assert lead_clause(lead) == "a leads (62.0% [58.0, 66.0]), tied within intervals with b (60.0% [57.0, 63.0])"


def test_a_single_seed_gives_no_lead_and_one_method_is_alone():
    lead = board_leads(_board(a={1.0: _est(0.7)}, b={1.0: _est(0.6, 0.5, 0.65)}), (1.0,))[0]
    assert lead.state == "no interval" and "single seed" in lead_clause(lead)
    alone = board_leads(_board(a={1.0: _est(0.7, 0.6, 0.8)}), (1.0,))[0]
    assert alone.state == "alone" and lead_clause(alone) == "a is the only method (70.0% [60.0, 80.0])"


def test_equal_accuracies_go_to_the_method_listed_first_and_missing_values_are_skipped():
    board = _board(ref={1.0: _est(0.5, 0.4, 0.6)}, other={1.0: _est(0.5, 0.4, 0.6)},
                   none={1.0: Estimate(None, None, None, 0, "none")})
    assert board_leads(board, (1.0,))[0].leader == "ref"
    assert board_leads(_board(x={1.0: Estimate(None, None, None, 0, "none")}), (1.0,)) == []
    assert lead_sentence([]) == ""


def test_a_protocol_is_never_leader_or_runner_up():
    board = _board(recover={1.0: _est(0.9, 0.85, 0.95)}, a={1.0: _est(0.6, 0.55, 0.65)})
    alone = board_leads(board, (1.0,))[0]
    assert (alone.leader, alone.runner_up, alone.state) == ("a", None, "alone")
    assert board_leads(_board(recover={1.0: _est(0.9, 0.85, 0.95)}), (1.0,)) == []
