"""Imports run with the grain: training loads no web stack, the use-cases no web framework, and no import loops.

The graph is built with `ast` from every import statement, those inside functions included (a lazy import still
ties two modules together)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEB_STACK = ("fastapi", "starlette", "redis", "prometheus_client", "uvicorn")


def loaded_after(code: str) -> set[str]:
    """The top-level packages in sys.modules after running `code` in a fresh interpreter."""
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return {name.partition(".")[0] for name in out.split()}


def test_training_loads_no_web_stack():
    """Every training module (teacher, agent, driver, sft, ...) imports without the service's web stack."""
    code = ("import importlib, pkgutil, training\n"
            "for m in pkgutil.walk_packages(training.__path__, 'training.'): importlib.import_module(m.name)")
    assert loaded_after(code) & set(WEB_STACK) == set()


def test_the_use_cases_load_no_web_framework():
    assert loaded_after("import service.sessions, service.banks, service.bank.evidence") & {"fastapi", "starlette"} \
        == set()


def _modules() -> dict[str, Path]:
    mods = {}
    for top in ("service", "training"):
        for path in sorted((ROOT / top).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return mods


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (a `from package import name` counts as the submodule when `name`
    is one, else as the package)."""
    mods = _modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] +
                                    ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    deps.add(sub if sub in mods else known(base))
        graph[mod] = deps - {None, mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_loops_in_service_or_training():
    graph = import_graph()
    assert "training.envs.alfworld.pool" in graph and "service.domains" in graph
    assert cycles(graph) == []


def test_imports_point_down_the_tiers():
    """service never imports training; below the HTTP layer nothing imports service.api. The one exception is the
    `evoharness serve` entry point (service/cli.py), which builds the app."""
    graph = import_graph()
    for mod, deps in graph.items():
        if mod.startswith("service"):
            assert not {d for d in deps if d.startswith("training")}, mod
        if mod.startswith("service") and not mod.startswith("service.api") and mod != "service.cli":
            assert not {d for d in deps if d.startswith("service.api")}, mod


def test_the_loop_finder_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
