"""The package's shape, read from its source with `ast`: sub-packages import each other without a
cycle, no module-level import cycle, folders small enough to read, only `detok/serve/` imports
the stand-ins (scheduler_stub, reference_engine), no class is assembled from 3 or more of detok's
own classes, and the C names no attribute of a detok Python class."""

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
# (a type's own `.tp_members = ...` table is its public definition; reading another's is not)
PRIVATE_API = re.compile(r"\b_Py[A-Za-z_]+|tp_version_tag|PyMemberDescrObject|->tp_members|->ob_item")


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
    assert not PRIVATE_API.search("    .tp_members = StreamFields_members,")


# ---- state by composition --------------------------------------------------------------------
MAX_DETOK_BASES = 2  # a class may extend detok classes, but is not assembled from 3 or more of them


def _classes() -> Iterator[tuple[str, ast.ClassDef]]:
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                yield module, node


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def _mixed_classes(classes: list[tuple[str, ast.ClassDef]]) -> list[str]:
    """`module.Class (bases)` of each class with more than MAX_DETOK_BASES bases that are detok classes."""
    ours = {node.name for _, node in classes}
    out = []
    for module, node in classes:
        bases = [name for name in map(_base_name, node.bases) if name in ours]
        if len(bases) > MAX_DETOK_BASES:
            out.append(f"{module}.{node.name}({', '.join(bases)})")
    return out


def test_no_class_is_assembled_from_three_detok_classes() -> None:
    assert _mixed_classes(list(_classes())) == []


def test_the_mixin_check_sees_a_mixed_class() -> None:
    tree = ast.parse("class A: pass\nclass B: pass\nclass C: pass\nclass T(A, B, C, dict): pass\nclass U(A, B): pass")
    classes = [("m", n) for n in tree.body if isinstance(n, ast.ClassDef)]
    assert _mixed_classes(classes) == ["m.T(A, B, C)"]


# ---- the native boundary: C names no attribute of a detok Python class -----------------------
# a name C looks up on an object: interned, or passed as a literal to a get/set/call by name, or any
# literal private name (`"_x"`, as a table of names to intern holds them) ...
_C_NAME = re.compile(r'(?:InternFromString|GetAttrString|SetAttrString|HasAttrString|CallMethod\w*|intern)'
                     r'\([^;"]*?"([A-Za-z_][A-Za-z0-9_]*)"|"(_[A-Za-z][A-Za-z0-9_]*)"')
# ... but not a name the C defines on its own type: an entry of its member / getset / method tables
_C_OWN_NAME = re.compile(r'\{\s*"([A-Za-z_][A-Za-z0-9_]*)"\s*,|\bFIELD\([^"\n]*"([A-Za-z_][A-Za-z0-9_]*)"')
# names C may look up: other libraries' public APIs and plain values, each with why
C_NAMES_ALLOWED = {
    "done": "the consumer's asyncio.Future.done()",
    "set_result": "the consumer's asyncio.Future.set_result()",
    "write_paused": "uvicorn's FlowControl.write_paused",
    "disconnected": "uvicorn's RequestResponseCycle.disconnected",
    "length": "a finish reason value (\"length\"), not an attribute",
}


def _attribute_names(classes: list[tuple[str, ast.ClassDef]]) -> set[str]:
    """Every attribute a detok Python class defines: its slots, methods, class-level names, and
    what its methods store on `self`."""
    names: set[str] = set()
    for _, node in classes:
        for item in node.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                for target in item.targets:
                    if isinstance(target, ast.Name):
                        names.add(target.id)
                        if target.id == "__slots__":
                            names |= {c.value for c in ast.walk(item.value)
                                      if isinstance(c, ast.Constant) and isinstance(c.value, str)}
        for sub in ast.walk(node):
            if (isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Store) and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"):
                names.add(sub.attr)
    return names


def _c_names(text: str) -> set[str]:
    own = {a or b for a, b in _C_OWN_NAME.findall(text)}
    return {a or b for a, b in _C_NAME.findall(text)} - own


def test_native_code_names_no_attribute_of_a_detok_class() -> None:
    attributes = _attribute_names(list(_classes()))
    found = sorted(f"{p.name}: {name}" for p in (PACKAGE / "_native").iterdir() if p.suffix in (".c", ".h")
                   for name in _c_names(p.read_text()) if name in attributes and name not in C_NAMES_ALLOWED)
    assert found == []


def test_the_c_name_check_sees_a_lookup() -> None:
    text = ('S_x = PyUnicode_InternFromString("_push_queued");\n'
            'PyObject_CallMethod(obj, "take_text", NULL);\n'
            'if (intern(&str_step, "_step_py") < 0) return NULL;\n'
            'v = PyObject_GetAttrString(o, "finish");\n'
            'static const char *names[] = {[SL_WAITER] = "_waiter"};\n'
            'static PyMemberDef m[] = {{"_chunks", T_OBJECT_EX, 0, 0, NULL}, FIELD(S, "_tokens", tokens)};')
    assert _c_names(text) == {"_push_queued", "take_text", "_step_py", "finish", "_waiter"}
    tree = ast.parse("class S:\n    __slots__ = ('_a',)\n    def f(self):\n        self._b = 1\n    x: int")
    assert _attribute_names([("m", n) for n in tree.body if isinstance(n, ast.ClassDef)]) == {"_a", "_b", "f", "x",
                                                                                              "__slots__"}


def test_the_architecture_page_names_every_c_file() -> None:
    """The native-code table of docs/architecture.md has one row per C file (its one job)."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    table = page.split("<!-- native-map", 1)[1].split("\n\n", 2)[1]
    named = set(re.findall(r"`(_\w+\.[ch])`", "\n".join(line.split("|")[1] for line in table.splitlines()
                                                         if line.startswith("| `"))))
    assert named == {p.name for p in (PACKAGE / "_native").iterdir() if p.suffix in (".c", ".h")}
