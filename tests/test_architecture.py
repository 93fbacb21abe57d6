"""The package's shape, read from its source with `ast`: sub-packages import each other without a
cycle, no module-level import cycle, folders small enough to read, and only `detok/serve/` imports
the stand-ins (scheduler_stub, reference_engine)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "detok"
STAND_INS = ("scheduler_stub", "reference_engine")
MAX_FILES_PER_FOLDER = 25  # source files (.py, .c, .h) directly in one folder
SOURCE_SUFFIXES = (".py", ".c", ".h")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(tree: ast.Module, module_level: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, or with `module_level` those outside functions (an import for type
    checking counts: it ties the modules together as much for a reader and a type checker)."""
    def walk(nodes: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield node
            elif module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            else:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    yield from walk([n for n in getattr(node, field, []) if isinstance(n, ast.stmt | ast.excepthandler)])
    if module_level:
        yield from walk(tree.body)
    else:
        yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    """The modules an import statement loads (a `from package import name` names a module when
    the package has one of that name)."""
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:
        here = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        anchor = here[: len(here) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    for alias in node.names:
        yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base


def _graph(module_level: bool) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        graph[module] = {t for node in _imports(tree, module_level) for t in _targets(module, node)
                         if t in MODULES and t != module}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _sub_package(module: str) -> str:
    """`detok.api.app` -> `detok.api`; a top-level module (`detok.cli`) is its own node."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_module_level_import_cycle() -> None:
    assert _cycles(_graph(module_level=True)) == []


def test_no_cycle_between_sub_packages() -> None:
    """Every import counts here (in functions and for type checking too): a package's place in the
    layering does not depend on when it imports."""
    packages: dict[str, set[str]] = {}
    for module, targets in _graph(module_level=False).items():
        if module == "detok":
            continue  # the re-exporting facade sits above every sub-package
        packages.setdefault(_sub_package(module), set()).update(
            _sub_package(t) for t in targets if _sub_package(t) != _sub_package(module))
    assert _cycles(packages) == []


def test_only_serve_imports_the_stand_ins() -> None:
    offenders = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree, module_level=False):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] in STAND_INS for n in names) and not module.startswith("detok.serve."):
                offenders.append(module)
    assert offenders == []


@pytest.mark.parametrize("folder", sorted({p.parent for p in PACKAGE.rglob("*") if p.suffix in SOURCE_SUFFIXES}),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_folder_size(folder: Path) -> None:
    files = [p for p in folder.iterdir() if p.suffix in SOURCE_SUFFIXES]
    assert len(files) <= MAX_FILES_PER_FOLDER, f"{folder.relative_to(ROOT)}: {len(files)} source files"


def test_the_checks_see_a_cycle() -> None:
    """The cycle finder itself: a two-module loop and a three-package loop are found."""
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert _cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}}) == [["x", "y", "z"]]
    assert _cycles({"x": {"y"}, "y": set()}) == []


# CPython's private names and other objects' struct fields (the native code uses the public API only)
PRIVATE_API = re.compile(r"\b_Py[A-Za-z_]+|tp_version_tag|PyMemberDescrObject|tp_members|->ob_item")


def test_every_c_source_is_in_native() -> None:
    outside = [p.relative_to(ROOT) for p in PACKAGE.rglob("*") if p.suffix in (".c", ".h")
               and p.parent != PACKAGE / "_native"]
    assert outside == []


def test_native_code_uses_public_api_only() -> None:
    found = [f"{p.name}:{n}: {line.strip()}" for p in sorted((PACKAGE / "_native").iterdir()) if p.suffix in (".c", ".h")
             for n, line in enumerate(p.read_text().splitlines(), 1) if PRIVATE_API.search(line)]
    assert found == []


def test_the_private_api_pattern_matches() -> None:
    for line in ("_PyType_Lookup(t, n)", "type->tp_version_tag", "(PyMemberDescrObject *)d", "base->tp_members",
                 "c->ob_item[k]"):
        assert PRIVATE_API.search(line), line
    assert not PRIVATE_API.search("PyList_GET_ITEM(c, k); PyType_GetSlot(t, Py_tp_descr_get)")
