"""Name -> implementation maps for methods and suites, with plugins and did-you-mean errors.

Built-ins are lazy `"module:Attr"` strings (`methods/__init__.py: BUILTIN`, `tasks`), so `bench` never
imports a method or a task by name. Third-party methods arrive through the `opd_bench.methods`
entry-point group or as `path/to/file.py:ClassName`; all go through `bench.api.check_method_class`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.adapter import check_method_class
from bench.errors import AdapterError, UnknownNameError, unknown

ENTRY_POINT_GROUP = "opd_bench.methods"


def _load_ref(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def builtin_methods() -> dict[str, str]:
    return dict(_load_ref("methods:BUILTIN"))


def reproduce_protocol() -> dict[str, tuple]:
    """What `bench reproduce` runs: {"methods", "suites"} crossed, then each (method, suite) of "extra"."""
    return dict(_load_ref("methods:REPRODUCE"))


def plugin_methods() -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def method_names() -> list[str]:
    return sorted(set(builtin_methods()) | set(plugin_methods()))


def _load_file_class(spec: str) -> type:
    path_str, _, cls_name = spec.rpartition(":")
    path = Path(path_str)
    if not cls_name or not path.suffix == ".py":
        raise AdapterError(f"method plugin {spec!r} must look like path/to/file.py:ClassName")
    if not path.is_file():
        raise AdapterError(f"method plugin file not found: {path}")
    mod_name = f"opd_bench_plugin_{abs(hash(str(path.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # a plugin's import error is the plugin's fault: say so, briefly
        raise AdapterError(f"method plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    if not hasattr(module, cls_name):
        raise AdapterError(f"method plugin {path} has no class {cls_name!r}")
    return getattr(module, cls_name)


def _own_name(cls: type, where: str, taken: Iterable[str]) -> type:
    """A plugin's method, refused where it calls itself by a name already taken: a run is named and
    fingerprinted by its method's name, so its runs would be taken for that method's, and theirs for its."""
    if cls.name in taken:
        raise AdapterError(f"method plugin {where} calls itself {cls.name!r}, the name of another method, whose "
                           "runs would be taken for its own; give it a name of its own")
    return cls


def get_method(name: str) -> type:
    """The method class for a built-in name, an entry-point name or `file.py:Class`."""
    if ".py:" in name:
        return _own_name(check_method_class(_load_file_class(name), where=name), name, method_names())
    builtins = builtin_methods()
    if name in builtins:
        return check_method_class(_load_ref(builtins[name]), where=name)
    plugins = plugin_methods()
    if name in plugins:
        try:
            cls = plugins[name].load()
        except Exception as exc:
            raise AdapterError(f"method plugin {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
        return _own_name(check_method_class(cls, where=f"plugin {name!r}"), repr(name), builtins)
    raise unknown("method", name, method_names())


def get_suite(name: str, difficulty: str, fmt: str) -> Any:
    tasks = importlib.import_module("tasks")
    try:
        return tasks.get_suite(name, difficulty, fmt)
    except tasks.UnknownSuiteError as exc:
        raise UnknownNameError(str(exc)) from exc


def suite_names() -> list[str]:
    return list(importlib.import_module("tasks").list_suites())
