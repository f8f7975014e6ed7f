"""lm-eval export: the written YAML loads in lm-eval's TaskManager, reads our documents, and scores
completions exactly as our own verifier does."""

from __future__ import annotations

import pytest

from tasks import get_suite
from tasks.lm_eval_export import ExportFolderError, export, task_name

lm_eval_tasks = pytest.importorskip("lm_eval.tasks")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_eval_tasks")
    suite = get_suite("math_code", "easy", "tiny")
    group_yaml = export(suite, out)
    manager = lm_eval_tasks.TaskManager(include_path=str(out), include_defaults=False)
    return suite, out, group_yaml, manager


def test_export_writes_group_tasks_data_and_hook(exported):
    suite, out, group_yaml, _ = exported
    name = task_name(suite)
    assert group_yaml == out / f"{name}.yaml"
    for domain in suite.domains:
        text = (out / f"{name}_{domain}.yaml").read_text()
        assert f'data_file: "{name}_{domain}.jsonl"' in text  # beside the YAML, no path written down
        assert "custom_dataset: !function utils.load_documents" in text
        assert "output_type: generate_until" in text and "do_sample: false" in text
        assert "process_results: !function utils.process_results" in text
        assert suite.content_hash in text
        assert len((out / f"{name}_{domain}.jsonl").read_text().splitlines()) == 1000
    assert "weight_by_size: false" in group_yaml.read_text()
    assert (out / "utils.py").exists()
    assert (out / "opd_bench_tasks" / "tasks" / "suites.py").exists()  # the verifiers travel with it
    assert str(out) not in (out / "utils.py").read_text()


def test_task_manager_loads_group_and_reads_documents(exported):
    suite, _, _, manager = exported
    name = task_name(suite)
    assert {name, f"{name}_math", f"{name}_code"} <= set(manager.all_tasks)
    loaded = manager.load([name])
    assert name in loaded["groups"]
    assert set(loaded["group_map"][name]) == {f"{name}_math", f"{name}_code"}
    for domain in suite.domains:
        task = loaded["tasks"][f"{name}_{domain}"]
        docs = list(task.eval_docs)
        heldout = suite.heldout(domain)
        assert len(docs) == len(heldout)
        assert [task.doc_to_text(d) for d in docs] == [p.prompt for p in heldout]
        assert task.config.generation_kwargs["do_sample"] is False


def test_lm_eval_metric_is_our_verifier(exported):
    suite, _, _, manager = exported
    name = task_name(suite)
    loaded = manager.load([name])
    for domain in suite.domains:
        task = loaded["tasks"][f"{name}_{domain}"]
        docs = list(task.eval_docs)[:100]
        for doc, problem in zip(docs, suite.heldout(domain)):
            for completion in (problem.answer, problem.solution, problem.answer + "0", "", "#__import__('os')"):
                got = task.process_results(doc, [completion])["acc"]
                assert got == suite.score(problem, completion)


def test_export_refuses_a_folder_it_did_not_write(tmp_path):
    suite = get_suite("math", "easy", "tiny")
    mine = tmp_path / "mine"
    (mine / "opd_bench_tasks" / "tasks").mkdir(parents=True)
    (mine / "utils.py").write_text("def my_hook(): ...\n")
    (mine / "opd_bench_tasks" / "tasks" / "notes.txt").write_text("mine")
    with pytest.raises(ExportFolderError, match="no `bench export-lm-eval` wrote"):
        export(suite, mine)
    assert sorted(str(p.relative_to(mine)) for p in mine.rglob("*")) == [
        "opd_bench_tasks", "opd_bench_tasks/tasks", "opd_bench_tasks/tasks/notes.txt", "utils.py"]
    assert (mine / "utils.py").read_text() == "def my_hook(): ...\n"


def test_export_writes_again_into_its_own_earlier_export(tmp_path):
    ours = tmp_path / "ours"
    export(get_suite("math", "easy", "tiny"), ours)
    (ours / "notes.txt").write_text("mine")  # a file of one's own beside the export: kept
    export(get_suite("math", "easy", "hf"), ours)  # another suite into the same folder
    assert {"opd_bench_math_easy_tiny.yaml", "opd_bench_math_easy_hf.yaml"} <= {p.name for p in ours.iterdir()}
    assert (ours / "notes.txt").read_text() == "mine"
    (ours / "opd_bench_math_easy_hf.yaml").unlink()
    interrupted = tmp_path / "interrupted"  # an export stopped after its first file is its own
    interrupted.mkdir()
    (interrupted / "utils.py").write_bytes((ours / "utils.py").read_bytes())
    assert export(get_suite("math", "easy", "tiny"), interrupted).exists()
