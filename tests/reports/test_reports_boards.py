"""Boards and findings on hand-made runs whose metrics are known."""

import numpy as np
import pytest

from reports.boards import build_boards, phase_group
from reports.columns import metric_cell
from reports.findings import FAILS, HOLDS, NOT_MEASURED, UNSURE, direction, findings, within_factor
from reports.leaders import board_leads, lead_sentence
from reports.records import to_frames
from reports.stats import Estimate
from tests.reports.factory import make_record, make_recover_record, make_sweep

BUDGET = 1e14
FLOPS = [0.0, 1e12, 1e13, 1e14]


def _run(method, seed, acc, flops=FLOPS, length=3.0, counted=None, **kw):
    """A record with this curve; counted: its counted FLOPs (default: the factory's own run's)."""
    curve = [{"flops": f, "accuracy": a, "mean_length": length} for f, a in zip(flops, acc)]
    if counted is not None:
        kw["flops"] = {"counted": counted}
    return make_record(method, seed=seed, budget_flops=BUDGET, curve=curve, base_accuracy=acc[0],
                       final_accuracy=acc[-1], final_mean_length=length, **kw)


def _board(records):
    boards = build_boards(to_frames(records))
    assert len(boards) == 1
    return boards[0]


def test_targets_ftt_and_savings_match_a_hand_computation():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5], counted=1e14) for s in range(3)]
    records += [_run("opd-multi", s, [0.2, 0.4, 0.5, 0.6], length=4.5, counted=5e13) for s in range(3)]
    board = _board(records)
    # targets from the reference's gain: base 0.2, final 0.5 -> tau_k = 0.2 + k x 0.3
    assert board.reference == "grpo-joint"
    assert board.targets == pytest.approx({0.5: 0.35, 0.75: 0.425, 0.9: 0.47})
    ref, opd = board.method("grpo-joint"), board.method("opd-multi")
    assert board.methods[0] is ref  # the reference leads the table
    # the reference: 0.35 halfway from 1e12 to 1e13 in log10; 0.425 and 0.47 between 1e13 and 1e14
    assert [ref.flops_to_target[k].value for k in (0.5, 0.75, 0.9)] == pytest.approx([10**12.5, 10**13.25, 10**13.7])
    # opd-multi, a non-reference method, reaches every target: 0.35 on the segment from the base point
    # (linear in FLOPs: 0.75 of the way to 1e12), the others in log10 FLOPs between 1e12 and 1e13
    assert [opd.flops_to_target[k].value for k in (0.5, 0.75, 0.9)] == pytest.approx([7.5e11, 10**12.25, 10**12.7])
    assert opd.savings[0.5].value == pytest.approx(1 - 7.5e11 / 10**12.5)
    assert opd.savings[0.75].value == pytest.approx(0.9) and opd.savings[0.9].value == pytest.approx(0.9)
    for k in (0.5, 0.75, 0.9):
        assert (ref.savings[k].value, ref.savings[k].low, ref.savings[k].high) == (0.0, 0.0, 0.0)
    assert opd.length_ratio.value == pytest.approx(1.5)
    assert opd.final_accuracy.value == pytest.approx(0.6) and opd.final_accuracy.stat == "iqm"
    # at matched FLOPs: 10%, 25%, 50% of 1e14, linear in log10 FLOPs between 1e13 and 1e14
    assert [opd.accuracy_at[f].value for f in (0.1, 0.25, 0.5)] == pytest.approx(
        [0.5, 0.5 + 0.1 * np.log10(2.5), 0.5 + 0.1 * np.log10(5)])
    assert ref.auc.value == pytest.approx(0.4) and opd.auc.value == pytest.approx(0.5)
    # the reference's accuracy at opd-multi's own spend (5e13), and opd-multi's final accuracy minus it
    assert opd.relative.reference_at_spend.value == pytest.approx(0.4 + 0.1 * np.log10(5))
    assert opd.relative.minus_reference_at_spend.value == pytest.approx(0.6 - (0.4 + 0.1 * np.log10(5)))
    assert ref.relative.minus_reference_at_spend.value == pytest.approx(0.0)
    assert opd.gain_per_pflop_spent.value == pytest.approx(0.4 / 0.05)
    assert opd.distillation_share.value == pytest.approx(0.052)


def test_seed_noise_gives_intervals_around_the_savings():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5 + 0.01 * s]) for s in range(5)]
    records += [_run("opd-multi", s, [0.2, 0.4, 0.5 + 0.01 * s, 0.6]) for s in range(5)]
    opd = _board(records).method("opd-multi")
    for k in (0.5, 0.75, 0.9):
        assert opd.savings[k].low <= opd.savings[k].value <= opd.savings[k].high
        assert opd.savings[k].n_seeds == 5
    assert opd.curve_low is not None
    spend = opd.relative.minus_reference_at_spend
    assert spend.low <= spend.value <= spend.high


def test_a_run_that_stopped_early_is_carried_flat_to_the_budget():
    records = [_run("grpo-joint", 0, [0.2, 0.3, 0.4, 0.5])]
    records.append(_run("opd-multi", 0, [0.2, 0.45, 0.55], flops=FLOPS[:3]))
    opd = _board(records).method("opd-multi")
    assert opd.curves.grid[-1] == BUDGET and opd.curve_mid[-1] == pytest.approx(0.55)
    assert opd.accuracy_at[0.5].value == pytest.approx(0.55) and opd.final_accuracy.value == pytest.approx(0.55)
    # tau_0.9 = 0.47: a fifth of the way from 0.45 to 0.55, in log10 FLOPs from 1e12 to 1e13
    assert opd.flops_to_target[0.9].value == pytest.approx(10 ** 12.2)
    assert opd.flops_to_target[0.9].stat == "single" and opd.flops_to_target[0.9].low is None


def test_a_method_that_never_reaches_a_target_has_no_savings_there():
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5]) for s in range(3)]
    records += [_run("sft", s, [0.2, 0.25, 0.3, 0.35]) for s in range(3)]
    sft = _board(records).method("sft")
    assert sft.flops_to_target[0.5].value == pytest.approx(1e14)  # tau_0.5 = 0.35, reached at the budget
    assert sft.savings[0.5].value == pytest.approx(1 - 1e14 / 10**12.5)
    for k in (0.75, 0.9):
        assert sft.flops_to_target[k].value is None and sft.savings[k].value is None


def test_a_method_that_stops_early_lower_is_not_ranked_ahead_of_one_above_it_everywhere():
    # sft is above opd-multi at every FLOP; opd-multi stops at 1e13 after a smaller gain, so its gain
    # per PFLOP spent is the larger: the one number that would rank it first
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5]) for s in range(3)]
    records += [_run("sft", s, [0.2, 0.40, 0.50, 0.60], counted=1e14) for s in range(3)]
    records += [_run("opd-multi", s, [0.2, 0.35, 0.45], flops=FLOPS[:3], counted=1e13) for s in range(3)]
    board = _board(records)
    above, early = board.method("sft"), board.method("opd-multi")
    assert early.gain_per_pflop_spent.value > above.gain_per_pflop_spent.value
    for f in (0.1, 0.25, 0.5, 1.0):
        assert above.accuracy_at[f].value > early.accuracy_at[f].value, f
    assert above.auc.value > early.auc.value
    for k in (0.5, 0.75, 0.9):
        if early.savings[k].value is not None:
            assert above.savings[k].value > early.savings[k].value, k
    assert early.savings[0.9].value is None and early.flops_to_target[0.9].value is None  # 0.47: never
    leads = board_leads(board)
    assert [lead.leader for lead in leads] == ["sft"] * 4
    assert "at 100% sft leads" in lead_sentence(leads)
    assert {name for name, _, _ in board.frontier.segments} == {"sft"}
    assert set(board.frontier.leader) == {"sft"}


def test_a_protocol_is_shown_but_never_ranked():
    # recover (claim 4's recovery protocol) is above every method everywhere: it stays on the board,
    # listed after the methods, but leads nothing and is not on the frontier
    records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5]) for s in range(3)]
    records += [_run("opd-multi", s, [0.2, 0.35, 0.45, 0.55]) for s in range(3)]
    records += [_run("recover", s, [0.2, 0.5, 0.6, 0.7]) for s in range(3)]
    board = _board(records)
    assert [m.method for m in board.methods] == ["grpo-joint", "opd-multi", "recover"]
    assert [m.is_protocol for m in board.methods] == [False, False, True]
    assert board.method("recover").accuracy_at[1.0].value > board.method("opd-multi").accuracy_at[1.0].value
    leads = board_leads(board)
    assert [(lead.leader, lead.runner_up) for lead in leads] == [("opd-multi", "grpo-joint")] * 4
    assert "recover" not in lead_sentence(leads)
    assert board.frontier.methods == ["grpo-joint", "opd-multi"] and set(board.frontier.leader) == {"opd-multi"}
    assert len(board.frontier.curves) == 2
    # its savings against the reference are not shown as a ranking; a method's are
    assert metric_cell(board.method("recover"), "savings_k50")["text"] == "not ranked"
    assert metric_cell(board.method("opd-multi"), "savings_k50")["text"].endswith("%")


def test_savings_of_twice_the_references_flops_or_more_say_the_multiple():
    # the reference reaches tau_0.5 = 0.35 at 10^12.5 FLOPs; the others at 10^12, 10^13 and 10^13.5
    curves = {"grpo-joint": [0.2, 0.3, 0.4, 0.5], "fast": [0.2, 0.35, 0.4, 0.5], "slow": [0.2, 0.25, 0.35, 0.5],
              "slower": [0.2, 0.2, 0.3, 0.4]}
    board = _board([_run(method, s, acc) for method, acc in curves.items() for s in range(3)])
    cells = {m: metric_cell(board.method(m), "savings_k50")["text"] for m in curves}
    assert cells == {"grpo-joint": "reference", "fast": "68.4%", "slow": "−216.2% (3.2× the FLOPs)",
                     "slower": "−900.0% (10.0× the FLOPs)"}


def test_a_board_without_the_reference_warns_and_leaves_relative_metrics_empty():
    board = _board([_run("opd-multi", s, [0.2, 0.4, 0.5, 0.6]) for s in range(3)])
    assert board.reference is None and board.targets == {} and board.warnings
    m = board.method("opd-multi")
    assert all(m.savings[k].value is None for k in (0.5, 0.75, 0.9))
    assert m.length_ratio.value is None and m.final_accuracy.value == pytest.approx(0.6)
    assert m.relative.reference_at_spend.value is None and m.auc.value == pytest.approx(0.5)


def test_a_reference_that_does_not_gain_gives_no_targets_instead_of_zero_flops():
    # grpo-joint ends 1 point below its base: every tau_k would be at or below the base, "reached" at 0
    records = [_run("grpo-joint", s, [0.30, 0.31, 0.30, 0.29]) for s in range(3)]
    records += [_run("opd-multi", s, [0.30, 0.30, 0.33, 0.35]) for s in range(3)]
    board = _board(records)
    assert board.reference == "grpo-joint" and board.targets == {}
    assert any("does not improve on the base" in w and "-1.0 points" in w for w in board.warnings)
    for method in ("grpo-joint", "opd-multi"):
        m = board.method(method)
        assert all(m.relative.flops_to_target[k].value is None and m.savings[k].value is None for k in (0.5, 0.75, 0.9))
    # what does not need targets is still there: the reference's accuracy at the method's spend
    m = board.method("opd-multi")
    assert m.relative.reference_at_spend.value is not None
    assert m.relative.minus_reference_at_spend.value == pytest.approx(0.35 - m.relative.reference_at_spend.value)
    claim = findings([board])[0]
    assert claim.rows == [] and claim.verdict == NOT_MEASURED  # no target, so nothing to reach or save


def test_boards_split_by_suite_difficulty_and_budget():
    records = [make_record(suite=s, difficulty=d, seed=0) for s in ("math", "math_code") for d in ("easy", "hard")]
    records.append(make_record(suite="math", difficulty="easy", seed=0, budget_flops=1e15, run_id="other-budget"))
    boards = build_boards(to_frames(records))
    assert [(b.key.suite, b.key.difficulty) for b in boards][:2] == [("math_code", "easy"), ("math_code", "hard")]
    assert len(boards) == 5
    labels = [b.label for b in boards]
    assert len(set(labels)) == 5 and "math · easy · tiny · v1 · 1e+15 FLOPs" in labels


def test_phase_groups():
    assert [phase_group(p) for p in ("expert:math", "stage:code", "distill", "train", "recover:opd", "weird")] == [
        "expert training", "self-GRPO stages", "distillation", "training", "recovery", "other"]


def test_verdict_rules():
    est = lambda v, lo, hi: Estimate(v, lo, hi, 3, "iqm")  # noqa: E731
    assert direction(est(0.4, 0.2, 0.5), 0.0, want_above=True) == HOLDS
    assert direction(est(-0.4, -0.5, -0.2), 0.0, want_above=True) == FAILS
    assert direction(est(0.1, -0.1, 0.3), 0.0, want_above=True) == UNSURE
    assert direction(est(-0.4, -0.5, -0.2), 0.0, want_above=False) == HOLDS
    assert direction(Estimate(0.4, None, None, 1, "single"), 0.0, want_above=True) == UNSURE
    assert direction(Estimate(None, None, None, 0, "none"), 0.0, want_above=True) == NOT_MEASURED
    assert within_factor(est(0.06, 0.05, 0.07), 0.052) == HOLDS
    assert within_factor(est(0.5, 0.4, 0.6), 0.052) == FAILS
    assert within_factor(est(0.1, 0.05, 0.2), 0.052) == UNSURE


def test_findings_on_a_sweep_shaped_like_the_paper_hold():
    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    claims = findings(build_boards(to_frames(records)))
    assert [c.number for c in claims] == [1, 2, 3, 4]
    assert [c.verdict for c in claims] == [HOLDS] * 4
    assert {r.board for r in claims[1].rows} == {"math_code · easy · tiny", "four_domain · easy · tiny"}


def test_each_world_gets_its_own_verdict_side_by_side():
    """Boards of two worlds: a claim's verdict on each world reads that world's rows only, and the
    findings view carries both (one world's single seed leaves it inconclusive, not the other)."""
    from reports.views import claims_view

    records = make_sweep(2 * 3 * 6, suites=("math_code", "four_domain"), difficulties=("easy",))
    records += make_sweep(2 * 6, suites=("math_code", "four_domain"), difficulties=("easy",), profile="direct")
    boards = build_boards(to_frames(records))
    assert [b.key.profile for b in boards] == ["tiny", "tiny", "direct", "direct"]  # the default world first
    claims = findings(boards)
    for claim in claims:
        assert claim.world_verdicts == {"tiny": HOLDS, "direct": UNSURE} and claim.verdict == UNSURE
    slugs = {tuple(vars(b.key).values()): f"b{i}" for i, b in enumerate(boards)}
    view = claims_view(claims, slugs)
    assert view[0]["worlds"] == [{"profile": w, "verdict": v} for w, v in claims[0].world_verdicts.items()]


def test_findings_without_the_runs_are_not_measured_and_one_seed_is_inconclusive():
    only_ref = [make_record("grpo-joint", seed=s) for s in range(3)]
    assert {c.verdict for c in findings(build_boards(to_frames(only_ref)))} == {NOT_MEASURED}
    one_seed = [make_record("grpo-joint", seed=0), make_record("opd-multi", seed=0)]
    assert findings(build_boards(to_frames(one_seed)))[0].verdict == UNSURE


def test_a_run_from_another_base_or_world_is_marked(tmp_path):
    from reports.site import build_site
    from tests.reports.factory import write_runs

    records = [make_record(method=m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    for r in records:
        r["provenance"]["world_version"] = "worked-1"
    records[4]["provenance"]["model_hashes"] = {"base": "0ther" * 4}
    records[5]["provenance"]["world_version"] = "worked-0"
    for r in records[:5]:
        r["provenance"]["rollout"] = "torch"
    records[3]["provenance"]["rollout"] = "vllm"  # the last record names none, as older records do
    board = build_boards(to_frames(records))[0]
    assert board.odd_runs == {records[3]["run_id"], records[4]["run_id"], records[5]["run_id"]}
    assert any("another base model" in w and records[4]["run_id"] in w for w in board.warnings)
    assert any("another world version" in w and records[5]["run_id"] in w for w in board.warnings)
    assert any("another rollout engine than the board's majority (torch)" in w and records[3]["run_id"] in w
               for w in board.warnings)
    clean = build_boards(to_frames(records[:3]))[0]
    assert not clean.odd_runs and not any("another" in w for w in clean.warnings)
    summary = build_site([write_runs(records, tmp_path / "runs")], tmp_path / "site")
    page = next(p for p in summary.pages if "opd-multi" in p)
    html = (tmp_path / "site" / page).read_text()
    for why in ("another rollout engine", "another base model", "another world version"):  # each run, with why
        assert html.count(f">{why}</span>") == 1
    # run settings: a shorter token cap than the board's majority is marked, a record without settings is not
    kept = {"max_new_tokens": 96, "eval_max_new_tokens": 128, "eval_every": 0.1, "eval_early": [0.01],
            "distill_eval_every": 5, "device": "cpu"}
    for r in records[:2]:
        r["settings"] = dict(kept)
    records[2]["settings"] = {**kept, "max_new_tokens": 8}
    board = build_boards(to_frames(records[:3] + [{k: v for k, v in records[3].items() if k != "settings"}]))[0]
    (warning,) = [w for w in board.warnings if "other settings" in w]
    assert records[2]["run_id"] in warning and "max_new_tokens=96" in warning and board.odd_runs == {
        records[2]["run_id"], records[3]["run_id"]}


def test_a_run_evaluated_otherwise_is_marked_though_no_record_keeps_its_settings():
    """A shorter token cap or fewer held-out prompts change the curve from its first point: the base
    accuracy (same base, same prompts, same cap: the same number) and the evaluation size tell."""
    records = [make_record(method=m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    for r in records:
        r.pop("settings", None)  # as older records
    board = build_boards(to_frames(records))[0]
    assert not board.odd_runs and not board.warnings
    altered = make_record(method="my-plugin", seed=5, suite_hash="0" * 64)  # a cache file edited, say
    board = build_boards(to_frames(records + [altered]))[0]
    assert board.odd_runs == {altered["run_id"]}
    (warning,) = [w for w in board.warnings if "another suite" in w]
    assert "drew their prompts from another suite (content hash)" in warning and altered["run_id"] in warning
    capped = make_record(method="my-plugin", seed=5, base_accuracy=0.22, eval_size=50)
    board = build_boards(to_frames(records + [capped]))[0]
    assert board.odd_runs == {capped["run_id"]}
    assert any("another number of held-out prompts per domain than the board's majority (1000)" in w
               and capped["run_id"] in w for w in board.warnings)
    assert any("another base accuracy" in w and "(0.31)" in w for w in board.warnings)


def test_a_run_whose_phases_drew_samples_otherwise_than_its_methods_others_is_marked():
    records = [make_record(method=m, seed=s) for m in ("grpo-joint", "opd-multi", "self-grpo") for s in range(3)]
    for r in records[3:6]:
        r["phase_streams"] = "own"  # opd-multi's experts side by side; no other method splits
    assert not build_boards(to_frames(records))[0].odd_runs  # a majority per method, not per board
    records[5]["phase_streams"] = "shared"
    board = build_boards(to_frames(records))[0]
    assert board.odd_runs == {records[5]["run_id"]}
    (warning,) = [w for w in board.warnings if "phases' samples" in w]
    assert "than the majority of opd-multi's runs (own)" in warning and records[5]["run_id"] in warning


def test_a_ranked_methods_run_that_read_held_out_accuracy_is_marked_and_a_protocols_is_not():
    records = [make_record(method=m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    for r in records:
        r["heldout_reads"] = 0
    records[0].pop("heldout_reads")  # a record made before reads were counted
    recovery = make_recover_record(seed=0, lost=0.1, ratio=2.0)
    recovery["heldout_reads"] = 12  # the protocol's checks: its measurement
    assert not build_boards(to_frames(records + [recovery]))[0].odd_runs
    records[4]["heldout_reads"] = 2  # opd-multi with its experts scored
    board = build_boards(to_frames(records + [recovery]))[0]
    assert board.odd_runs == {records[4]["run_id"]}
    (warning,) = [w for w in board.warnings if "held-out accuracy" in w]
    assert warning.startswith("1 run(s) read held-out accuracy while they ran") and records[4]["run_id"] in warning
    assert board.run_marks == {records[4]["run_id"]: ["read held-out accuracy"]}  # its method page says so


def test_a_board_made_on_two_kinds_of_cpu_says_which_made_how_many():
    records = [make_record(method=m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    assert not any("kinds of CPU" in w for w in build_boards(to_frames(records))[0].warnings)
    for r in records[3:5]:
        r["provenance"]["hardware"]["cpu"] = "Intel Xeon"
    board = build_boards(to_frames(records))[0]
    assert [w for w in board.warnings if "kinds of CPU" in w] == [
        "runs were made on 2 kinds of CPU (synthetic: 4, Intel Xeon: 2); a record is rebuilt value for value "
        "only on the kind of CPU it names"]
    assert not board.odd_runs  # another CPU is no other base: nothing on the board is marked as differing


def test_a_metrics_interval_does_not_hang_on_whether_another_metric_is_defined():
    """Each metric draws its own bootstrap samples: opd-multi without a `distill` phase (its share
    undefined) keeps every other interval, lengths and accuracies at a share of the budget included."""
    def runs(phase):
        records = [_run("grpo-joint", s, [0.2, 0.3, 0.4, 0.5 + 0.01 * s]) for s in range(5)]
        for s in range(5):
            run = _run("opd-multi", s, [0.2, 0.4, 0.5 + 0.02 * s, 0.6 + 0.01 * s], length=4.0 + 0.3 * s)
            run["ledger"] = [{**row, "phase": phase if row["phase"] == "distill" else row["phase"]}
                             for row in run["ledger"]]
            records.append(run)
        return _board(records).method("opd-multi")

    with_share, without = runs("distill"), runs("late")
    assert with_share.distillation_share.value is not None and without.distillation_share.value is None
    assert with_share.counted_flops == without.counted_flops
    for name in ("mean_length", "length_ratio", "auc", "final_accuracy"):
        assert getattr(with_share, name) == getattr(without, name), name
        assert getattr(without, name).low < getattr(without, name).high, name  # a real interval was drawn
    assert with_share.accuracy_at == without.accuracy_at
