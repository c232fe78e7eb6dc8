"""The plugin's modules import one another without a circle, and its exception types import nothing of it.

A circle ties every module on it into one unit: none can be read, imported or tested alone, and an import
order change breaks at a distance. Imports inside functions count too: they are edges all the same.
"""

import ast
from pathlib import Path

from helpers import ROOT

PACKAGE = "fairseq_residual"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_plugin_modules(path: Path, modules: set) -> set:
    """The plugin's modules that ``path`` imports anywhere in its code (``from . import x`` names module x)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.level and node.module else (base if node.level else node.module)
            # ``from package import name``: the submodule where name is one, else the package
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict:
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported_plugin_modules(p, modules) for p in paths}


def circles(graph: dict) -> list:
    """Every strongly connected set of two or more modules (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            members = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                members.append(member)
                if member == node:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_graph_has_the_edges_the_code_writes():
    """Relative, absolute and in-function imports are all read (the check below is only as good as this)."""
    graph = import_graph()
    assert "fairseq_residual.schemes.base" in graph["fairseq_residual.schemes"]  # from .base import
    assert "fairseq_residual.errors" in graph["fairseq_residual.schemes.base"]  # from ..errors import
    assert "fairseq_residual.schemes" in graph["fairseq_residual.config"]  # from .schemes import SCHEMES
    assert "fairseq_residual.error_reporting" in graph["fairseq_residual.patches"]  # from . import (...)


def test_the_plugin_has_no_import_circle():
    # every module imports the package root by being in it: the root's own imports close no circle
    graph = {name: {m for m in deps if m != PACKAGE} for name, deps in import_graph().items()}
    assert circles(graph) == []


def test_the_exception_types_import_nothing_of_the_plugin():
    """errors.py is imported by nearly every module; anything it imports closes a circle through them."""
    assert import_graph()["fairseq_residual.errors"] == set()
