"""A run's configuration: `RunConfig` (what to run, checked before any work) and a method's own config
from `--set key=value` overrides (`method_config`), checked against its dataclass."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.errors import RunError, unknown
from bench.rollout.engines import ROLLOUT_BACKENDS, vllm_missing
from bench.run.phases import EXECUTORS
from bench.run.tracking import TRACKERS
from bench.world.profiles import PROFILES, Profile

# Inputs are bounded before any work starts. A budget below one training step of the smallest model
# is nonsense, and evaluations finer than a thousandth of the budget would spend the run evaluating
# (and an interval of 1e-12 would make the milestone list itself a trillion entries long).
MIN_BUDGET_FLOPS = 1e6
MIN_EVAL_EVERY = 1e-3
MAX_SEED = 2**32  # exclusive: numpy's seeds; torch takes more, but one range for both

@dataclass(frozen=True)
class RunConfig:
    method: str
    suite: str = "math_code"
    difficulty: str = "easy"
    profile: str = "tiny"
    seed: int = 0
    budget_flops: float | None = None  # None: the profile's default
    eval_every: float = 0.1  # evaluate at each multiple of this fraction of the budget...
    eval_early: tuple[float, ...] = (0.01, 0.02, 0.05)  # ...and at these fractions, to resolve early learning
    distill_eval_every: int = 5  # inside a `distill` phase, also evaluate every this many steps (0: off)
    eval_size: int | None = None  # held-out prompts per domain (None: the profile's)
    overrides: tuple[tuple[str, str], ...] = ()  # method config key=value
    runs_dir: Path = Path("runs")
    run_name: str | None = None
    # hf profile: local model folders (student, external teacher, named teachers) and the device
    model: str | None = None
    external: str | None = None
    teachers: tuple[tuple[str, str], ...] = ()
    device: str = "cpu"
    max_new_tokens: int | None = None  # None: the profile's
    # How a method's independent phases (`RunContext.map_phases`) run: sequential | isolated | ray
    # (bench.run.phases). `bench sweep --executor ray` sets ray. Not part of the fingerprint: a run may
    # be resumed under another executor and its ledger stays whole; the record says which one finished it.
    phase_executor: str = "sequential"
    # The rollout engine of methods and evaluations: torch | vllm (bench.rollout.engines).
    # Not part of the fingerprint either: both sample the same distribution and, on a CPU, charge the
    # same analytic FLOPs for the same tokens (torch adds its padded keys, under 1%; on CUDA its graph
    # engine charges its padded rows too); the record says which one finished the run, and a board
    # marks a run whose engine is not its majority's.
    rollout: str = "torch"
    # Trackers that mirror the run while it trains (bench.run.tracking): () or ("tensorboard",). Not part
    # of the fingerprint: what is watched does not change what is trained.
    report_to: tuple[str, ...] = ()
    # A checkpoint at each milestone and at least this often (seconds), so that a kill of a run whose
    # milestones are far apart loses minutes, not the run. Not part of the fingerprint.
    checkpoint_every_s: float = 600.0
    # Also save the student at every evaluation as a Hugging Face folder, `milestones/<index>_<flops>/`
    # (`bench eval` scores any of them). Not part of the fingerprint: it keeps copies, trains nothing.
    save_milestones: bool = False

    def __post_init__(self) -> None:
        if self.profile not in PROFILES:
            raise unknown("profile", self.profile, list(PROFILES))
        if PROFILES[self.profile].task_format == "hf" and not self.model:
            raise RunError(f"the {self.profile} profile needs --model PATH (a local Hugging Face model folder)")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise RunError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}")
        if self.budget_flops is not None and not (self.budget_flops > 0 and self.budget_flops < float("inf")):
            raise RunError(f"budget must be a positive number of FLOPs, got {self.budget_flops!r}")
        if self.budget_flops is not None and self.budget_flops < MIN_BUDGET_FLOPS:
            raise RunError(f"budget must be at least {MIN_BUDGET_FLOPS:.0e} FLOPs (less than one training step), "
                           f"got {self.budget_flops!r}")
        if not MIN_EVAL_EVERY <= self.eval_every <= 1:
            raise RunError(f"eval_every must be in [{MIN_EVAL_EVERY}, 1] (at most 1000 evaluations), "
                           f"got {self.eval_every!r}")
        if not 0 <= self.seed < MAX_SEED:
            raise RunError(f"seed must be in [0, 2^32), got {self.seed}")
        if self.eval_size is not None and self.eval_size < 1:
            raise RunError(f"eval_size must be at least 1 held-out prompt per domain, got {self.eval_size}")
        if not all(0 < f <= 1 for f in self.eval_early):
            raise RunError(f"eval_early fractions must be in (0, 1], got {self.eval_early!r}")
        if self.distill_eval_every < 0:
            raise RunError(f"distill_eval_every must be >= 0, got {self.distill_eval_every!r}")
        if self.phase_executor not in EXECUTORS:
            raise unknown("phase executor", self.phase_executor, list(EXECUTORS))
        world = self.resolved_profile
        if world.task_format != "hf" and self.device not in ("cpu", world.device):
            raise RunError(f"the {self.profile} world's models run on {world.device}, not --device {self.device} "
                           "(--device is for --profile hf)")
        if self.phase_executor == "processes" and self.on_gpu:
            raise RunError("the processes phase executor runs on CPU; on a GPU use sequential, isolated or ray")
        if self.rollout not in ROLLOUT_BACKENDS:
            raise unknown("rollout backend", self.rollout, list(ROLLOUT_BACKENDS))
        for name in self.report_to:
            if name not in TRACKERS:
                raise unknown("tracker", name, list(TRACKERS))
        if self.rollout == "vllm" and self.device.startswith("cuda:") and self.device != "cuda:0":
            raise RunError(f"--rollout vllm builds its engine on the first visible GPU, not on --device {self.device}: "
                           f"run with CUDA_VISIBLE_DEVICES={self.device.removeprefix('cuda:')} and --device cuda")
        if self.rollout == "vllm" and (missing := vllm_missing()):
            raise RunError(missing)

    @property
    def resolved_profile(self) -> Profile:
        return PROFILES[self.profile]

    @property
    def budget(self) -> float:
        return float(self.budget_flops or self.resolved_profile.budget_flops)

    @property
    def on_gpu(self) -> bool:
        """The run trains on a GPU: `device` says so, or its world's models live there (`gpu-small`)."""
        return self.device != "cpu" or self.resolved_profile.device != "cpu"

    @property
    def heldout_size(self) -> int:
        """Held-out prompts per domain at each evaluation: `eval_size`, or the profile's."""
        return self.eval_size or self.resolved_profile.eval_size

    @property
    def rollout_tokens(self) -> int:
        """The most new tokens of a training rollout: `max_new_tokens`, or the profile's."""
        return self.max_new_tokens or self.resolved_profile.max_new_tokens

    @property
    def eval_tokens(self) -> int:
        """The most new tokens of an evaluation's answer: `max_new_tokens`, or the profile's for evaluation."""
        return self.max_new_tokens or self.resolved_profile.eval_max_new_tokens

    @property
    def milestones(self) -> list[float]:
        """Budget fractions at which the runner evaluates: `eval_early`, then every `eval_every`."""
        tenths = [round(k * self.eval_every, 12) for k in range(1, int(round(1 / self.eval_every + 1e-9)) + 1)]
        return sorted({*self.eval_early, *tenths, 1.0})


def method_config(cls: type, overrides: tuple[tuple[str, str], ...]) -> Any:
    """The method's frozen config with `key=value` overrides checked against its fields.

    A config may nest others (`OPDMultiConfig.distill` is a `DistillConfig`): their settings are
    set with dotted keys, `distill.lr=1e-3`. A value is parsed as the field's declared type;
    an unknown key gets the list of known ones and a did-you-mean; a bad value the config's own error.
    """
    try:
        default = cls.Config()
    except Exception as exc:  # a config's own check, whatever it raises (a plugin's assert)
        raise RunError(f"invalid {cls.name} config: {_reason(exc)}") from exc
    changes: dict[str, Any] = {}
    for key, raw in overrides:
        _set(changes, default, key, raw, cls.name)
    try:
        return _replace(default, changes)
    except Exception as exc:
        raise RunError(f"invalid {cls.name} config: {_reason(exc)}") from exc


def _reason(exc: Exception) -> str:
    """A config's error as its message; an unexpected kind of error (an assert) named too."""
    if isinstance(exc, (TypeError, ValueError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def config_fields(config: Any, prefix: str = "") -> list[dict[str, Any]]:
    """Every settable field of a config, nested ones dotted (`expert_fraction`, `distill.lr`, ...):
    name, type and default."""
    fields = []
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value):
            fields += config_fields(value, f"{prefix}{f.name}.")
        else:
            kind = f.type if isinstance(f.type, str) else (  # a class by its name, a generic as written
                f.type.__name__ if isinstance(f.type, type) else str(f.type).replace("typing.", ""))
            fields.append({"name": prefix + f.name, "type": kind, "default": value})
    return fields


ABSENT = "(absent)"  # what a comparison of dotted keys shows for a key one side lacks


def dotted(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested mapping (a fingerprint, a method config) as dotted keys, `--set`'s for a method config:
    {"method_config.distill.lr": 0.001, ...}; an empty mapping is a value, not a level."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and value:
            flat.update(dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def config_keys(config: Any) -> list[str]:
    """Every settable key of a config, nested ones dotted."""
    return [field["name"] for field in config_fields(config)]


def _set(changes: dict[str, Any], default: Any, key: str, raw: str, method: str) -> None:
    """Record `key=raw` in `changes` (nested dicts for nested configs), parsed as its default's type."""
    node, target, parts = default, changes, key.split(".")
    for depth, part in enumerate(parts):
        names = {f.name for f in dataclasses.fields(node)}
        if part not in names:
            raise unknown(f"{method} config key", key, config_keys(default))
        value = getattr(node, part)
        last = depth == len(parts) - 1
        if last and dataclasses.is_dataclass(value):
            inner = ", ".join(f"{key}.{k}" for k in config_keys(value))
            raise RunError(f"{key} is a group of settings; set one of them: {inner}")
        if last:  # `none` sets None where the type allows it (Optional) or the default is None
            none = raw.lower() == "none" and value is None
            target[part] = None if none else _coerce(key, raw, value, _field_type(node, part))
        elif dataclasses.is_dataclass(value):
            node, target = value, target.setdefault(part, {})
        else:
            raise unknown(f"{method} config key", key, config_keys(default))


def _replace(config: Any, changes: dict[str, Any]) -> Any:
    """`config` with `changes`, nested configs rebuilt (and validated) first; a nested error names its group."""
    values = {}
    for name, change in changes.items():
        if isinstance(change, dict):
            try:
                values[name] = _replace(getattr(config, name), change)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name}: {exc}") from exc
        else:
            values[name] = change
    return dataclasses.replace(config, **values)


def _field_type(node: Any, name: str) -> Any:
    """The declared type of a config field (its annotation resolved), or None where it cannot be."""
    try:
        return typing.get_type_hints(type(node)).get(name)
    except Exception:  # another field's annotation names what its module cannot resolve: this one alone
        field = next(f for f in dataclasses.fields(node) if f.name == name)
        if not isinstance(field.type, str):
            return field.type
        try:
            return eval(field.type, vars(sys.modules[type(node).__module__]))  # as get_type_hints would
        except Exception:
            return None


class _Unparsable(RunError):
    """A setting of a type `--set` cannot read (a plain `list` or `dict`, a class of the plugin's own)."""


_PARSED = "bool, int, float, str, Literal[...], tuple[...] and list[...] of those, Optional[...]"


def _unparsable(key: str, declared: Any) -> _Unparsable:
    """The refusal of a setting `--set` cannot read, naming its type as written (modules left out)."""
    if declared is None:
        return _Unparsable(f"{key}: --set cannot parse a setting whose type annotation cannot be resolved")
    name = declared.__name__ if isinstance(declared, type) else re.sub(r"\w+\.", "", str(declared))
    return _Unparsable(f"{key}: --set cannot parse a value of type {name} (it parses {_PARSED})")


def _coerce(key: str, raw: str, default: Any, declared: Any = None) -> Any:
    """`raw` parsed as the field's declared type (`float`, `Optional[float]`, `int | float`,
    `tuple[int, ...]`, `tuple[float, float]`, `list[int]`, `Literal["a", "b"]`), or as its default's
    type where the type is not declared in a form read here (`Any`, an annotation that cannot be
    resolved). A type it cannot read (`list`, `dict`, a class) is refused, not stored as the string;
    only a `str` or `Any` setting takes the text as it is."""
    origin, args = typing.get_origin(declared), typing.get_args(declared)
    if origin in (typing.Union, types.UnionType):
        if raw.lower() == "none" and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        unread = 0
        for option in options:  # the first that reads it
            try:
                return _coerce(key, raw, default, option)
            except _Unparsable:
                unread += 1
            except RunError:
                continue
        if unread == len(options):
            raise _unparsable(key, declared)
        raise RunError(f"{key}={raw!r}: expected {' or '.join(getattr(a, '__name__', str(a)) for a in args)}")
    if origin is typing.Literal:
        for choice in args:
            if raw == str(choice) or (isinstance(choice, bool) and raw.lower() == str(choice).lower()):
                return choice
        raise RunError(f"{key}={raw!r}: expected one of {', '.join(str(a) for a in args)}")
    if origin in (tuple, list):
        items = [x for x in raw.split(",") if x]
        if origin is tuple and args and args[-1] is not Ellipsis:  # fixed length, a type per place
            if len(items) != len(args):
                raise RunError(f"{key}={raw!r}: expected {len(args)} comma-separated values")
            return tuple(_coerce(key, x, None, kind) for x, kind in zip(items, args))
        parsed = [_coerce(key, x, None, args[0] if args else str) for x in items]
        return tuple(parsed) if origin is tuple else parsed
    undeclared = declared is None or declared is typing.Any  # unresolved, or any type: its default's
    kind = type(default) if undeclared else declared
    try:
        if kind is bool:
            if raw.lower() not in ("true", "false", "1", "0"):
                raise ValueError(raw)
            return raw.lower() in ("true", "1")
        if kind is int:
            return int(raw)
        if kind is float:
            value = float(raw)
            if not math.isfinite(value):
                raise RunError(f"{key}={raw!r}: expected a finite number")
            return value
        if kind is tuple:
            return tuple(x for x in raw.split(",") if x)
    except ValueError:
        raise RunError(f"{key}={raw!r}: expected {kind.__name__}") from None
    if kind is str or declared is typing.Any:
        return raw
    raise _unparsable(key, declared)
