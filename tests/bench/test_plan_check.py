"""A study's sweep command, resolved by today's code, is checked against its records: the committed
studies' commands make exactly their records, and a changed default, base or seed set is named."""

import copy
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import app
from bench.cli.sweeps import _parsed_sweep, study_configs
from bench.run.plan_check import plan_check
from reports.studies import load_study, site_studies

ROOT = Path(__file__).resolve().parents[2]
STUDIES = site_studies(ROOT / "leaderboard")
CLAIM2 = ROOT / "leaderboard" / "studies" / "claim2-ten-seeds"
runner = CliRunner()


def test_the_reference_site_holds_its_studies():
    assert {p.name for p in STUDIES} >= {"claim2-ten-seeds", "claim4-ten-seeds", "claim4-forget-scale-3"}


@pytest.mark.parametrize("folder", STUDIES, ids=lambda p: p.name)
def test_each_committed_studys_command_makes_exactly_its_records(folder):
    """If this fails, today's code would not remake the study's records (a default, a suite, the world's
    version or its shipped base changed): run the study again, or say on the site why it may stand."""
    study = load_study(folder)
    configs = study_configs(study)
    check = plan_check(configs, study.records)
    assert len(configs) == len(study.records)
    assert check["differences"] == []


def test_the_leaderboards_readme_gives_each_studys_commands():
    text = re.sub(r"\\\n\s+", "", (ROOT / "leaderboard" / "README.md").read_text())  # lines joined at "\"
    for folder in STUDIES:
        study = load_study(folder)
        for command in (*study.sweep, study.readout):
            assert command in text, (folder.name, command)


def _claim2(seeds=range(2)):
    study = load_study(CLAIM2)
    sweep = study.sweep[0].replace("--seeds 10", f"--seeds {len(seeds)}")
    records = [r for r in study.records if r["seed"] in seeds]
    return _parsed_sweep(sweep, "test"), copy.deepcopy(records)


# an option added since the study's records were made (off, as they were made), and the run settings
# that records keep since
ADDED_SINCE = "method_config.score_experts = False (2 of 2 records lack it)"
SETTINGS_SINCE = [f"settings.{key} = {value} (2 of 2 records lack it)" for key, value in (
    ("device", "'cpu'"), ("distill_eval_every", 5), ("eval_early", [0.01, 0.02, 0.05]), ("eval_every", 0.1),
    ("eval_max_new_tokens", 128), ("max_new_tokens", 96))]


def test_a_changed_value_base_or_seed_set_is_named():
    configs, records = _claim2()
    assert plan_check(configs, records) == {"differences": [], "added": [ADDED_SINCE, *SETTINGS_SINCE]}
    records[0]["method_config"]["distill"]["lr"] *= 2
    records[1]["provenance"]["model_hashes"]["base"] = "0" * 16
    differences = plan_check(configs, records)["differences"]
    assert len(differences) == 2
    assert differences[0].startswith("opd-multi__four_domain-easy__tiny__s0: method_config.distill.lr is ")
    assert "opd-multi__four_domain-easy__tiny__s1: model_hashes.base is '0000000000000000' in its record" in \
        differences[1]
    configs, records = _claim2(range(3))
    check = plan_check(configs[:2], records[1:] + [records[0] | {"run_id": "opd-multi__four_domain-easy__tiny__s9"}])
    assert check["differences"] == [
        "opd-multi__four_domain-easy__tiny__s0: planned by the command, but there is no record of it",
        "opd-multi__four_domain-easy__tiny__s2: a record the command does not plan",
        "opd-multi__four_domain-easy__tiny__s9: a record the command does not plan"]


def test_an_option_added_since_a_record_was_made_is_listed_apart():
    configs, records = _claim2()
    for r in records:
        del r["method_config"]["distill"]["warmup_updates"]
    check = plan_check(configs, records)
    assert check["differences"] == []
    assert check["added"] == ["method_config.distill.warmup_updates = 0 (2 of 2 records lack it)", ADDED_SINCE,
                              *SETTINGS_SINCE]
    del records[0]["suite_hash"]  # what makes a run is never an option added since: a record lacking it differs
    assert plan_check(configs, records)["differences"][0].startswith(
        "opd-multi__four_domain-easy__tiny__s0: suite_hash is '(absent)' in its record")


def _copy_study(tmp_path: Path, sweep: str | list[str] | None = None) -> Path:
    folder = tmp_path / "claim2-copy"
    shutil.copytree(CLAIM2, folder)
    if sweep is not None:
        manifest = json.loads((folder / "study.json").read_text())
        (folder / "study.json").write_text(json.dumps({**manifest, "sweep": sweep}))
    return folder


def test_bench_report_shows_each_studys_check(tmp_path):
    from tests.reports.factory import make_record, write_runs

    runs = write_runs([make_record("grpo-joint", seed=s) for s in range(2)], tmp_path / "runs")
    study = _copy_study(tmp_path, "bench sweep --methods opd-multi --suites four_domain --seeds 10 --profile tiny "
                                  "--set distill.lr=0.5")
    result = runner.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site"), "--study", str(study)])
    assert result.exit_code == 0, result.output
    assert "its sweep command does not make exactly its records (10 differences; first: " in result.stderr
    page = (tmp_path / "site" / "studies" / "claim2-copy.html").read_text()
    assert "The command does not make exactly these 10 records." in page and "method_config.distill.lr is " in page
    # the next build finds the study in the site and checks it again
    result = runner.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 0 and "does not make exactly its records" in result.stderr


def test_a_study_made_by_several_commands_is_checked_on_what_they_plan_together(tmp_path):
    command = load_study(CLAIM2).sweep[0]
    halves = [command.replace("--seeds 10", "--seeds 0-4"), command.replace("--seeds 10", "--seeds 5-9")]
    study = _copy_study(tmp_path, halves)
    result = runner.invoke(app, ["report", "--runs", str(CLAIM2 / "records"), "--out", str(tmp_path / "site"),
                                 "--study", str(study)])
    assert result.exit_code == 0, result.output
    assert "its sweep commands" not in result.stderr  # (the board here is the study's records: not the site's)
    page = (tmp_path / "site" / "studies" / "claim2-copy.html").read_text()
    assert halves[0] in page and halves[1] in page and "make its 10 runs together" in page
    assert "the commands plan exactly these 10 records together, run for run" in page
    # one run planned by two commands would be made twice, one over the other
    overlapping = [command.replace("--seeds 10", "--seeds 0-5"), command.replace("--seeds 10", "--seeds 5-9")]
    shutil.rmtree(tmp_path / "site")
    result = runner.invoke(app, ["report", "--runs", str(CLAIM2 / "records"), "--out", str(tmp_path / "site"),
                                 "--study", str(_copy_study(tmp_path / "again", overlapping))])
    assert result.exit_code == 0, result.output
    assert ("its sweep commands do not make exactly their records (1 difference; first: "
            "opd-multi__four_domain-easy__tiny__s5: planned 2 times)") in result.stderr


@pytest.mark.parametrize("sweep, needle", [
    ("bench sweep --methods opd-multi --seeds 10 --colour red", "No such option: --colour"),
    ("bench sweep --methods opd-mutli --seeds 10", "did you mean 'opd-multi'"),
    ("bench sweep --methods opd-multi --set distill.lrr=1", "did you mean 'distill.lr'"),
    ("bench sweep --methods opd-multi --seeds 'ten", "No closing quotation"),
    ("bench sweep --methods nope --seeds 10", "unknown method 'nope'"),
    ("bench sweep --methods opd-multi --seeds 0", "--seeds must be a count from 1 to 1000"),
    ("bench sweep --methods opd-multi --budget x", "--budget must be a number of FLOPs"),
    ("bench sweep --methods opd-multi --device tpu", "--device must be cpu, cuda or cuda:N, got 'tpu'"),
    ("bench sweep --methods opd-multi --set lr", "--set takes KEY=VALUE, got 'lr'"),
    ("bench sweep --methods , --seeds 10", "--methods names nothing"),
])
def test_a_sweep_command_that_cannot_be_read_is_one_line_and_exit_2(tmp_path, sweep, needle):
    study = _copy_study(tmp_path, sweep)
    result = runner.invoke(app, ["report", "--runs", str(CLAIM2 / "records"), "--out", str(tmp_path / "site"),
                                 "--study", str(study)])
    assert result.exit_code == 2
    message = (result.stderr or result.output).strip()
    assert needle in message and len(message.splitlines()) == 1, message
    # the study's own command, not the user's flags: the message names the study
    assert message.startswith(f"error: study {study}: "), message
    assert not (tmp_path / "site").exists()  # refused before anything was written


def test_a_study_made_on_a_gpu_is_checked_on_a_machine_without_one(tmp_path, monkeypatch):
    """Planning a command to compare it with its records runs nothing: `--device cuda` needs no GPU there,
    as `bench sweep --device cuda` itself does."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    command = "bench sweep --methods opd-multi --suites four_domain --seeds 10 --profile gpu-small --device cuda"
    study, site = _copy_study(tmp_path, command), tmp_path / "site"
    result = runner.invoke(app, ["report", "--runs", str(CLAIM2 / "records"), "--out", str(site), "--study",
                                 str(study)])
    assert result.exit_code == 0, result.output
    assert f"study {study}: its sweep command does not make exactly its records" in result.stderr
    result = runner.invoke(app, ["report", "--runs", str(site / "records"), "--out", str(site)])  # the site's own
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*shlex.split(command)[1:], "--runs", str(tmp_path / "runs")])  # to run it: refused
    assert result.exit_code == 2 and not (tmp_path / "runs").exists()
    message = (result.stderr or result.output).strip()
    assert message == "error: --device cuda: no CUDA device is available here", message


def test_the_reference_sites_command_makes_exactly_its_records(tmp_path):
    """`bench reproduce --seeds 3 --profile direct --profile tiny`, the command the reference site shows,
    resolved by today's code, plans exactly its 72 records; an option added since some were made is listed."""
    result = runner.invoke(app, ["report", "--runs", str(ROOT / "leaderboard" / "records"), "--out",
                                 str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert "does not make exactly its records" not in result.stderr
    check = json.loads((tmp_path / "site" / "results.json").read_text())["board_check"]
    assert check["command"] == "bench reproduce --seeds 3 --profile direct --profile tiny"
    assert check["runs"] == 72 and check["differences"] == []
    assert any(a.startswith("method_config.forget_scale = 1.0 (12 of 72") for a in check["added"])
    index = (tmp_path / "site" / "index.html").read_text()
    assert "the command plans exactly the board&#39;s records, run for run" in index


def test_bench_report_says_when_the_sites_command_does_not_make_its_records(tmp_path):
    from tests.reports.factory import make_record, write_runs

    # synthetic records: the runs `bench reproduce` would make have other configs, and most are missing
    runs = write_runs([make_record("grpo-joint", seed=s) for s in range(2)], tmp_path / "runs")
    result = runner.invoke(app, ["report", "--runs", str(runs), "--out", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    assert "the site's command `bench reproduce --seeds 2 --profile tiny` does not make exactly its records" in \
        result.stderr
    check = json.loads((tmp_path / "site" / "results.json").read_text())["board_check"]
    assert "grpo-joint__four_domain-easy__tiny__s0: planned by the command, but there is no record of it" in \
        check["differences"]
    assert any(d.startswith("grpo-joint__math_code-easy__tiny__s0: method_config.") for d in check["differences"])
    index = (tmp_path / "site" / "index.html").read_text()
    assert "The command does not make exactly the board&#39;s records." in index
    assert f"and {len(check['differences']) - 10} more (results.json has them all)" in index


def _record_of(made):
    """The part of a record of `made` (a shipped world's run) that the plan check reads."""
    from bench.run import record as records
    from bench.run.runner import Runner
    from bench.world import reference

    run = Runner(made, progress=False)
    fields = ("method", "method_config", "suite", "difficulty", "suite_hash", "profile", "seed", "budget_flops",
              "eval_size")
    return {**{k: v for k, v in run.fingerprint().items() if k in fields},
            "run_id": run.run_id, "settings": records.settings(made),
            "provenance": {"world_version": run.profile.world_version, "rollout": "torch",
                           "model_hashes": reference.shipped_hashes(made.profile), "phase_executor": "sequential"}}


def test_a_records_rerun_command_plans_it_with_its_settings():
    """The command the site shows for a record (`reports.reproduce.run_command`), read as `bench run` reads
    it, plans exactly that record, its settings (token caps, evaluation schedule) included; a record made
    with another cap is named as a difference, not passed as this command's."""
    from bench.cli.common import RUN_OPTIONS, _budget, _overrides, _run_fields
    from bench.cli.sweeps import _parsed
    from bench.run import record as records
    from bench.run.config import RunConfig
    from reports.reproduce import run_command

    made = RunConfig(method="grpo", suite="math", profile="direct", seed=1, budget_flops=2e11, max_new_tokens=8,
                     eval_every=0.5, eval_early=(0.25,), distill_eval_every=0)
    record = _record_of(made)
    params = _parsed(run_command(record)["text"].replace("\\\n", " "), "run", "the record's command")
    planned = RunConfig(method=params["method"], suite=params["suite"], difficulty=params["difficulty"],
                        profile=params["profile"], seed=params["seed"], budget_flops=_budget(params["budget"]),
                        overrides=_overrides(params["set_"]), rollout=params["rollout"],
                        phase_executor=params["phase_executor"],
                        **_run_fields(*(params[k] for k in RUN_OPTIONS)))
    assert records.settings(planned) == record["settings"]
    assert plan_check([planned], [record]) == {"differences": [], "added": []}
    other = {**record, "settings": {**record["settings"], "max_new_tokens": 16}}
    (difference,) = plan_check([planned], [other])["differences"]
    assert "settings.max_new_tokens is 16 in its record, 8 at this code" in difference


def test_a_record_whose_phases_ran_side_by_side_is_not_made_by_a_command_that_runs_them_in_order():
    from bench.run.config import RunConfig

    made = RunConfig(method="opd-multi", suite="math_code", profile="direct", seed=0, budget_flops=2e11)
    record = _record_of(made)
    for streams in (None, "shared"):
        assert plan_check([made], [{**record, "phase_streams": streams}]) == {"differences": [], "added": []}
    for streams in ("own", "mixed"):
        (difference,) = plan_check([made], [{**record, "phase_streams": streams}])["differences"]
        assert f"its phases drew samples side by side ({streams!r} streams)" in difference
    side_by_side = RunConfig(method="opd-multi", suite="math_code", profile="direct", seed=0, budget_flops=2e11,
                             phase_executor="isolated")
    assert plan_check([side_by_side], [{**record, "phase_streams": "own"}])["differences"] == []


def test_a_sweep_or_reproduce_command_on_ray_is_planned_with_its_phases_as_ray_tasks():
    """`--executor ray` runs each run's phases as Ray tasks: the records that command made (`own`
    streams) are its, and the site's command for them says `--executor ray`."""
    from bench.cli.sweeps import _parsed_sweep
    from reports.reproduce import site_command
    from tests.reports.factory import make_record

    command = "bench sweep --methods opd-multi --suites math_code --profile direct --seeds 1 --budget 2e11"
    assert {c.phase_executor for c in _parsed_sweep(command, "test")} == {"sequential"}
    assert {c.phase_executor for c in _parsed_sweep(command + " --executor ray", "test")} == {"ray"}
    made = make_record("opd-multi", seed=0)
    assert "--executor" not in site_command([made])
    made["provenance"]["phase_executor"] = "ray"
    assert site_command([made]).endswith(" --executor ray")
