"""Studies on the site: a manifest checked field by field, a page that reads its claim by the rule it
names, its files kept with the site and never lost by a rebuild that is not given it."""

import json
from pathlib import Path

import pytest

from reports.site import SiteOverwriteError, build_site
from reports.studies import STUDY_SCHEMA, StudyError, load_study, site_studies
from tests.reports.factory import make_recover_record, make_record, write_study

HOSTILE = "<script>alert('study')</script>"


# seeds 0-3 forgot 20 points and recover 3x cheaper with the self-teacher; 4-7 lost nothing, ratio 0.5x
RECORDS = [make_recover_record(s, 0.2, 3.0) for s in range(4)] + [make_recover_record(s, 0.0, 0.5) for s in range(4, 8)]


def _study(folder: Path, records=RECORDS, **changes) -> Path:
    return write_study(folder, records, **{"title": f"Claim 4 on eight seeds {HOSTILE}", **changes})


def _board(tmp_path: Path) -> Path:
    runs = tmp_path / "board"
    runs.mkdir()
    for r in [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]:
        (runs / f"{r['run_id']}.json").write_text(json.dumps(r), encoding="utf-8")
    return runs


def _claim4(results: dict, slug: str) -> dict:
    study = next(s for s in results["studies"] if s["slug"] == slug)
    return next(c for c in study["findings"] if c["number"] == 4)


def test_a_study_reads_claim_4_by_the_rule_it_names(tmp_path):
    forgot = load_study(_study(tmp_path / "by-forgetting"))
    every = load_study(_study(tmp_path / "by-every-seed", recovery_over="every"))
    summary = build_site([_board(tmp_path)], tmp_path / "site", studies=[forgot, every])
    results = json.loads((tmp_path / "site" / "results.json").read_text())
    rows = {s: {r["measure"]: r for r in _claim4(results, s)["rows"]} for s in ("by-forgetting", "by-every-seed")}
    subset, whole = "the same, over the seeds whose student measurably forgot", "recovery FLOPs, GRPO / self-OPD"
    # the seeds that forgot decide one study, every seed the other; the other row is context in each
    assert rows["by-forgetting"][subset]["decides"] and not rows["by-forgetting"][whole]["decides"]
    assert rows["by-every-seed"][whole]["decides"] and not rows["by-every-seed"][subset]["decides"]
    assert rows["by-forgetting"][subset]["estimate"]["value"] == pytest.approx(3.0)
    assert rows["by-forgetting"][subset]["verdict"] == "holds"
    assert rows["by-forgetting"][whole]["verdict"] == "context"
    assert rows["by-forgetting"][subset]["estimate"] == rows["by-every-seed"][subset]["estimate"]
    assert "seeds 0, 1, 2 and 3" in rows["by-forgetting"][subset]["note"]
    # the board's own findings read only the board's runs: no recover run there, claim 4 not measured
    assert next(c for c in results["findings"] if c["number"] == 4)["verdict"] == "not measured"
    page = (tmp_path / "site" / "studies" / "by-forgetting.html").read_text()
    assert "bench sweep --methods recover --seeds 8 --out runs-s" in page
    assert "bench compare RUNS --against studies/by-forgetting/records" in page
    assert "Not checked against today" in page  # no plan check given: the page says so
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert page.count(">JSON</a>") == len(RECORDS)
    findings = (tmp_path / "site" / "findings.html").read_text()
    assert 'href="studies/by-forgetting.html"' in findings and 'href="studies/by-every-seed.html"' in findings
    site = json.loads((tmp_path / "site" / "site.json").read_text())
    assert site["studies"] == ["by-forgetting", "by-every-seed"]
    assert {p["path"] for p in site["pages"] if p["kind"] == "study"} == {"studies/by-forgetting.html",
                                                                           "studies/by-every-seed.html"}
    assert "studies/by-forgetting.html" in summary.pages


def test_a_plan_check_is_shown_as_given(tmp_path):
    study = load_study(_study(tmp_path / "checked"))
    study.plan = {"commit": "c0ffee", "runs": 8, "differences": ["recover__math_code-easy__tiny__s1: "
                                                                 "method_config.lr is 1e-05 in its record, 2e-05"],
                  "added": ["method_config.forget_scale = 1.0 (8 of 8 records lack it)"]}
    build_site([_board(tmp_path)], tmp_path / "site", studies=[study])
    page = (tmp_path / "site" / "studies" / "checked.html").read_text()
    assert "The command does not make exactly these 8 records." in page and "method_config.lr is 1e-05" in page
    assert "method_config.forget_scale = 1.0" in page
    assert "its command does not make exactly its records" in (tmp_path / "site" / "findings.html").read_text()
    assert "not yet committed" not in page
    study.plan["uncommitted"] = True  # built from code that differs from the commit it names
    build_site([tmp_path / "board"], tmp_path / "site2", studies=[study])
    page = (tmp_path / "site2" / "studies" / "checked.html").read_text()
    assert "c0ffee</code>, with changes to the code not yet committed: the commit alone may not make" in page


def test_a_site_keeps_its_studies_and_a_rebuild_without_them_refuses(tmp_path):
    site, runs = tmp_path / "site", _board(tmp_path)
    build_site([runs], site, studies=[load_study(_study(tmp_path / "elsewhere" / "s4"))])
    assert site_studies(site) == [site / "studies" / "s4"]
    kept = {p: p.read_bytes() for p in (site / "studies" / "s4").rglob("*.json")}
    assert len(kept) == len(RECORDS) + 1
    # rebuilt from its own folders, in place: every file of the study is kept as it was
    build_site([site / "records"], site, studies=[load_study(p) for p in site_studies(site)])
    assert {p: p.read_bytes() for p in (site / "studies" / "s4").rglob("*.json")} == kept
    with pytest.raises(SiteOverwriteError) as caught:
        build_site([site / "records"], site)  # not given the study: it would be lost
    assert "studies/s4/" in str(caught.value) and "a study it is not given" in str(caught.value)
    assert {p: p.read_bytes() for p in (site / "studies" / "s4").rglob("*.json")} == kept
    build_site([site / "records"], site, force=True)
    assert not (site / "studies" / "s4" / "study.json").exists()
    assert not json.loads((site / "site.json").read_text())["studies"]


@pytest.mark.parametrize("changes, needle", [
    ({"question": None}, '"question", a non-empty string'),
    ({"rule": "  "}, '"rule", a non-empty string'),
    ({"colour": "red"}, "unknown field(s) colour"),
    ({"schema": "opd-bench-study/0"}, STUDY_SCHEMA),
    ({"sweep": "bench run --method recover"}, "must be a `bench sweep ...` command"),
    ({"sweep": []}, "must be a `bench sweep ...` command or a list of them"),
    ({"sweep": ["bench sweep --methods recover", "bench run --method recover"]}, "or a list of them, got ["),
    ({"claims": [5]}, '"claims" must be a non-empty list'),
    ({"claims": []}, '"claims" must be a non-empty list'),
    ({"recovery_over": "some"}, '"recovery_over" must be "every" or "forgot"'),
])
def test_a_bad_manifest_is_one_clear_error(tmp_path, changes, needle):
    with pytest.raises(StudyError) as caught:
        load_study(_study(tmp_path / "bad", **changes))
    assert needle in str(caught.value) and str(tmp_path / "bad") in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_a_study_needs_a_manifest_records_and_a_safe_name(tmp_path):
    with pytest.raises(StudyError, match="no study.json"):
        load_study(tmp_path)
    with pytest.raises(StudyError, match="no valid record"):
        load_study(_study(tmp_path / "empty", records=[]))
    with pytest.raises(StudyError, match="folder name is its slug"):
        load_study(_study(tmp_path / "Not Safe"))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "study.json").write_text("{", encoding="utf-8")
    with pytest.raises(StudyError, match="cannot be read"):
        load_study(tmp_path / "broken")
    twice = load_study(_study(tmp_path / "twice"))
    with pytest.raises(StudyError, match="share a slug"):
        build_site([_board(tmp_path)], tmp_path / "site", studies=[twice, twice])


CURVES = "curves-math_code-easy-tiny.svg"


@pytest.mark.parametrize("claims, figures", [([2], ["shares.svg"]), ([1], [CURVES]), ([1, 2], [CURVES, "shares.svg"])])
def test_a_study_draws_the_figures_of_the_claims_it_reads(tmp_path, claims, figures):
    """opd-multi's distillation share is claim 2's quantity: a study of claim 1 alone, whose opd-multi may
    run with its rules off (so that its "stop" is the budget's end), draws no figure of it, but each run's
    curve with joint GRPO's targets, which claim 1 is read from."""
    from reports.studies import study_view

    records = [make_record(m, seed=s) for m in ("grpo-joint", "opd-multi") for s in range(3)]
    study = load_study(write_study(tmp_path / "s", records, claims=claims))
    view, _, drawn = study_view(study, [f"records/{r['run_id']}.json" for r in study.records])
    assert [path.rsplit("/", 1)[-1] for path, *_ in drawn] == figures
    # so are the runs table's columns: claim 2's shares only where the study reads claim 2
    (board,) = view["boards"]
    shares = ["distillation share (stopping rule)", "distillation share (plateau)"]
    assert board["runs"]["headings"] == ["final accuracy", "counted FLOPs"] + (shares if 2 in claims else [])
    if 1 in claims:
        (_, func, kwargs, _) = drawn[0]
        assert [g["name"] for g in kwargs["groups"]] == ["grpo-joint at 3e14", "opd-multi at 3e14"]
        assert [len(g["runs"]) for g in kwargs["groups"]] == [3, 3]
        assert [label for label, _ in kwargs["targets"]] == ["τ₀.₅", "τ₀.₇₅", "τ₀.₉"]
        svg = func(**kwargs)
        assert svg.count("<polyline") >= 6 + 3 and "τ₀.₉" in svg


def test_uncommitted_code_is_told_from_a_clean_checkout(tmp_path, monkeypatch):
    """The commit a site names made its pages only if the code had no changes beyond it."""
    import subprocess

    from bench.run import provenance

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                       capture_output=True)

    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "site.py").write_text("A = 1\n")
    (tmp_path / "notes.txt").write_text("")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "x")
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    (tmp_path / "reports" / "new.py").write_text("")  # untracked: not part of what the commit names
    assert provenance.uncommitted_code() is False
    (tmp_path / "reports" / "site.py").write_text("A = 2\n")
    assert provenance.uncommitted_code() is True
