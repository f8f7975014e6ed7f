"""`bench compare`'s reading: a run against its reference record (reports/compare.py)."""

import copy

from reports.compare import compare, differences, match, summary_line
from tests.reports.factory import make_record


def rerun(record: dict) -> dict:
    """The same run made again later, under another name: only times, provenance stamps and the name
    differ."""
    again = copy.deepcopy(record)
    again["run_id"] = "mine"  # bench run --run-name mine
    again["wall_s"] = 999.0
    again["throughput"] = {"tokens_per_s": 1.0}
    for point in again["curve"]:
        point["wall_s"] = 7.0
    for row in again["ledger"]:
        row["seconds"] = 3.0
    again["provenance"].update(created="2027-01-01T00:00:00Z", git_commit="f" * 40, code_hash="beef" * 4)
    return again


def test_a_rerun_that_differs_only_in_times_and_stamps_is_equal():
    reference = make_record("opd-multi", seed=1)
    found = compare(rerun(reference), reference)
    assert found.verdict == "equal" and not found.inputs and not found.outcome and not found.environment
    assert "rows" in summary_line(found)


def test_one_changed_value_is_found_and_named():
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    again["curve"][2]["accuracy"] += 0.001
    again["steps"][-1]["loss"] = 0.5
    found = compare(again, reference)
    assert found.verdict == "differs"
    assert [d.path for d in found.outcome] == ["curve[2].accuracy", f"steps[{len(again['steps']) - 1}].loss"]
    assert summary_line(found).startswith("curve[2].accuracy:") and "2 values differ" in summary_line(found)


def test_a_longer_curve_and_a_missing_field_differ():
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    again["curve"].append(copy.deepcopy(again["curve"][-1]))
    del again["method_metrics"]
    paths = [d.path for d in compare(again, reference).outcome]
    assert f"curve[{len(reference['curve'])}]" in paths and "method_metrics" in paths


def test_another_base_is_another_experiment_whose_outcome_is_not_read():
    reference = make_record("sft", seed=0)
    again = rerun(reference)
    again["provenance"]["model_hashes"]["base"] = "0" * 16
    again["final_accuracy"] = 0.99
    found = compare(again, reference)
    assert found.verdict == "other inputs" and found.outcome == []
    assert [d.path for d in found.inputs] == ["provenance.model_hashes.base"]


def test_a_config_or_budget_change_is_another_experiment():
    reference = make_record("grpo-joint", seed=0)
    for field, value in (("method_config", {"lr": 2e-5}), ("budget_flops", 1e14), ("eval_size", 10)):
        found = compare({**rerun(reference), field: value}, reference)
        assert found.verdict == "other inputs" and found.inputs[0].path.startswith(field)


def test_a_key_only_one_record_has_is_listed_and_never_decides():
    # a run hashes every model its world had built (the external teacher once anything had asked
    # for it); newer code writes config options and record fields that older records lack
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    again["provenance"]["model_hashes"]["external"] = "e" * 16
    again["method_config"]["std"] = "population"
    again["curve"][1]["new_figure"] = 0.5
    found = compare(again, reference)
    assert found.verdict == "equal" and not found.inputs and not found.outcome
    assert [d.path for d in found.unshared] == ["method_config.std", "provenance.model_hashes.external",
                                                "curve[1].new_figure"]


def test_a_reference_made_before_records_kept_their_settings_is_compared_on_the_rest():
    reference = make_record("grpo-joint", seed=0)
    reference.pop("settings", None)
    reference["provenance"].pop("rollout", None)
    again = rerun(reference)
    again["settings"] = {"max_new_tokens": 96, "eval_every": 0.1}
    again["provenance"]["rollout"] = "torch"
    found = compare(again, reference)
    assert found.verdict == "equal" and not found.inputs
    assert [d.path for d in found.unshared] == ["settings", "provenance.rollout"]


def test_phases_that_drew_their_samples_otherwise_are_another_experiment():
    reference = {**make_record("opd-multi", seed=0), "phase_streams": "shared"}
    side_by_side = {**rerun(reference), "phase_streams": "own"}
    found = compare(side_by_side, reference)
    assert found.verdict == "other inputs" and [d.path for d in found.inputs] == ["phase_streams"]
    older = {k: v for k, v in reference.items() if k != "phase_streams"}  # made before records kept it
    found = compare(side_by_side, older)
    assert found.verdict == "equal" and [d.path for d in found.unshared] == ["phase_streams"]


def test_a_field_the_reference_has_and_the_run_lacks_differs():
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    del again["samples"]
    assert [d.path for d in compare(again, reference).outcome] == ["samples"]


def test_a_list_item_on_one_side_is_a_difference_not_a_new_key():
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    again["domains"] = [*again["domains"], "graphs"]
    found = compare(again, reference)
    assert found.verdict == "other inputs" and found.inputs[0].path.startswith("domains[")


def test_the_environment_is_shown_never_judged():
    reference = make_record("grpo-joint", seed=0)
    again = rerun(reference)
    again["provenance"]["hardware"]["torch_threads"] = 2
    again["provenance"]["packages"]["torch"] = "2.12.0"
    found = compare(again, reference)
    assert found.verdict == "equal"
    assert {d.path for d in found.environment} == {"provenance.packages.torch", "provenance.hardware.torch_threads"}


def test_ledger_rows_in_another_order_are_the_same_ledger():
    reference = make_record("opd-multi", seed=0)
    again = rerun(reference)
    again["ledger"].reverse()
    assert compare(again, reference).verdict == "equal"


def test_a_bool_is_not_a_number_and_nested_values_are_exact():
    assert differences(True, 1) and differences({"a": [1.0, 2.0]}, {"a": [1.0, 2.0000000001]})
    assert differences({"a": 1}, {"a": 1.0}) == []  # JSON writes 1.0 and 1 for the same number


def test_records_are_matched_by_method_suite_difficulty_profile_and_seed():
    references = [make_record("grpo-joint", seed=s) for s in range(2)]
    records = [rerun(references[1]), make_record("grpo-joint", seed=5), make_record("sft", seed=0)]
    found, unmatched = match(records, references)
    assert [c.reference["seed"] for c in found] == [1] and found[0].verdict == "equal"
    assert [(r["method"], r["seed"]) for r in unmatched] == [("grpo-joint", 5), ("sft", 0)]
