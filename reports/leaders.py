"""Which method is ahead at each fraction of the budget, in words, for the line above a board's table.

At each fraction (10%, 25%, 50%, 100% of the budget) the leader is the method with the highest
accuracy at matched FLOPs (docs/metrics.md, "Accuracy at matched FLOPs"), and the runner-up the
next. When the leader's 95% interval overlaps the runner-up's, the sentence says they are tied
within intervals; where a method has no interval (one seed) it says so instead of calling a lead.

    leads = board_leads(board)           # one Lead per fraction
    text = lead_sentence(leads)          # "At 10% of the budget grpo-joint leads (61.2% [59.0, 63.1]); ..."
"""

from __future__ import annotations

from dataclasses import dataclass

from reports.boards import Board
from reports.metrics import BUDGET_FRACTIONS
from reports.stats import Estimate


@dataclass(frozen=True)
class Lead:
    """The order at one fraction of the budget: leader and runner-up (None: only one method)."""

    fraction: float
    leader: str
    leader_accuracy: Estimate
    runner_up: str | None
    runner_up_accuracy: Estimate | None

    @property
    def gap_points(self) -> float | None:
        """Leader minus runner-up, in percentage points."""
        if self.runner_up_accuracy is None:
            return None
        return 100.0 * (self.leader_accuracy.value - self.runner_up_accuracy.value)

    @property
    def state(self) -> str:
        """"alone", "ahead" (intervals apart), "tied" (they overlap) or "no interval" (a single seed)."""
        if self.runner_up_accuracy is None:
            return "alone"
        a, b = self.leader_accuracy, self.runner_up_accuracy
        if a.low is None or b.high is None:
            return "no interval"
        return "tied" if a.low <= b.high else "ahead"


def board_leads(board: Board, fractions=BUDGET_FRACTIONS) -> list[Lead]:
    """A Lead per fraction of the budget; fractions where no method has a value are left out.

    Ties on the point value go to the method listed first on the board (the reference leads the table).
    Protocols (`MethodResult.is_protocol`) are not ranked: never leader or runner-up.
    """
    out = []
    for f in fractions:
        ranked = sorted(((m.method, m.accuracy_at[f]) for m in board.methods
                         if not m.is_protocol and m.accuracy_at[f].value is not None),
                        key=lambda x: -x[1].value)  # stable: equal values keep the board's order
        if not ranked:
            continue
        runner = ranked[1] if len(ranked) > 1 else (None, None)
        out.append(Lead(f, ranked[0][0], ranked[0][1], *runner))
    return out


def _pct(est: Estimate) -> str:
    text = f"{100 * est.value:.1f}%"
    if est.low is not None and est.high is not None:
        text += f" [{100 * est.low:.1f}, {100 * est.high:.1f}]"
    return text


def lead_clause(lead: Lead) -> str:
    """One fraction's words, after "At 10% of the budget " (the template adds that part)."""
    head = f"{lead.leader} leads ({_pct(lead.leader_accuracy)})"
    if lead.state == "alone":
        return f"{lead.leader} is the only method ({_pct(lead.leader_accuracy)})"
    if lead.state == "tied":
        return f"{head}, tied within intervals with {lead.runner_up} ({_pct(lead.runner_up_accuracy)})"
    behind = f"{lead.runner_up} is {lead.gap_points:.1f} points behind"
    if lead.state == "no interval":
        return f"{head}, {behind} (single seed: no interval)"
    return f"{head}, {behind}"


def fraction_text(fraction: float) -> str:
    return f"{100 * fraction:g}%"


def lead_sentence(leads: list[Lead]) -> str:
    """All fractions in one sentence: "At 10% of the budget X leads (...); at 100% X leads, Y is 3.4 points behind."."""
    clauses = [f"{'At' if i == 0 else 'at'} {fraction_text(lead.fraction)}{' of the budget' if i == 0 else ''} "
               f"{lead_clause(lead)}" for i, lead in enumerate(leads)]
    return "; ".join(clauses) + "." if clauses else ""
