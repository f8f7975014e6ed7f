"""The metrics the site shows, by download name: titles, units, meanings, and the headline table's columns.

Every name is a key of `reports.boards.MethodResult.metrics()` (and a column of results.csv);
docs/metrics.md defines each. The headline table shows matched-FLOP and matched-accuracy metrics
only; "gain per PFLOP spent" is in the downloads and nowhere else (it rewards stopping early).
"""

from __future__ import annotations

from reports.boards import MethodResult, gain_name
from reports.formatting import fmt_estimate
from reports.metrics import TARGET_GAINS

MAIN_TARGET = 0.75  # the target gain whose FLOPs to target the headline table shows (all are on method pages)


def tau_label(k: float) -> str:
    """τ₀.₇₅ for k = 0.75: the target at that share of the reference's gain."""
    return "τ" + f"{k:g}".translate(str.maketrans("0123456789.", "₀₁₂₃₄₅₆₇₈₉."))


# every metric a page shows: download name -> (title, unit, what it means); docs/metrics.md defines each
METRICS: dict[str, tuple[str, str, str]] = {
    "final_accuracy": ("Final accuracy", "acc", "held-out accuracy at 100% of the budget (read on the curve where "
                       "the run's last step crossed it, carried flat where the run stopped before)"),
    **{f"accuracy_at_{p}pct": (f"Acc. at {p}%", "acc", f"held-out accuracy at {p}% of the budget, read on the curve "
                               "(linear in log FLOPs; carried flat after a run stops)") for p in (10, 25, 50)},
    **{f"flops_to_target_{gain_name(k)}": (f"FLOPs to {tau_label(k)}", "flops",
                                           f"counted FLOPs until the aggregate curve first reaches {tau_label(k)} = "
                                           f"base + {k:g} × the reference's gain") for k in TARGET_GAINS},
    **{f"savings_{gain_name(k)}": (f"Savings at {tau_label(k)}", "pct",
                                   f"1 − FLOPs to {tau_label(k)} / the reference's FLOPs to it")
       for k in TARGET_GAINS},
    "auc": ("AUC", "acc", "area under the curve: mean accuracy over log FLOPs from 1% of the budget to the budget"),
    "reference_accuracy_at_spend": ("Reference at this spend", "acc",
                                    "the reference's accuracy at this method's counted FLOPs"),
    "accuracy_minus_reference_at_spend": ("Final − reference at this spend", "pts",
                                          "final accuracy minus the reference's accuracy at the same counted FLOPs"),
    "mean_length": ("Mean length", "len", "mean generated tokens on held-out prompts"),
    "length_ratio": ("Length ratio", "ratio", "mean length / the reference's"),
    "distillation_share": ("Distillation share", "pct",
                           "distillation FLOPs / expert or stage FLOPs, at the stopping rule (whole run)"),
    "distillation_share_plateau": ("Distillation share at plateau", "pct",
                                   "distillation FLOPs / expert or stage FLOPs at the first evaluation within one "
                                   "binomial standard error of the best held-out accuracy during distillation"),
    "expert_tail_share": ("Expert patience tail", "pct",
                          "FLOPs experts spent after they stopped improving / all expert FLOPs"),
    "counted_flops": ("Counted FLOPs", "flops", "FLOPs charged toward the budget"),
    "base_accuracy": ("Base accuracy", "acc", "accuracy of the starting model"),
    "self_teacher_reduction": ("Self-teacher reduction", "ratio", "recovery FLOPs, GRPO / self-OPD"),
}
# the headline table (index page); the rest is on method pages and in the downloads
COLUMNS = ("final_accuracy", "accuracy_at_10pct", "accuracy_at_25pct", "accuracy_at_50pct",
           f"flops_to_target_{gain_name(MAIN_TARGET)}", *(f"savings_{gain_name(k)}" for k in TARGET_GAINS), "auc",
           "mean_length", "length_ratio", "distillation_share")


def metric_cell(m: MethodResult, name: str) -> dict[str, str]:
    """A table cell for one metric: value, interval, sort key, tooltip; "not reached" where a curve never crosses."""
    est = m.metrics()[name]
    _, unit, _ = METRICS[name]
    if name.startswith("savings_") and m.is_reference:
        return {"text": "reference", "interval": "", "sort": "0.0", "tip": "the reference itself"}
    if name.startswith("savings_") and m.is_protocol:  # its FLOPs buy a measurement, not its student alone
        return {"text": "not ranked", "interval": "", "sort": "",
                "tip": "a protocol is not ranked against the reference"}
    missing = "—"
    if name.startswith(("savings_", "flops_to_target_")):
        ftt = m.flops_to_target[next(k for k in TARGET_GAINS if name.endswith(gain_name(k)))]
        if ftt.n_seeds and ftt.value is None:
            missing = "not reached"
    cell = fmt_estimate(est, unit, missing)
    if name.startswith("savings_") and est.value is not None and est.value <= -1:
        # −1883% reads better as what it is: 19.8 times the reference's FLOPs to the same accuracy
        cell["text"] += f" ({1 - est.value:.1f}× the FLOPs)"
    return cell
