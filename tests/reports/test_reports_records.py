"""Loading result records: every valid one is used, every other file is skipped with its reason."""

import copy
import json
from pathlib import Path

import pytest

from reports.metrics import evaluation_prompts, final_accuracy, plateau_distillation_share
from reports.records import final_accuracy_of, final_domain_accuracy_of, load_many, load_records, to_frames
from reports.schema import RECORD_SCHEMA, SCHEMA_VERSION, parse_record_text, validate_record
from tests.reports.factory import make_record, make_sweep, write_runs


def test_factory_records_are_valid():
    for record in make_sweep(30):
        assert validate_record(record) == [], record["run_id"]
        assert {"eval_size", "steps", "max_step_flops", "method_metrics", "samples"} <= set(record)
        assert record["samples"] and record["provenance"]["git_commit"]
        assert all({"phase_flops", "ledger_phase"} <= set(p) for p in record["curve"])
    assert RECORD_SCHEMA["properties"]["schema_version"] == {"const": SCHEMA_VERSION}


def _broken(of="grpo-joint", **changes):
    """A record of method `of` with each "a__0__b" path set to its value (KeyError: deleted)."""
    record = make_record(of)
    for path, value in changes.items():
        target = record
        *parents, leaf = path.split("__")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is KeyError:
            del target[leaf]
        else:
            target[int(leaf) if leaf.isdigit() else leaf] = value
    return record


@pytest.mark.parametrize("changes, needle", [
    ({"schema_version": 2}, "schema_version is 2"),
    ({"method": KeyError}, "method"),
    ({"final_accuracy": 1.5}, "final_accuracy"),
    ({"curve__0__accuracy": -0.1}, "curve[0].accuracy"),
    ({"curve__0__flops": 5.0}, "curve[0].flops"),
    ({"ledger__0__kind": "think"}, "ledger[0].kind"),
    ({"seed": "zero"}, "seed"),
    ({"method": "x" * 500}, "method"),
    ({"curve": []}, "curve"),
    ({"budget_flops": 0}, "budget_flops"),
    # the optional fields, when present, are checked as strictly
    ({"eval_size": 0}, "eval_size"),
    ({"eval_size": 2.5}, "eval_size"),
    ({"curve__1__phase_flops": {"train": -1.0}}, "curve[1].phase_flops"),
    ({"curve__1__ledger_phase": ""}, "curve[1].ledger_phase"),
    ({"steps__0__step": 0}, "steps[0].step"),
    ({"steps__0__flops": -1.0}, "steps[0].flops"),
    ({"steps__0__reward": "high"}, "steps[0].reward"),
    ({"steps": {"step": 1}}, "steps"),
    ({"method_metrics": {"expert_tail_flops": "lots"}}, "method_metrics"),
    ({"max_step_flops": -1.0}, "max_step_flops"),
    ({"of": "self-grpo", "recovery__check_size": 0}, "recovery.check_size"),
    ({"of": "self-grpo", "recovery__teacher_accuracy": 1.2}, "recovery.teacher_accuracy"),
    ({"of": "self-grpo", "recovery__checks": {"opd": [[0.0, 1.5]]}}, "recovery.checks.opd[0][1]"),
    ({"of": "self-grpo", "recovery__checks": {"opd": [[1e10]]}}, "recovery.checks.opd[0]"),
    ({"samples__0__prompt": "x" * 2001}, "samples[0].prompt"),
    ({"samples__0__completion": "x" * 2001}, "samples[0].completion"),
    ({"samples__0__reward": 1.5}, "samples[0].reward"),
    ({"samples__0__flops": -1.0}, "samples[0].flops"),
    ({"samples__0__domain": ""}, "samples[0].domain"),
    ({"samples__0__completion": KeyError}, "samples[0]"),
    ({"samples__0__prompt": 7}, "samples[0].prompt"),
    ({"samples": [{"flops": 0.0, "domain": "math", "prompt": "", "completion": "", "reward": 0.0}] * 5001},
     "samples"),
    ({"provenance__git_commit": 5}, "provenance.git_commit"),
    ({"settings": {"eval_early": ["x"]}}, "settings.eval_early[0]"),
    ({"settings": {"max_new_tokens": 0}}, "settings.max_new_tokens"),
    ({"settings": [1]}, "settings"),
])
def test_schema_violations_name_the_field(changes, needle):
    reasons = validate_record(_broken(**changes))
    assert reasons and needle in reasons[0]


def test_samples_and_git_commit_are_optional_and_bounded():
    assert validate_record(_broken(samples=KeyError)) == []  # records without samples stay valid
    assert validate_record(_broken(provenance__git_commit=None)) == []  # the runner outside a git checkout
    longest = {"flops": 0.0, "domain": "math", "prompt": "p" * 2000, "completion": "c" * 2000, "reward": 1}
    assert validate_record(_broken(samples=[longest] * 5000)) == []


def test_a_run_that_trained_past_its_budget_by_more_than_one_step_is_rejected():
    r = make_record()
    assert r["flops"]["counted"] <= r["budget_flops"] and validate_record(r) == []
    # the last step may cross the budget (the runner checks between steps): by up to one step, accepted
    r["budget_flops"] = r["flops"]["counted"] - 0.9 * r["max_step_flops"]
    assert validate_record(r) == []
    r["budget_flops"] = r["flops"]["counted"] - 1.5 * r["max_step_flops"]
    reasons = validate_record(r)
    assert len(reasons) == 1 and "trained past its budget" in reasons[0] and "more than one step" in reasons[0]
    del r["max_step_flops"]  # an older record: no step size, no rule
    assert validate_record(r) == []


def test_steps_must_not_go_back_in_flops():
    r = make_record()
    r["steps"][3]["flops"], r["steps"][4]["flops"] = r["steps"][4]["flops"], r["steps"][3]["flops"]
    assert any("steps FLOPs go backwards" in x for x in validate_record(r))


def test_domain_eval_size_names_the_domains_each_at_most_eval_size():
    r = make_record(suite="math_code")
    sizes = {d: 6 for d in r["domains"]}
    assert validate_record({**r, "domain_eval_size": sizes}) == []
    assert validate_record({**r, "domain_eval_size": {r["domains"][0]: 6}}) == [
        f"domain_eval_size names {[r['domains'][0]]}, not the record's domains {r['domains']}"]
    too_many = {**sizes, r["domains"][0]: r["eval_size"] + 1}
    assert any("not at most eval_size" in x for x in validate_record({**r, "domain_eval_size": too_many}))
    assert any("domain_eval_size" in x for x in validate_record({**r, "domain_eval_size": {d: 0 for d in sizes}}))


def test_the_plateau_share_of_a_run_reads_the_prompts_each_domain_scored():
    record = make_record("opd-multi", suite="math_code")  # eval_size 1,000 on math and code
    fewer = {**record, "domain_eval_size": {"math": 4, "code": 2}}  # a wider standard error: an earlier plateau
    shares = [to_frames([r]).runs["distillation_share_plateau"].iloc[0] for r in (record, fewer)]
    assert shares == [plateau_distillation_share(record["curve"], prompts) for prompts in
                      (evaluation_prompts(1000, 2), evaluation_prompts(1000, 2, {"math": 4, "code": 2}))]
    assert shares[1] < shares[0]


def test_cross_field_rules():
    r = make_record()
    r["curve"][2]["flops"], r["curve"][3]["flops"] = r["curve"][3]["flops"], r["curve"][2]["flops"]
    assert any("backwards" in x for x in validate_record(r))
    r = make_record(final_accuracy=0.99)
    assert any("final_accuracy differs" in x for x in validate_record(r))
    r = make_record()
    r["flops"]["counted"] *= 2
    assert any("flops.counted" in x for x in validate_record(r))
    r = make_record(base_accuracy=0.31)
    r["curve"][0]["accuracy"] = 0.5
    assert any("base_accuracy differs" in x for x in validate_record(r))
    assert validate_record(make_record(status="running")) == [
        "status is 'running'; only complete runs are reported"]


def test_parse_rejects_non_finite_numbers_and_non_objects():
    with pytest.raises(ValueError, match="non-finite"):
        parse_record_text('{"a": NaN}')
    with pytest.raises(ValueError, match="JSON list"):
        parse_record_text("[1, 2]")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_record_text("{")


def test_load_records_uses_valid_runs_and_explains_every_skip(tmp_path):
    runs = write_runs([make_record(seed=s) for s in range(3)], tmp_path / "runs")
    (runs / "bad1").mkdir()
    (runs / "bad1" / "summary.json").write_text("{not json", encoding="utf-8")
    (runs / "bad2").mkdir()
    (runs / "bad2" / "summary.json").write_text(json.dumps({**make_record(seed=9), "final_accuracy": float("nan")}))
    (runs / "bad3").mkdir()
    (runs / "bad3" / "summary.json").write_bytes(b'{"x": "\xff"}')
    (runs / "zdup").mkdir()  # paths load in order: the later copy of run s0 is the duplicate
    (runs / "zdup" / "summary.json").write_text(json.dumps(make_record(seed=0)))
    (runs / "failed").mkdir()
    (runs / "failed" / "summary.json").write_text(json.dumps(make_record(seed=5, status="failed")))
    (runs / "no_summary").mkdir()  # a run still in progress: no summary.json, not a candidate
    records, skipped = load_records(runs)
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    reasons = {p.parent.name: r for p, r in skipped}
    assert set(reasons) == {"bad1", "bad2", "bad3", "zdup", "failed"}
    assert "not valid JSON" in reasons["bad1"]
    assert "non-finite number NaN" in reasons["bad2"]
    assert "not UTF-8" in reasons["bad3"]
    assert "duplicate run_id" in reasons["zdup"]
    assert "status is 'failed'" in reasons["failed"]


def test_a_folder_of_record_files_and_several_folders(tmp_path):
    folder = tmp_path / "leaderboard" / "records"
    folder.mkdir(parents=True)
    for s in range(2):
        (folder / f"r{s}.json").write_text(json.dumps(make_record(seed=s)))
    (folder / "site.json").write_text("{}")  # a built site's own index is not a record
    assert len(load_records(folder)[0]) == 2
    assert len(load_records(tmp_path / "leaderboard")[0]) == 2  # <dir>/records/*.json
    records, skipped = load_many([folder, tmp_path / "missing"])
    assert len(records) == 2 and skipped == [(tmp_path / "missing", "no such file or directory")]


def test_a_record_file_and_a_run_directory_load_themselves(tmp_path):
    run = tmp_path / "runs" / "grpo__math__tiny__s0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps(make_record(seed=0)))
    (run / "config.json").write_text("{}")  # a run's config is not a record and is not read
    single = tmp_path / "r1.json"
    single.write_text(json.dumps(make_record(seed=1)))
    records, skipped = load_many([run, single])
    assert [r["seed"] for r in records] == [0, 1] and skipped == []


def test_frames_have_one_row_per_run_and_per_curve_point():
    records = [make_record(seed=s) for s in range(3)] + [make_record("opd-multi", seed=0)]
    frames = to_frames(records)
    assert len(frames.runs) == 4
    assert len(frames.curves) == sum(len(r["curve"]) for r in records)
    assert len(frames.ledger) == sum(len(r["ledger"]) for r in records)
    assert set(frames.domains["domain"]) == {"math", "code"}
    opd = frames.runs.set_index("method").loc["opd-multi"]
    assert opd["distillation_share"] == pytest.approx(0.052)
    empty = to_frames([])
    assert list(empty.runs.columns) and empty.runs.empty


def test_validation_does_not_mutate_the_record():
    r = make_record()
    before = copy.deepcopy(r)
    validate_record(r)
    assert r == before


def test_a_runs_final_accuracy_is_read_at_the_budget_and_each_domains_too():
    # a board record whose last step (sft's teacher samples and update) took it 1.9% past its budget
    r = json.loads((Path(__file__).parents[2] / "leaderboard/records/sft-math-code-easy-tiny-s1-8c538da1.json")
                   .read_text())
    assert r["curve"][-1]["flops"] > r["budget_flops"]
    run = to_frames([r]).runs.iloc[0]
    at_budget = final_accuracy([p["flops"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]],
                               r["budget_flops"])
    assert run["final_accuracy"] == run["accuracy_at_100pct"] == at_budget == final_accuracy_of(r)
    assert run["final_accuracy"] < r["final_accuracy"] - 0.005  # the record's is the step's end
    assert run["gain_per_pflop_spent"] == pytest.approx((at_budget - r["base_accuracy"]) * 1e15 / r["flops"]["counted"])
    domains = to_frames([r]).domains.set_index("domain")["final_accuracy"]
    assert domains.to_dict() == final_domain_accuracy_of(r) != r["final_domain_accuracy"]
    assert domains.mean() == pytest.approx(at_budget)  # each domain read as the suite is: their mean is its
