"""Distillation's cost (reports.paired) on a record whose answer is known by hand: the FLOPs past the
experts' at which the student takes each share of its experts' gain, and the curve of that share that
benchmarks/full_budget_readout.py's cost figure draws."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from reports import paired

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "full_budget_readout.py"


def _record(accuracy_at: dict[float, float], budget_flops: float = 1.5e12) -> dict:
    """Experts spend 6e11 + 4e11 counted FLOPs, then distillation; the student starts at 20%."""
    ledger = [{"category": "counted", "phase": "expert:math", "flops": 6e11},
              {"category": "counted", "phase": "expert:code", "flops": 4e11},
              {"category": "eval", "phase": "eval", "flops": 9e11},  # not the experts'
              {"category": "counted", "phase": "distill", "flops": 5e11}]
    curve = [{"flops": f, "accuracy": a} for f, a in accuracy_at.items()]
    return {"curve": curve, "ledger": ledger, "final_accuracy": curve[-1]["accuracy"], "budget_flops": budget_flops}


def test_the_cost_of_each_share_of_the_gain_is_read_where_the_curve_takes_it():
    # the experts' mean is 40%, so the gain is 20 points: half is 30%, three quarters 35%, 90% 38%
    record = _record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.3, 1.2e12: 0.35, 1.5e12: 0.38})
    cost = paired.distillation_cost(record, {"math": 0.5, "code": 0.3})
    assert cost["expert_flops"] == 1e12 and cost["base"] == 0.2 and cost["experts_mean"] == pytest.approx(0.4)
    assert cost["final_gain_share"] == pytest.approx(0.9)
    for p, distilled in (("0.5", 1e11), ("0.75", 2e11), ("0.9", 5e11)):
        assert cost["at"][p]["distill_flops"] == pytest.approx(distilled)
        assert cost["at"][p]["share_of_expert_flops"] == pytest.approx(distilled / 1e12)
    # from distillation's start on: (distillation FLOPs / experts' FLOPs, share of the gain)
    assert [v for point in cost["curve"] for v in point] == pytest.approx([0, 0, 0.1, 0.5, 0.2, 0.75, 0.5, 0.9])


def test_a_share_between_evaluations_lies_between_them_and_one_never_taken_is_none():
    record = _record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.28, 1.2e12: 0.32, 1.4e12: 0.34})
    cost = paired.distillation_cost(record, {"math": 0.5, "code": 0.3})
    assert 0.1 < cost["at"]["0.5"]["share_of_expert_flops"] < 0.2
    assert cost["at"]["0.75"] is None and cost["at"]["0.9"] is None
    assert cost["final_gain_share"] == pytest.approx(0.7)
    # experts no better than the base: no gain to take, so no cost and no curve
    flat = paired.distillation_cost(record, {"math": 0.2, "code": 0.2})
    assert flat["at"] == {} and flat["curve"] is None and flat["final_gain_share"] is None


def test_a_share_taken_only_past_the_budget_is_not_taken():
    # the last step took the run from 1.2e12 to 1.5e12 counted FLOPs, past its budget of 1.3e12
    record = _record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.3, 1.2e12: 0.35, 1.5e12: 0.38}, budget_flops=1.3e12)
    cost = paired.distillation_cost(record, {"math": 0.5, "code": 0.3})
    assert cost["at"]["0.9"] is None and cost["at"]["0.75"]["distill_flops"] == pytest.approx(2e11)
    at_budget = 0.35 + 0.03 * math.log10(1.3 / 1.2) / math.log10(1.5 / 1.2)
    assert cost["final_gain_share"] == pytest.approx((at_budget - 0.2) / 0.2)
    assert cost["curve"][-1] == pytest.approx((0.3, (at_budget - 0.2) / 0.2))


def test_the_cost_figure_draws_each_study_and_keeps_what_it_drew_on_bad_input(tmp_path):
    cost = paired.distillation_cost(_record({0.0: 0.2, 1e12: 0.2, 1.1e12: 0.3, 1.5e12: 0.38}),
                                     {"math": 0.5, "code": 0.3})
    result = tmp_path / "full_budget-long-distill.json"
    result.write_text(json.dumps({"suite": "math_code", "arm": "long-distill",
                                  "seeds": {"0": {"distillation_cost": cost}}}))
    figure = tmp_path / "cost.png"
    drawn = subprocess.run([sys.executable, str(SCRIPT), str(figure), str(result)], capture_output=True, text=True)
    assert drawn.returncode == 0, drawn.stderr[-3000:]
    before = figure.read_bytes()
    assert len(before) > 10_000
    not_a_result = tmp_path / "records.json"
    not_a_result.write_text("[1, 2]")
    for bad_input in (tmp_path / "missing.json", tmp_path, not_a_result):
        bad = subprocess.run([sys.executable, str(SCRIPT), str(figure), str(result), str(bad_input)],
                             capture_output=True, text=True)
        last = bad.stderr.strip().splitlines()[-1]
        assert bad.returncode == 2 and "error:" in last and str(bad_input) in last
    assert figure.read_bytes() == before


def test_a_study_on_two_budgets_reads_claim_1_with_seeds_paired_and_distillations_cost(tmp_path):
    """Joint GRPO at 2e13 reaches its tau_0.9 (0.426) at 1e13; opd-multi at 4e13 spends 1.8e13 on its
    experts (mean 45%, base 30%: a gain of 15 points) and reaches 50%, 75% and 90% of it 1e12, 4e12 and
    1.2e13 FLOPs of distillation later: 5.6%, 22.2% and 66.7% of the experts' FLOPs."""
    from reports.site import build_site
    from reports.studies import load_study
    from tests.reports.factory import make_two_budget_records, write_study

    joint, opd = make_two_budget_records()
    sweeps = ["bench sweep --methods grpo-joint --seeds 3 --out runs-long/runs",
              "bench sweep --methods opd-multi --seeds 3 --budget 4e13 --out runs-long/runs-long-distill"]
    study = load_study(write_study(tmp_path / "long", joint + opd, sweep=sweeps, claims=[1], recovery_over=None))
    assert study.sweep == tuple(sweeps)
    board = tmp_path / "board"
    board.mkdir()
    (board / "r.json").write_text(json.dumps(joint[0]))
    build_site([board], tmp_path / "site", studies=[study])
    results = json.loads((tmp_path / "site" / "results.json").read_text())
    entry = next(s for s in results["studies"] if s["slug"] == "long")
    (claim,) = entry["findings"]
    (cost,) = entry["distillation_cost"]
    assert cost["budget_flops"] == 4e13 and cost["seeds"]["0"]["experts"] == {"math": 0.5, "code": 0.4}
    assert {p: e["value"] for p, e in cost["over_seeds"].items()} == pytest.approx(
        {"0.5": 1 / 18, "0.75": 4 / 18, "0.9": 12 / 18})
    decides = [r for r in claim["rows"] if r["decides"]]
    assert len(decides) == 1 and "τ0.9 = 0.426" in decides[0]["measure"].replace("₀.₉", "0.9")
    # opd-multi needs more than joint GRPO's 1e13 on every seed: savings below 0, the claim does not hold
    assert decides[0]["estimate"]["high"] < 0 and claim["verdict"] == "does not hold at this scale"
    # 0.426 lies 60% of the way from 0.4125 to 0.435, read linearly in log FLOPs between 2.2e13 and 3e13
    reached = 2.2e13 * (3 / 2.2) ** 0.6
    assert decides[0]["estimate"]["value"] == pytest.approx(1 - reached / 1e13)
    assert f"seed 0: opd-multi {reached:.2e}, grpo-joint 1.00e13".replace("e+", "e") in decides[0]["note"]
    finals = [r for r in claim["rows"] if "final accuracy" in r["measure"]]
    assert sorted(r["estimate"]["value"] for r in finals) == pytest.approx([0.44, 0.44])
    page = (tmp_path / "site" / "studies" / "long.html").read_text()
    assert sweeps[0] in page and sweeps[1] in page and "make its 6 runs together" in page
    assert "Distillation's cost against the experts' gain" in page
    for cell in ("1.00e12 (5.6%)", "4.00e12 (22.2%)", "1.20e13 (66.7%)", "93.3%", "math 50.0%, code 40.0%",
                 "45.0% (30.0%)"):
        assert cell in page, cell
    # over three equal seeds the IQM is each seed's share, its interval a point
    assert "5.6% [5.6%, 5.6%]" in page and "66.7% [66.7%, 66.7%]" in page


def test_a_study_on_one_board_reads_claim_1_by_the_findings_rule_with_both_final_accuracies(tmp_path):
    """opd-multi on joint GRPO's board at 2e13, its experts spending 1.8e13 and the student ending at 38%,
    below joint GRPO's tau_0.9 (0.426): claim 1 does not hold by the findings page's rule, and each method's
    final accuracy is shown beside as context, as the paired reading shows it."""
    from reports.findings import CONTEXT, FAILS
    from reports.studies import load_study, study_view
    from tests.reports.factory import make_curve_record, make_two_budget_records, write_study

    joint, _ = make_two_budget_records()
    opd = [make_curve_record("opd-multi", s, 2e13, [(0.0, 0.30), (1.8e13, 0.30), (1.9e13, 0.36), (2e13, 0.38)],
                             [("expert:math", 9e12), ("expert:code", 9e12), ("distill", 2e12)]) for s in range(3)]
    sweeps = ["bench sweep --methods grpo-joint --seeds 3 --out runs/runs",
              "bench sweep --methods opd-multi --seeds 3 --out runs/runs-to-budget"]
    study = load_study(write_study(tmp_path / "one", joint + opd, sweep=sweeps, claims=[1], recovery_over=None))
    _, (claim,), _ = study_view(study, [f"records/{r['run_id']}.json" for r in study.records])
    assert claim.verdict == FAILS and [r.decides for r in claim.rows].count(True) == 1
    finals = {r.measure: r.estimate.value for r in claim.rows if "final accuracy" in r.measure}
    assert finals == pytest.approx({"opd-multi's final accuracy at 2e13": 0.38,
                                    "grpo-joint's final accuracy at 2e13": 0.44})
    assert {(r.decides, r.verdict) for r in claim.rows if "final accuracy" in r.measure} == {(False, CONTEXT)}


def test_a_studys_cost_section_names_the_papers_share_for_each_number_of_domains(tmp_path):
    """With opd-multi on math_code and on four_domain, the cost section gives the paper's whole distillation
    for both: 5.2% of the experts' FLOPs with two domains, 8.0% with four."""
    import re

    from reports.site import build_site
    from reports.studies import load_study
    from tests.reports.factory import make_two_budget_records, write_study

    joint, opd = make_two_budget_records()
    domains = ["math", "code", "graphs", "strings"]
    four = [{**r, "suite": "four_domain", "run_id": r["run_id"].replace("math_code", "four_domain"),
             "domains": domains, "base_domain_accuracy": dict.fromkeys(domains, 0.30),
             "final_domain_accuracy": dict.fromkeys(domains, 0.44),
             "method_metrics": {f"expert_heldout_accuracy:{d}": a for d, a in zip(domains, (0.5, 0.4, 0.5, 0.4))}}
            for r in opd]
    sweeps = ["bench sweep --methods grpo-joint --suites math_code --seeds 3 --out runs-long/runs",
              "bench sweep --methods opd-multi --suites math_code,four_domain --seeds 3 --budget 4e13 --out "
              "runs-long/runs-long-distill"]
    study = load_study(write_study(tmp_path / "both", joint + opd + four, sweep=sweeps, claims=[1],
                                   recovery_over=None))
    assert not study.skipped and len(study.records) == 9
    board = tmp_path / "board"
    board.mkdir()
    (board / "r.json").write_text(json.dumps(joint[0]))
    build_site([board], tmp_path / "site", studies=[study])
    entry = next(s for s in json.loads((tmp_path / "site" / "results.json").read_text())["studies"])
    assert len(entry["distillation_cost"]) == 2
    page = re.sub(r"\s+", " ", (tmp_path / "site" / "studies" / "both.html").read_text())
    assert "(the paper's whole distillation, as a share of the experts' FLOPs: 5.2% with 2 domains, 8.0% with 4 " \
        "domains)" in page


def test_a_pair_on_another_suite_is_read_after_math_codes_as_context(tmp_path):
    """With joint GRPO and opd-multi on two budgets on math_code and on four_domain, claim 1 is decided by
    math_code's tau_0.9 alone; four_domain's pair is read the same way after it, every row context, its
    savings those of its own curves, and its curves are drawn after math_code's. Where opd-multi on
    four_domain gets nowhere (it never reaches a target), the verdict is still math_code's."""
    from reports.findings import CONTEXT, FAILS
    from reports.studies import load_study, study_view
    from tests.reports.factory import make_curve_record, make_two_budget_records, write_study

    joint, opd = make_two_budget_records()
    domains = ["math", "code", "graphs", "strings"]

    def four_domain(r: dict) -> dict:
        return {**r, "suite": "four_domain", "run_id": r["run_id"].replace("math_code", "four_domain"),
                "domains": domains, "base_domain_accuracy": dict.fromkeys(domains, 0.30),
                "final_domain_accuracy": dict.fromkeys(domains, r["final_accuracy"])}

    four_joint = [four_domain(r) for r in joint]
    flat = [four_domain(make_curve_record("opd-multi", s, 4e13, [(0.0, 0.30), (1.8e13, 0.30), (4e13, 0.31)],
                                          [("expert:math", 9e12), ("expert:code", 9e12), ("distill", 2.2e13)]))
            for s in range(3)]
    sweeps = ["bench sweep --methods grpo-joint --suites math_code,four_domain --seeds 3 --out r/runs",
              "bench sweep --methods opd-multi --suites math_code,four_domain --seeds 3 --budget 4e13 --out r/long"]
    study = load_study(write_study(tmp_path / "both", joint + opd + four_joint + flat, sweep=sweeps, claims=[1],
                                   recovery_over=None))
    _, (claim,), drawn = study_view(study, [f"records/{r['run_id']}.json" for r in study.records])
    # each suite's curves drawn, math_code's first, four_domain's captioned as context
    assert [path.rsplit("/", 1)[-1] for path, *_ in drawn] == ["curves-math_code-easy-tiny.svg",
                                                              "curves-four_domain-easy-tiny.svg"]
    assert "claim 1 reads where" in drawn[0][3] and "context beside claim 1" in drawn[1][3]
    suites = [r.board.split(" · ")[0] for r in claim.rows]
    assert suites == ["math_code"] * 5 + ["four_domain"] * 5  # three targets and two final accuracies each
    assert [r.decides for r in claim.rows].count(True) == 1 and claim.rows[2].decides
    assert claim.verdict == FAILS == claim.rows[2].verdict
    four = claim.rows[5:]
    assert {(r.decides, r.verdict, r.paper) for r in four} == {(False, CONTEXT, "— (claimed on math_code)"),
                                                                (False, CONTEXT, "—")}
    assert all(r.estimate.value is None and "never reaches it on seed 0, 1, 2" in r.note for r in four[:3])
    assert [r.estimate.value for r in four[3:]] == pytest.approx([0.31, 0.44])


def test_claim_1_with_seeds_paired_reads_the_interval_and_names_a_seed_of_one_method():
    """Seeds paired at tau_0.9 (0.426), which joint GRPO reaches at 1e13 on every seed. One opd-multi
    seed of three never reaches it and the others save 50%: its savings are minus infinity, the
    interval runs from there to above 0, and the claim is inconclusive; with all three stuck it does
    not hold. An opd-multi seed that joint GRPO has no run for is named and makes it inconclusive."""
    from reports.findings import FAILS, HOLDS, UNSURE
    from tests.reports.factory import make_curve_record, make_two_budget_records

    joint, _ = make_two_budget_records()
    phases = [("expert:math", 1e12), ("expert:code", 1e12), ("distill", 3.8e13)]

    def opd(seed: int, reaches: bool) -> dict:
        top = 0.44 if reaches else 0.40
        return make_curve_record("opd-multi", seed, 4e13, [(0.0, 0.30), (5e12, top), (4e13, top)], phases)

    def row(joint_seeds, opd_runs):
        by_seed = {r["seed"]: r for r in joint if r["seed"] in joint_seeds}
        (out,) = paired.matched_accuracy({0.9: 0.426}, by_seed, {r["seed"]: r for r in opd_runs})
        return out

    good = row({0, 1, 2}, [opd(s, True) for s in range(3)])
    assert good["verdict"] == HOLDS and good["why"] == "" and good["savings"].low > 0
    one = row({0, 1, 2}, [opd(0, True), opd(1, True), opd(2, False)])
    assert one["savings"].value is None and one["savings"].low == -math.inf and one["savings"].high > 0
    assert one["verdict"] == UNSURE and one["why"] == "opd-multi never reaches it on seed 2"
    stuck = row({0, 1, 2}, [opd(s, False) for s in range(3)])
    assert stuck["verdict"] == FAILS and stuck["savings"].high == -math.inf
    assert row({2}, [opd(2, False)])["verdict"] == UNSURE  # one seed: no interval, no verdict
    unpaired = row({0, 1}, [opd(s, True) for s in range(3)])
    assert unpaired["verdict"] == UNSURE and sorted(unpaired["seeds"]) == [0, 1]
    assert unpaired["why"] == "seed 2 has a run of one method only, left out"
