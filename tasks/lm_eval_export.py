"""Export a suite's held-out split as an lm-evaluation-harness task, scored by our own verifiers.

    from tasks import get_suite
    from tasks.lm_eval_export import export
    export(get_suite("math_code", "easy", "hf"), "lm_eval_tasks/")
    # lm_eval --model hf --model_args pretrained=/path/to/model --include_path lm_eval_tasks \
    #         --tasks opd_bench_math_code_easy_hf [--apply_chat_template]

Writes, into `out_dir`:
- `<task>_<domain>.jsonl`: the held-out problems of each domain (`meta` as a JSON string);
- `<task>_<domain>.yaml`: one `generate_until` task per domain, absolute `data_files` paths, and
  `process_results: !function utils.process_results`. Decoding is the benchmark's own evaluation
  (docs/metrics.md, Held-out accuracy): greedy, stopped by the model's EOS token only (no `until` strings: lm-eval adds
  the EOS), at most `max_gen_toks` new tokens;
- `<task>.yaml`: the group; its `acc` is the unweighted mean over domains, the suite accuracy of
  docs/metrics.md (every domain has the same number of held-out prompts anyway);
- `utils.py`: `process_results`, which rebuilds the `Problem` and calls the domain's verifier, so
  lm-eval's number and ours come from the same code. It imports this checkout's `tasks` package.

hf-format suites are chat prompts: pass `--apply_chat_template` for chat models. tiny-format prompts
are raw text, scored as the benchmark feeds them: no chat template and no BOS
(`--model_args pretrained=DIR,add_bos_token=False`); then lm-eval's accuracy on the first N documents
equals `bench.evaluation.Evaluator`'s on the same N (tests/tasks/test_lm_eval_roundtrip.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tasks.suites import Suite

# Generation limit per prompt format: the `eval_max_new_tokens` of the profile of that format (tiny, hf),
# so that lm-eval and `bench.evaluation.Evaluator` score the same completions.
MAX_GEN_TOKS = {"tiny": 64, "worked": 128, "hf": 512}

_UTILS = '''"""lm-eval hooks for OPD-Bench suites (written by tasks.lm_eval_export; regenerate, do not edit)."""

import functools
import sys

_REPO = {repo!r}
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from tasks.suites import get_domain, problem_from_record  # noqa: E402


@functools.lru_cache(maxsize=None)
def _domain(name):
    return get_domain(name)


def process_results(doc, results):
    """lm-eval hook: 1.0 if the generated text answers the problem, by our own verifier."""
    problem = problem_from_record(doc)
    completion = results[0] if results else ""
    return {{"acc": _domain(problem.domain).score(completion, problem)}}
'''


def task_name(suite: Suite) -> str:
    """The lm-eval group name of a suite, e.g. `opd_bench_math_code_easy_tiny`."""
    return f"opd_bench_{suite.name}_{suite.difficulty}_{suite.fmt}"


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def _task_yaml(name: str, data_path: Path, suite: Suite, max_gen_toks: int) -> str:
    return f"""# OPD-Bench {suite.id} (suite version {suite.version}, hash {suite.content_hash}); generated, do not edit
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {_q(str(data_path))}
  cache_dir: {_q(str(data_path.parent / ".hf-datasets-cache"))}
test_split: test
output_type: generate_until
num_fewshot: 0
doc_to_text: prompt
doc_to_target: answer
generation_kwargs:
  until: []
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_gen_toks}
process_results: !function utils.process_results
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
metadata:
  version: {float(suite.version)}
  suite_hash: {_q(suite.content_hash)}
"""


def _group_yaml(name: str, tasks: list[str], suite: Suite) -> str:
    listed = "\n".join(f"  - {t}" for t in tasks)
    return f"""# OPD-Bench {suite.id}: suite accuracy = mean over domains; generated, do not edit
group: {name}
task:
{listed}
aggregate_metric_list:
  - metric: acc
    aggregation: mean
    weight_by_size: false
metadata:
  version: {float(suite.version)}
  suite_hash: {_q(suite.content_hash)}
"""


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def export(suite: Suite, out_dir: str | os.PathLike, *, max_gen_toks: int | None = None) -> Path:
    """Write the suite as an lm-eval task group into `out_dir`; returns the group YAML's path.

    `max_gen_toks` caps each completion (default `MAX_GEN_TOKS[suite.fmt]`); give it the evaluating
    profile's `eval_max_new_tokens` to reproduce that profile's held-out accuracy.
    """
    max_gen_toks = MAX_GEN_TOKS[suite.fmt] if max_gen_toks is None else int(max_gen_toks)
    if max_gen_toks < 1:
        raise ValueError(f"max_gen_toks must be >= 1, got {max_gen_toks}")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    group = task_name(suite)
    records = suite.heldout_records()
    subtasks = []
    for domain in suite.domains:
        name = f"{group}_{domain}"
        data_path = out / f"{name}.jsonl"
        rows = [r for r in records if r["domain"] == domain]
        _write(data_path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        _write(out / f"{name}.yaml", _task_yaml(name, data_path, suite, max_gen_toks))
        subtasks.append(name)
    repo_root = str(Path(__file__).resolve().parent.parent)
    _write(out / "utils.py", _UTILS.format(repo=repo_root))
    group_path = out / f"{group}.yaml"
    _write(group_path, _group_yaml(group, subtasks, suite))
    return group_path
