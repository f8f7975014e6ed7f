"""Name -> implementation maps for methods and suites, with plugins and did-you-mean errors.

Built-ins are lazy `"module:Attr"` strings (`methods/__init__.py: BUILTIN`, `tasks`), so `bench` never
imports a method or a task by name. Third-party methods arrive through the `opd_bench.methods`
entry-point group or as `path/to/file.py:ClassName`; all go through `bench.api.check_method_class`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
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


_FILES: dict[str, str] = {}  # module name -> path of each file plugin loaded in this process


def _load_file_class(spec: str) -> type:
    path_str, _, cls_name = spec.rpartition(":")
    path = Path(path_str)
    if not cls_name or not path.suffix == ".py":
        raise AdapterError(f"method plugin {spec!r} must look like path/to/file.py:ClassName")
    if not path.is_file():
        raise AdapterError(f"method plugin file not found: {path}")
    module = _load_file(_module_name(path), path)
    if not hasattr(module, cls_name):
        raise AdapterError(f"method plugin {path} has no class {cls_name!r}")
    return getattr(module, cls_name)


def _module_name(path: Path) -> str:
    """The module name a file plugin is loaded under: the same for the same file in every process."""
    return f"opd_bench_plugin_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}"


def _load_file(mod_name: str, path: Path) -> Any:
    module_spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # a plugin's import error is the plugin's fault: say so, briefly
        del sys.modules[mod_name]
        raise AdapterError(f"method plugin {path} failed to import: {type(exc).__name__}: {exc}") from exc
    _FILES[mod_name] = str(path.resolve())
    return module


def file_plugins() -> dict[str, str]:
    """The file plugins loaded in this process (module name -> path), for `load_file_plugins` in a
    worker process: what the parent pickled from them (a phase's function) refers to their modules."""
    return dict(_FILES)


def load_file_plugins(files: dict[str, str]) -> None:
    """Load a parent's file plugins (`file_plugins()`) under the same names, where not loaded yet.
    One that no longer loads (a file a long-lived parent loaded once, since deleted) is passed over:
    what the child is given refers to the run's own plugin, not to every one the parent loaded."""
    for mod_name, path in files.items():
        if mod_name not in sys.modules:
            try:
                _load_file(mod_name, Path(path))
            except AdapterError:
                continue


def _own_name(cls: type, where: str, taken: Iterable[str]) -> type:
    """A plugin's method, refused where it calls itself by a name already taken: a run is named and
    fingerprinted by its method's name, so its runs would be taken for that method's, and theirs for its."""
    if cls.name in taken:
        raise AdapterError(f"method plugin {where} calls itself {cls.name!r}, the name of another method, whose "
                           "runs would be taken for its own; give it a name of its own")
    return cls


def _installed_from(name: str, path: Path) -> bool:
    """Whether the installed method plugin `name` is defined in the file `path` (an editable install)."""
    try:
        return Path(inspect.getfile(plugin_methods()[name].load())).resolve() == path.resolve()
    except Exception:  # not installed, or failing to load: not that file
        return False


def get_method(name: str) -> type:
    """The method class for a built-in name, an entry-point name or `file.py:Class`."""
    if ".py:" in name:
        cls = check_method_class(_load_file_class(name), where=name)
        if _installed_from(cls.name, Path(name.rpartition(":")[0])):
            return get_method(cls.name)  # the installed method's own file (an editable install): that method
        return _own_name(cls, name, method_names())
    builtins = builtin_methods()
    if name in builtins:
        return check_method_class(_load_ref(builtins[name]), where=name)
    plugins = plugin_methods()
    if name in plugins:
        try:
            cls = plugins[name].load()
        except Exception as exc:
            raise AdapterError(f"method plugin {name!r} failed to load: {type(exc).__name__}: {exc}") from exc
        cls = _own_name(check_method_class(cls, where=f"plugin {name!r}"), repr(name), builtins)
        if cls.name != name:  # runs and records are named by the class: two plugins could share runs
            raise AdapterError(f"method plugin {name!r} ({plugins[name].value}) calls itself {cls.name!r}; an "
                               "installed method's name must be its entry point's")
        return cls
    raise unknown_method(name)


def unknown_method(name: str) -> UnknownNameError:
    """The error for a method name that is none of the known ones: a file named without its class
    (`path/to/file.py`) is told how to name it; any other name gets the known ones and a did-you-mean."""
    if name.endswith(".py") or "/" in name or os.sep in name:
        here = f" ({name}:ClassName)" if name.endswith(".py") else ""
        return UnknownNameError(f"unknown method {name!r}: a method in a file is named with its class, "
                                f"path/to/file.py:ClassName{here}")
    return unknown("method", name, method_names())


def get_suite(name: str, difficulty: str, fmt: str) -> Any:
    tasks = importlib.import_module("tasks")
    try:
        return tasks.get_suite(name, difficulty, fmt)
    except tasks.UnknownSuiteError as exc:
        raise UnknownNameError(str(exc)) from exc
