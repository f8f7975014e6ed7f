"""Export a suite's held-out split as an lm-evaluation-harness task, scored by our own verifiers.

    from tasks import get_suite
    from tasks.lm_eval_export import export, lm_eval_command
    export(get_suite("math_code", "easy", "hf"), "lm_eval_tasks/")
    print(lm_eval_command(suite, "lm_eval_tasks/", "/path/to/model"))
    # lm_eval --model hf --model_args pretrained=/path/to/model,add_bos_token=False \
    #         --tasks opd_bench_math_code_easy_hf --include_path lm_eval_tasks --apply_chat_template

The folder is self-contained: copy it anywhere (another machine with lm-eval installed) and it runs.
It holds:
- `<task>_<domain>.jsonl`: the held-out problems of each domain (`meta` as a JSON string);
- `<task>_<domain>.yaml`: one `generate_until` task per domain that reads its documents through
  `custom_dataset: !function utils.load_documents` (a file beside the YAML, found from `utils.py`'s
  own location, so no path is written down), and scores them with `process_results: !function
  utils.process_results`. Decoding is the benchmark's own evaluation (docs/metrics.md, Held-out
  accuracy): greedy, stopped by the model's EOS token only (no `until` strings: lm-eval adds the
  EOS), at most `max_gen_toks` new tokens;
- `<task>.yaml`: the group; its `acc` is the unweighted mean over domains, the suite accuracy of
  docs/metrics.md (every domain has the same number of held-out prompts anyway);
- `utils.py`: the two hooks. `process_results` rebuilds the `Problem` and calls the domain's
  verifier, so lm-eval's number and ours come from the same code;
- `opd_bench_tasks/tasks/`: a copy of this `tasks` package (generators and verifiers, pure Python),
  which `utils.py` imports. The hf-format verifiers of reasoning-gym problems need `reasoning-gym`
  installed where the export runs.

`export` writes into an empty (or new) folder, or into one an earlier export wrote (its `utils.py`
begins with this module's header); any other folder holding files is refused, nothing written.

hf-format suites are chat prompts: pass `--apply_chat_template` for chat models. tiny-format prompts
are raw text, scored as the benchmark feeds them: no chat template. Either way `add_bos_token=False`
(the benchmark adds no BOS of its own; a chat template adds its own); then lm-eval's accuracy on the
first N documents equals `bench.evaluation.Evaluator`'s on the same N
(tests/tasks/test_lm_eval_roundtrip.py). A model whose tokenizer has no chat template, whose turns
end with a token its `generation_config.json` does not stop at, or whose template reads a
`date_string` needs other flags: `bench export-lm-eval --model DIR` prints them (`lm_eval_command`'s
keyword arguments), and `bench eval` chooses for itself. A template that calls `strftime_now` itself
writes the day's date under lm-eval's command line; only `bench eval` gives it a fixed day.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tasks.suites import Suite

# Generation limit per prompt format: the `eval_max_new_tokens` of the profile of that format (tiny, hf),
# so that lm-eval and `bench.evaluation.Evaluator` score the same completions.
MAX_GEN_TOKS = {"tiny": 64, "worked": 128, "hf": 512}
# Where the copy of the `tasks` package goes inside an export (on sys.path as a folder holding `tasks`).
VENDOR_DIR = "opd_bench_tasks"

_UTILS = '''"""lm-eval hooks for OPD-Bench suites (written by tasks.lm_eval_export; regenerate, do not edit).

Self-contained: the documents are the .jsonl files beside this file, the verifiers are the copy of
OPD-Bench's `tasks` package in {vendor}/.
"""

import functools
import json
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
if str(_HERE / "{vendor}") not in sys.path:
    sys.path.insert(0, str(_HERE / "{vendor}"))

from tasks.suites import get_domain, problem_from_record  # noqa: E402


def load_documents(data_file, **_metadata):
    """lm-eval `custom_dataset` hook: the held-out documents of one domain, as a DatasetDict."""
    import datasets

    lines = (_HERE / data_file).read_text(encoding="utf-8").splitlines()
    return datasets.DatasetDict({{"test": datasets.Dataset.from_list([json.loads(line) for line in lines])}})


@functools.lru_cache(maxsize=None)
def _domain(name):
    return get_domain(name)


def process_results(doc, results):
    """lm-eval hook: 1.0 if the generated text answers the problem, by our own verifier."""
    problem = problem_from_record(doc)
    completion = results[0] if results else ""
    return {{"acc": _domain(problem.domain).score(completion, problem)}}
'''


class ExportFolderError(ValueError):
    """An output folder that holds files and is not an earlier export: nothing is written over it."""


def task_name(suite: Suite) -> str:
    """The lm-eval group name of a suite, e.g. `opd_bench_math_code_easy_tiny`."""
    return f"opd_bench_{suite.name}_{suite.difficulty}_{suite.fmt}"


def lm_eval_command(suite: Suite, out_dir: str | os.PathLike, model: str = "MODEL_DIR", *,
                    model_args: dict[str, Any] | None = None, chat: bool | None = None,
                    stop_ids: Sequence[int] = ()) -> str:
    """The shell command that scores a local HF model folder on an export in `out_dir`.

    `model_args` (arguments of lm-eval's `hf` model besides `pretrained`), `chat` (apply the chat
    template) and `stop_ids` (the tokens generation stops at, as `eos_token_id`) are what `bench
    export-lm-eval --model` reads from the model's tokenizer. By default: no BOS, and the chat template
    for an hf-format suite."""
    model_args = {"add_bos_token": False} if model_args is None else model_args
    chat = suite.fmt == "hf" if chat is None else chat
    given = {"pretrained": model, **model_args}
    plain = all(isinstance(v, (str, bool)) for v in given.values())  # `k=v,...`, else lm-eval's JSON form
    args = ["lm_eval", "--model", "hf", "--model_args",
            ",".join(f"{k}={v}" for k, v in given.items()) if plain else json.dumps(given),
            "--tasks", task_name(suite), "--include_path", str(out_dir), "--batch_size", "16"]
    if chat:
        args.append("--apply_chat_template")
    if stop_ids:
        args += ["--gen_kwargs", json.dumps({"eos_token_id": list(stop_ids)})]
    return shlex.join(args)


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def _task_yaml(name: str, data_file: str, suite: Suite, max_gen_toks: int) -> str:
    return f"""# OPD-Bench {suite.id} (suite version {suite.version}, hash {suite.content_hash}); generated, do not edit
task: {name}
custom_dataset: !function utils.load_documents
dataset_kwargs:
  data_file: {_q(data_file)}
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


def _vendor(out: Path) -> None:
    """Copy this `tasks` package (its .py files) into `out/VENDOR_DIR/tasks`, replacing an older copy."""
    target = out / VENDOR_DIR / "tasks"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(Path(__file__).resolve().parent, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _check_out(out: Path) -> None:
    """Refuse a folder that holds files unless an earlier export wrote it (its utils.py has our header)."""
    if not out.is_dir() or not any(out.iterdir()):
        return  # new or empty (a path that cannot be a folder fails at mkdir, as "cannot use")
    utils = out / "utils.py"
    header = _UTILS.splitlines()[0]
    if utils.is_file() and utils.read_text(encoding="utf-8", errors="replace").startswith(header + "\n"):
        return
    raise ExportFolderError(f"{out} holds files that no `bench export-lm-eval` wrote (no utils.py of an earlier "
                            "export); choose an empty or new --out")


def export(suite: Suite, out_dir: str | os.PathLike, *, max_gen_toks: int | None = None) -> Path:
    """Write the suite as a self-contained lm-eval task group into `out_dir`; returns the group YAML's path.

    `max_gen_toks` caps each completion (default `MAX_GEN_TOKS[suite.fmt]`); give it the evaluating
    profile's `eval_max_new_tokens` to reproduce that profile's held-out accuracy. A folder that holds
    files and is not an earlier export is refused (`ExportFolderError`), nothing written.
    """
    max_gen_toks = MAX_GEN_TOKS[suite.fmt] if max_gen_toks is None else int(max_gen_toks)
    if max_gen_toks < 1:
        raise ValueError(f"max_gen_toks must be >= 1, got {max_gen_toks}")
    out = Path(out_dir)
    _check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    group = task_name(suite)
    records = suite.heldout_records()
    _write(out / "utils.py", _UTILS.format(vendor=VENDOR_DIR))  # first: an interrupted export is ours to redo
    subtasks = []
    for domain in suite.domains:
        name = f"{group}_{domain}"
        rows = [r for r in records if r["domain"] == domain]
        _write(out / f"{name}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        _write(out / f"{name}.yaml", _task_yaml(name, f"{name}.jsonl", suite, max_gen_toks))
        subtasks.append(name)
    _vendor(out)
    group_path = out / f"{group}.yaml"
    _write(group_path, _group_yaml(group, subtasks, suite))
    return group_path
