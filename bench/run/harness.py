"""Score a Hugging Face model folder with lm-evaluation-harness (`bench eval`), offline.

    bench eval runs/grpo__math_code-easy__direct__s0 --limit 100
    bench eval ./my-model --suite math_code --profile hf --task gsm8k

The model is a run directory's `final/` folder (the run's suite, difficulty and profile are the
defaults) or any local model folder. The CLI exports the suite as lm-eval tasks
(`tasks.lm_eval_export`) and this module hands them, with any lm-eval task the user names, to
`lm_eval.simple_evaluate` on its `hf` backend. Decoding is the benchmark's own: greedy, stopped by a
policy's stop tokens only (`Policy.stop_ids`: the tokenizer's EOS and, in chat, the template's end of
turn; the folder's generation_config.json set aside), the evaluation cap, and the prompt tokens a
run feeds (`Policy.encode_prompt`: the chat template where the benchmark uses one, hf prompts on a
tokenizer that has a template; the tokenizer's own special tokens for hf prompts on one without; no
BOS otherwise), so the suite accuracy equals `bench.evaluation.Evaluator`'s on the same first N problems
of each domain (tests/bench/test_harness.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from bench import store
from bench.errors import RunError, unknown
from bench.policy import CHAT_DATE, chat_day, stop_tokens
from bench.world.hf import _dtype
from bench.world.models import TINY_SPECS, is_run_dir, load_error, resolve_model


@dataclass(frozen=True)
class EvalTarget:
    """What `bench eval` scores: a model folder, on a suite, as a profile would evaluate it."""

    model: Path
    suite: str
    difficulty: str
    profile: str
    run_id: str | None = None
    # the run's own evaluation settings, `bench eval`'s defaults: held-out prompts per domain, the cap of
    # an answer and the kind of device (None where the model is no run's, or its record lacks one)
    eval_size: int | None = None
    max_new_tokens: int | None = None
    device: str | None = None


def resolve_target(path: str, *, suite: str | None, difficulty: str | None, profile: str | None) -> EvalTarget:
    """A run directory (scores its `final/`; suite, difficulty, profile and `run_settings` default to the
    run's), one of a run's model folders (`final/`, `milestones/...`: the run's defaults too) or any other
    model folder / tiny spec name (defaults: math_code, easy, and hf, or tiny for a tiny spec). Raises
    `RunError` for a run that has not finished and `UnknownModelError` for a path that holds no model."""
    model = resolve_model(path)  # perhaps a run's own model folder (`final/`, `milestones/<index>_<flops>/`)
    owner = model.parent.parent if model.parent.name == "milestones" else model.parent
    if is_run_dir(owner):
        run = store.read_json(owner / "config.json")
        run = run if isinstance(run, dict) else {}

        def default(given: str | None, key: str) -> str:
            if given is None and not isinstance(run.get(key), str):
                raise RunError(f"{owner / 'config.json'} names no {key}, so it is not a run's config; repair it or "
                               f"pass --{key}")
            return given or run[key]

        run_id = run.get("run_id") if isinstance(run.get("run_id"), str) else None
        settings = run_settings(owner, run)
        if profile not in (None, run.get("profile")):  # another profile's prompts: that profile's cap
            settings.pop("max_new_tokens", None)
        return EvalTarget(model, default(suite, "suite"), default(difficulty, "difficulty"),
                          default(profile, "profile"), run_id=run_id, **settings)
    default_profile = "tiny" if path in TINY_SPECS else "hf"
    return EvalTarget(model, suite or "math_code", difficulty or "easy", profile or default_profile)


def run_settings(owner: Path, run: dict) -> dict[str, Any]:
    """A finished run's evaluation settings (`EvalTarget`'s `eval_size`, `max_new_tokens`, `device`):
    its summary's `settings` where it keeps them, else what its config.json (`run`) names. A record
    made before a setting was kept lacks it, and a value of the wrong type is left out."""
    summary = store.read_json(owner / "summary.json") if (owner / "summary.json").exists() else {}
    kept = summary.get("settings") if isinstance(summary, dict) else None
    kept = kept if isinstance(kept, dict) else {}
    found = {"eval_size": run.get("eval_size"), "max_new_tokens": kept.get("eval_max_new_tokens",
             run.get("eval_max_new_tokens")), "device": kept.get("device", run.get("device"))}
    return {key: value for key, value in found.items()
            if (isinstance(value, str) if key == "device" else type(value) is int and value > 0)}


def check_positions(model: Path, max_new_tokens: int, profile: str) -> None:
    """Refuse, before any work, a cap that leaves a model no positions for its prompt (as `bench run` does)."""
    config = store.read_json(Path(model) / "config.json")
    if not isinstance(config, dict):
        raise RunError(f"cannot load the model in {model} (its config.json holds a JSON {type(config).__name__}, "
                       f"not an object); repair or replace the folder")
    positions = config.get("max_position_embeddings")
    if positions and max_new_tokens >= positions:
        raise RunError(f"a cap of {max_new_tokens} new tokens (the {profile} profile's, or --max-new-tokens) leaves "
                       f"no room for a prompt in the model's {positions} positions; use --max-new-tokens "
                       f"{positions // 2} or less, or a profile with a smaller cap (--profile tiny)")


def eval_dtype(device: str, task_format: str) -> str:
    """The dtype a run of this world used for its model, which its evaluation here uses too: bf16 on
    CUDA for real models (`--profile hf`, as `bench.world.hf` loads them), fp32 elsewhere (every world
    this project builds, `gpu-small` on CUDA included)."""
    return str(_dtype(device)).removeprefix("torch.") if task_format == "hf" else "float32"


def lm_eval_feed(templated: bool, task_format: str) -> tuple[bool, dict[str, Any]]:
    """Whether lm-eval applies the chat template (hf-format prompts on a tokenizer that has one:
    `templated`), and the arguments of its `hf` model that feed prompts as `Policy.encode_prompt` makes
    them: a template's tokens alone, on the fixed day a run gives it; an hf prompt on a tokenizer
    without one with the tokenizer's own special tokens (`add_bos_token` unset: its default, Llama's
    BOS); else no BOS."""
    chat = task_format == "hf" and templated
    if task_format == "hf" and not chat:
        return chat, {}
    return chat, {"add_bos_token": False} | ({"chat_template_args": {"date_string": CHAT_DATE}} if chat else {})


def lm_eval_flags(tokenizer: Any, task_format: str) -> tuple[bool, dict[str, Any], tuple[int, ...]]:
    """`lm_eval_feed` for a model's tokenizer, and the tokens its completions stop at (a policy's
    `stop_ids`): what `bench eval` gives lm-eval, and `bench export-lm-eval --model` prints."""
    chat, model_args = lm_eval_feed(bool(getattr(tokenizer, "chat_template", None)), task_format)
    return chat, model_args, stop_tokens(tokenizer, chat)


def load_tokenizer(model: Path) -> Any:
    """A model folder's tokenizer, offline; one line (`load_error`) where it cannot be loaded."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    except Exception as exc:
        raise load_error(model, exc) from exc


SHOWN_TASKS = 5  # an unknown task's message offers the closest few of lm-eval's thousands, not the list


def evaluate(
    model: Path, task_names: list[str], include_paths: list[Path], *, task_format: str, limit: int | None,
    device: str = "cpu", dtype: str = "float32", batch_size: int = 16, include_defaults: bool = False,
) -> dict[str, Any]:
    """`lm_eval.simple_evaluate` on the hf backend; returns its output (`results`, `samples`, ...).

    Prompts are chat-formatted where the benchmark would feed them so (`bench.policy.Policy`): hf-format
    ones on a tokenizer that has a template. `include_defaults`: also index lm-eval's own tasks (gsm8k,
    ...; seconds), needed only when the user names one. Unknown task names raise `UnknownNameError`
    before any model loads, a model folder that cannot be loaded and a task whose data is not cached
    `RunError`.
    """
    import logging

    import lm_eval
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoTokenizer, GenerationConfig

    # lm-eval warns once per task that uses a `custom_dataset` hook, as every exported task does.
    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    manager = TaskManager(include_path=[str(p) for p in include_paths], include_defaults=include_defaults)
    for name in task_names:
        if name not in manager.all_tasks:
            raise unknown("lm-eval task", name, list(manager.all_tasks), most=SHOWN_TASKS)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
        chat, model_args, stops = lm_eval_flags(tokenizer, task_format)
        lm = HFLM(pretrained=str(model), tokenizer=tokenizer, dtype=dtype, device=device, batch_size=batch_size,
                  **model_args)
    except torch.cuda.OutOfMemoryError:
        raise  # the device's fault, not the folder's
    except Exception as exc:  # truncated weights, no tokenizer, no weights: the folder's, as `bench run` says
        raise load_error(model, exc) from exc
    # the benchmark's decoding (bench.rollout): greedy, stopped by a policy's stop tokens only (the
    # tokenizer's EOS and, in chat, the template's end of turn), none of the folder's
    # generation_config.json (a repetition penalty, other EOS ids, ...)
    lm.model.generation_config = GenerationConfig(eos_token_id=list(stops), pad_token_id=lm.tokenizer.pad_token_id)
    try:
        with chat_day():  # a template that calls `strftime_now` itself, as a run renders it
            return lm_eval.simple_evaluate(
                model=lm,
                tasks=task_names,
                task_manager=manager,
                limit=limit,
                apply_chat_template=chat,
                log_samples=True,
                bootstrap_iters=0,
                verbosity="ERROR",
            )
    except ConnectionError as exc:  # what `datasets` raises offline for data it does not have
        raise RunError(f"a task's data is not in the local datasets cache and nothing is downloaded ({exc}); "
                       "fetch it once where there is a network, e.g. with lm_eval --tasks NAME --limit 1") from exc


def scores_record(target: EvalTarget, suite_id: str, group: str, domains: tuple[str, ...], limit: int | None,
                  output: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """What `bench eval --out` writes: the suite accuracy and its domains', how the model was evaluated
    (`settings`: the answers' cap, device, dtype and batch size), every lm-eval result, and each suite
    prompt with its completion and score."""
    results = output["results"]
    return {
        "model": str(target.model), "run_id": target.run_id, "suite": suite_id, "limit": limit, "settings": settings,
        "accuracy": results[group]["acc,none"],
        "domain_accuracy": {d: results[f"{group}_{d}"]["acc,none"] for d in domains},
        "results": results, "n_samples": output.get("n-samples"), "lm_eval_config": output.get("config"),
        "samples": suite_samples(output, [f"{group}_{d}" for d in domains]),
    }


def suite_samples(output: dict[str, Any], task_names: list[str]) -> dict[str, list[dict]]:
    """Per document of each named task, in document order: the prompt as the model saw it (chat
    template applied), the completion and its score."""
    out = {}
    for task in task_names:
        rows = sorted(output["samples"].get(task, []), key=lambda s: s["doc_id"])
        out[task] = [{"doc_id": s["doc_id"], "prompt": s["arguments"][0][0], "completion": s["resps"][0][0],
                      "acc": s.get("acc")} for s in rows]
    return out


def metric_rows(results: dict[str, dict]) -> list[tuple[str, str, float]]:
    """(task, metric, value) for every metric of lm-eval's `results` (keys `metric,filter`), stderr left out."""
    rows = []
    for task, metrics in results.items():
        for key, value in metrics.items():
            metric, comma, _ = key.partition(",")
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if comma and numeric and not metric.endswith("_stderr"):
                rows.append((task, key, float(value)))
    return rows
