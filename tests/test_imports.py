"""The lines the code must never cross, checked on its imports (docs/design.md, Layers and lines).

Every `import` statement of the project is read with `ast` (nothing is imported), resolved to a
project module, and held against these rules:

- methods import only `bench.api` of the engine (and their sibling `methods` modules);
- tasks never import `bench`, `methods`, `reports` or torch;
- reports never import torch, `bench` or `methods`;
- the engine (bench/ except cli/, the composition root) never imports `methods`, `tasks` or
  `reports`: it reaches them only through the registry's lazy "module:attr" strings;
- example plugins import only `bench.api` of the engine;
- inside bench/, a module imports only its own layer and the layers below it (`LAYERS`), and every
  module has a layer;
- bench/ has no import cycle (module-level and function-local imports alike);
- function-local imports of project modules only in bench/cli/ (a fast `bench list`): elsewhere a
  local import is for an optional or slow dependency (vLLM, Ray, fvcore), never to dodge a cycle.

`if TYPE_CHECKING:` blocks are not imports at run time and are not counted. The second half of the
file checks the checker: each rule fails on a tree that breaks it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bench", "methods", "tasks", "reports")

# bench/'s layers, top to bottom: each may import its own layer and those below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("cli", ("bench.cli",)),
    ("run", ("bench.run",)),
    ("world", ("bench.world",)),
    ("contract", ("bench.api", "bench.context", "bench.evaluation", "bench.update", "bench.policy", "bench.losses")),
    ("rollout", ("bench.rollout",)),
    ("accounting", ("bench.accounting",)),
    ("base", ("bench", "bench.errors", "bench.adapter", "bench.registry", "bench.hf_compat", "bench.progress",
              "bench.store")),
]
COMPOSITION_ROOT = "bench.cli"


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, dotted
    target: str  # the imported module (a project module where it resolves to one), dotted
    line: int
    local: bool  # inside a function body

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}{' (in a function)' if self.local else ''}"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    return {module_name(p, root): p for pkg in packages if (root / pkg).is_dir() for p in (root / pkg).rglob("*.py")}


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports_of(source: str, path: Path, known: set[str]) -> list[Import]:
    """Every run-time import in a module, targets resolved to the longest known module name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    out: list[Import] = []

    def resolve(name: str) -> str:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in known:
                return ".".join(parts[:end])
        return name

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                for sub in child.orelse:
                    visit(sub, local)
                continue
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend(Import(source, resolve(a.name), child.lineno, local) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    out.append(Import(source, resolve(f"{base}.{alias.name}" if base else alias.name), child.lineno,
                                      local))
            visit(child, inner)

    visit(tree, False)
    return out


def all_imports(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[Import]:
    modules = project_modules(root, packages)
    return [imp for name, path in sorted(modules.items()) for imp in imports_of(name, path, set(modules))]


def _top(name: str) -> str:
    return name.split(".")[0]


def _in(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


# -- the rules: each returns the imports (or modules) that break it -------------------------------
def method_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if _top(i.source) == "methods" and _top(i.target) in PACKAGES
            and not (_in(i.target, "bench.api") or _top(i.target) == "methods")]


def task_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if _top(i.source) == "tasks"
            and _top(i.target) in ("bench", "methods", "reports", "torch")]


def report_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if _top(i.source) == "reports" and _top(i.target) in ("bench", "methods", "torch")]


def engine_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if _top(i.source) == "bench" and not _in(i.source, COMPOSITION_ROOT)
            and _top(i.target) in ("methods", "tasks", "reports")]


def layer_of(module: str, layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> int | None:
    """Index of the module's layer (0 = top): the layer of the longest entry that is the module or a
    package holding it."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            # a top-level package name ("bench") stands for its __init__ only, not for everything in it
            if (_in(module, prefix) if "." in prefix else module == prefix) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return None if best is None else best[0]


def layer_violations(imports: list[Import], modules: list[str],
                     layers: list[tuple[str, tuple[str, ...]]] = LAYERS) -> list[str]:
    out = [f"{m} has no layer (add it to LAYERS)" for m in modules if _top(m) == "bench" and layer_of(m, layers) is None]
    for i in imports:
        if _top(i.source) == _top(i.target) == "bench":
            src, dst = layer_of(i.source, layers), layer_of(i.target, layers)
            if src is not None and dst is not None and dst < src:
                out.append(f"{i}: layer {layers[src][0]} reaches up to {layers[dst][0]}")
    return out


def find_cycle(imports: list[Import], package: str = "bench") -> list[str] | None:
    """One import cycle among the package's modules, as [a, b, ..., a], or None."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if _top(i.source) == _top(i.target) == package and i.source != i.target:
            graph.setdefault(i.source, set()).add(i.target)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := dfs(start)):
            return cycle
    return None


def local_import_violations(imports: list[Import]) -> list[str]:
    return [str(i) for i in imports if i.local and _top(i.source) == "bench" and not _in(i.source, COMPOSITION_ROOT)
            and _top(i.target) in PACKAGES]


TASK_API = {"tasks"} | {f"tasks.{name}" for name in __import__("tasks").__all__}


def plugin_violations(root: Path) -> list[str]:
    out = []
    for path in sorted((root / "examples").rglob("*.py")) if (root / "examples").is_dir() else []:
        for i in imports_of(f"examples.{path.stem}", path, set()):
            # methods: bench.api; tasks: the names the tasks package exports (not its modules)
            if _top(i.target) in PACKAGES and not _in(i.target, "bench.api") and i.target not in TASK_API:
                out.append(f"{path.relative_to(root)}:{i.line} imports {i.target}")
    return out


# -- the project ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def project() -> tuple[list[Import], list[str]]:
    return all_imports(ROOT), sorted(project_modules(ROOT))


def test_methods_see_only_the_public_api(project):
    assert method_violations(project[0]) == []


def test_tasks_know_no_engine_and_no_models(project):
    assert task_violations(project[0]) == []


def test_reports_read_records_only(project):
    assert report_violations(project[0]) == []


def test_the_engine_names_no_method_task_or_report(project):
    assert engine_violations(project[0]) == []


def test_example_plugins_use_only_the_public_api():
    assert plugin_violations(ROOT) == []


def test_layers_import_only_downward(project):
    assert layer_violations(*project) == []


def test_bench_has_no_import_cycle(project):
    assert find_cycle(project[0]) is None


def test_no_function_local_imports_of_project_modules_outside_the_cli(project):
    assert local_import_violations(project[0]) == []


def test_every_package_folder_has_an_init():
    """setuptools installs only folders with an `__init__.py`: a layer without one would be left out."""
    folders = {p.parent for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    assert sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").exists()) == []


# -- the checker ----------------------------------------------------------------------------------
CLEAN = {
    "bench/__init__.py": "",
    "bench/errors.py": "class RunError(Exception): ...\n",
    "bench/api.py": "from bench.errors import RunError\nfrom bench.run import runner as _unused  # noqa\n",
    "bench/run/__init__.py": "",
    "bench/run/runner.py": "import torch\nfrom bench import errors\n",
    "bench/cli.py": "def main():\n    import tasks\n    from bench.run import runner\n",
    "methods/__init__.py": "",
    "methods/grpo.py": "import torch\nfrom bench.api import RunError\nfrom methods import distill\n",
    "methods/distill.py": "from bench.api import RunError\n",
    "tasks/__init__.py": "import random\nfrom tasks import base\n",
    "tasks/base.py": "import re\n",
    "reports/__init__.py": "import pandas\n",
    "examples/plug/plug.py": "from bench.api import RunError\n",
}
TOY_LAYERS = [("cli", ("bench.cli",)), ("run", ("bench.run", "bench.api")), ("base", ("bench", "bench.errors"))]


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def _check(root: Path) -> dict[str, list]:
    imports, modules = all_imports(root), sorted(project_modules(root))
    cycle = find_cycle(imports)
    return {
        "methods": method_violations(imports), "tasks": task_violations(imports),
        "reports": report_violations(imports), "engine": engine_violations(imports),
        "layers": layer_violations(imports, modules, TOY_LAYERS), "cycle": [cycle] if cycle else [],
        "local": local_import_violations(imports), "plugins": plugin_violations(root),
    }


def test_the_checker_passes_a_clean_tree(tmp_path):
    assert _check(_tree(tmp_path, CLEAN)) == {rule: [] for rule in _check(_tree(tmp_path, CLEAN))}


@pytest.mark.parametrize("rule, files", [
    ("methods", {"methods/distill.py": "from bench.run.runner import Runner\n"}),
    ("methods", {"methods/distill.py": "from bench import run\n"}),
    ("methods", {"methods/distill.py": "import tasks.base\n"}),
    ("tasks", {"tasks/base.py": "import torch\n"}),
    ("tasks", {"tasks/base.py": "def f():\n    from bench.errors import RunError\n"}),
    ("reports", {"reports/__init__.py": "import torch.nn\n"}),
    ("reports", {"reports/__init__.py": "from methods import grpo\n"}),
    ("engine", {"bench/run/runner.py": "import methods.grpo\n"}),
    ("engine", {"bench/run/runner.py": "from tasks import base\n"}),
    ("plugins", {"examples/plug/plug.py": "from bench.run.runner import Runner\n"}),
    ("plugins", {"examples/plug/plug.py": "from tasks.base import safe_score\n"}),
    ("layers", {"bench/errors.py": "from bench.run import runner\n"}),
    ("layers", {"bench/extra.py": ""}),  # a module without a layer
    ("cycle", {"bench/run/runner.py": "from bench.api import RunError\n"}),
    ("cycle", {"bench/run/runner.py": "def f():\n    from bench import api\n"}),
    ("local", {"bench/run/runner.py": "def f():\n    from bench import errors\n"}),
])
def test_each_rule_fails_on_a_tree_that_breaks_it(tmp_path, rule, files):
    result = _check(_tree(tmp_path, {**CLEAN, **files}))
    assert result[rule], f"{rule} did not catch {files}"


def test_type_checking_imports_and_relative_imports(tmp_path):
    files = {**CLEAN, "bench/errors.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bench.api import X\n",
             "bench/run/runner.py": "from ..errors import RunError\nfrom . import __init__\n"}
    root = _tree(tmp_path, files)
    imports = all_imports(root)
    assert not any(i.source == "bench.errors" and i.target == "bench.api" for i in imports)
    assert any(i.source == "bench.run.runner" and i.target == "bench.errors" for i in imports)
    assert find_cycle(imports) is None
