"""The registration check of a method class, kept free of torch so that listing methods is instant.

The protocol it checks is `bench.api.Method`; the registry runs this check on every method it
loads (built-in, entry point or file), and `bench.api` re-exports it for plugins' own tests.

It also reads the source of the module that defines the class (`api_breach`), as much of it as the
class can reach: a method uses the engine only through `bench.api`, so code that imports another
part of `bench`, or names a private member of the objects a method is handed (the context, its
samplers, policies, rollouts and buckets: `ctx._ledger`, `policy._model`, ... also through
`getattr`), is refused. Work done past the API may not be metered (docs/design.md, "The method
contract"). What the source cannot show (a name built at run time, a helper module of the
plugin's own) `bench check-adapter` measures instead.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import re
from pathlib import Path
from typing import Any

from bench.errors import AdapterError

# the engine's objects a method is handed; their private members are theirs
_ENGINE_SOURCES = ("context.py", "policy.py", "rollout/base.py", "update.py")
_OWN = ("self", "cls")  # a class's own members, whatever their names
_BY_NAME = ("getattr", "setattr", "delattr", "hasattr")


def check_method_class(cls: Any, where: str = "") -> type:
    """Verify a class against the protocol at registration; one clear error naming what is wrong."""
    label = f"{where or getattr(cls, '__name__', repr(cls))}"
    if not isinstance(cls, type):
        raise AdapterError(f"{label}: expected a class, got {type(cls).__name__}")
    problems = []
    if not isinstance(getattr(cls, "name", None), str) or not cls.name:
        problems.append("a non-empty class attribute `name: str`")
    config = getattr(cls, "Config", None)
    if not (isinstance(config, type) and dataclasses.is_dataclass(config)):
        problems.append("a `Config` dataclass")
    elif not config.__dataclass_params__.frozen:
        problems.append("a frozen `Config` dataclass (@dataclass(frozen=True))")
    if not callable(getattr(cls, "run", None)):
        problems.append("a `run(self, ctx)` method")
    why = getattr(cls, "reads_heldout", None)
    if why is not None and not (isinstance(why, str) and why.strip()):
        problems.append("`reads_heldout`, where set, to say in words why it reads held-out accuracy")
    if problems:
        raise AdapterError(f"{label} is not a method adapter: it needs " + "; ".join(problems))
    if (bare := _without_default(config)) is not None:
        raise AdapterError(f"{label}: {bare} has no default: every config field needs one, so that `bench run` "
                           "works without --set")
    if (breach := api_breach(cls)) is not None:
        raise AdapterError(f"{label} reaches past the method API at {breach}: a method uses the engine only "
                           "through bench.api and the public members of the objects it is handed, so that all its "
                           "work is metered (docs/design.md, \"The method contract\")")
    return cls


@functools.cache
def engine_private_names() -> frozenset[str]:
    """Private member names of the engine's objects a method is handed, read from their sources: the
    attributes they set on themselves and the methods they define (dunders aside)."""
    root, names = Path(__file__).resolve().parent, set()
    for rel in _ENGINE_SOURCES:
        try:
            text = (root / rel).read_text(encoding="utf-8")
        except OSError:  # installed without its sources: no names to check against
            return frozenset()
        names |= set(re.findall(r"\bself\.(_[A-Za-z]\w*)", text))  # attributes set or read on themselves
        names |= set(re.findall(r"(?m)^[ \t]+def (_[A-Za-z]\w*)", text))  # methods (module functions aside)
    return frozenset(n for n in names if not n.endswith("__"))


def api_breach(cls: type) -> str | None:
    """The first place where the module defining `cls` goes past `bench.api`, as "FILE:LINE (what)", or
    None (also where its source cannot be read: a class made at run time)."""
    try:
        path = inspect.getsourcefile(cls)
        tree = ast.parse(Path(path).read_bytes()) if path else None  # bytes: its coding line is honoured
    except (TypeError, OSError, SyntaxError, ValueError):
        return None
    if tree is None:
        return None
    # the module's own private names (what it sets on `self` or defines as methods) are its own
    private = engine_private_names() - _own_names(tree)
    engine = {"bench"} | {a.asname for n in ast.walk(tree) if isinstance(n, ast.Import)
                          for a in n.names if a.name == "bench" and a.asname}
    found = sorted((node.lineno, what) for part in _reachable(tree, cls.__qualname__.split(".")[0])
                   for node in ast.walk(part) if (what := _breach(node, private, engine)) is not None)
    return f"{path}:{found[0][0]} ({found[0][1]})" if found else None


def _own_names(tree: ast.Module) -> set[str]:
    """Private names a module gives its own objects: attributes it sets on `self`, methods it defines."""
    names = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.attr for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign))
              for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
              if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return {n for n in names if n.startswith("_")}


def _reachable(tree: ast.Module, root: str) -> list[ast.AST]:
    """What of a module the class `root` can reach: its statements that run on import (a script's
    `if __name__ == "__main__":` block aside) and the functions and classes defined at its top level
    that these or the class name, and those name in turn. A script's own driver (its `main`, which
    may well use the engine) is not the method."""
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    top = []
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        # a script's driver, and imports for type checkers only, do not run when the method is loaded
        top += n.orelse if _main_block(n) or _type_checking(n) else [n]
    todo, seen = [root, *(n.id for part in top for n in ast.walk(part) if isinstance(n, ast.Name))], set()
    while todo:
        if (name := todo.pop()) in defs and name not in seen:
            seen.add(name)
            todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name)]
    return top + [defs[name] for name in seen]


def _super(node: ast.AST) -> bool:
    """`super()`: a member of the class's own bases."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super"


def _main_block(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`, where a script runs as one."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__")


def _type_checking(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` (or `typing.TYPE_CHECKING`), whose imports run for type checkers only."""
    test = node.test if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _past_api(module: str) -> bool:
    """A module of the engine other than `bench.api`."""
    return module.startswith("bench.") and module != "bench.api"


def _breach(node: ast.AST, private: frozenset[str], engine: set[str]) -> str | None:
    if isinstance(node, ast.Import):
        inner = [a.name for a in node.names if _past_api(a.name)]
        return f"imports {inner[0]}" if inner else None
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        if _past_api(node.module):
            return f"imports from {node.module}"
        if node.module == "bench" and (inner := [a.name for a in node.names if a.name != "api"]):
            return f"imports bench.{inner[0]}"
        return None
    root = node.value.id if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) else None
    if root in engine and node.attr != "api":
        return f"uses bench.{node.attr}"
    if isinstance(node, ast.Attribute) and node.attr in private and root not in _OWN and not _super(node.value):
        return f"{ast.unparse(node)} is a private member of the engine's objects"
    key = node.slice.value if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) else None
    if isinstance(key, str) and (key in private or _past_api(key)):
        return f"{ast.unparse(node)} reaches {key}"  # vars(ctx)["_ledger"], sys.modules["bench.store"]
    if not isinstance(node, ast.Call) or not node.args:
        return None
    called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
    named = [a.value for a in node.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    own = isinstance(node.args[0], ast.Name) and node.args[0].id in _OWN
    if called in _BY_NAME and len(node.args) >= 2 and named and named[-1] in private and not own:
        return f"{ast.unparse(node)} names a private member of the engine's objects"
    if called in ("import_module", "__import__") and named and _past_api(named[0]):
        return f"imports {named[0]}"
    return None


def _without_default(config: type) -> str | None:
    """`Cfg field 'lr'` for the first field that `Config()` cannot fill (no default and no default_factory),
    nested configs made by their default_factory included; None where every field has a default."""
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        factory = field.default_factory
        if field.default is dataclasses.MISSING and factory is dataclasses.MISSING:
            return f"{config.__name__} field {field.name!r}"
        if isinstance(factory, type) and dataclasses.is_dataclass(factory) and (inner := _without_default(factory)):
            return inner
    return None
