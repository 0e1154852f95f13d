"""The house: the modules of dcpdissect/ import one way, floor by floor, without circles.

Every ``import`` and ``from ... import`` statement of every module is read from its source
(AST): at module level, inside functions and under ``if``, absolute and relative. ``from P
import name`` is an import of the module ``P.name`` when there is one, else of ``P`` (its
``__init__``); the ``__init__`` files Python runs on the way to a submodule are not counted
(only a package imported by name is). A module may import modules of its own package and of
the packages on lower floors; the root ``dcpdissect/__init__.py`` runs before every module,
so it imports nothing of the package (every module may import it).
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "dcpdissect"

# The floors, ground up. Packages on one floor do not import each other either.
# kernel: the loader of the compiled kernel modules; it imports nothing of the package.
FLOORS = (
    ("protocol", "kernel"),
    ("codec",),
    ("capture",),
    ("reassembly",),
    ("analysis",),
    ("samples",),
    ("luagen", "scapy"),
    ("docgen",),
    ("reports",),
    ("pipeline", "fuzz"),
    ("regen", "cli"),
    ("__main__",),
)
FLOOR = {name: i for i, names in enumerate(FLOORS) for name in names}


def modules(package_dir: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the package."""
    out = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(package_dir: Path) -> dict[str, dict[str, int]]:
    """Module -> {module of the package it imports: line of the first such import}."""
    mods = modules(package_dir)
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        own = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = own.split(".")[:len(own.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base
                           for alias in node.names]
            else:
                continue
            for target in targets:
                while target not in mods and "." in target:     # an attribute, not a module
                    target = target.rpartition(".")[0]
                if target in mods and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def dynamic_imports(package_dir: Path) -> list[str]:
    """``__import__(...)`` and ``importlib.import_module(...)`` calls: imports the graph
    cannot see."""
    out = []
    for name, path in modules(package_dir).items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                    f, ast.Attribute) else ""
                if called in ("__import__", "import_module"):
                    out.append(f"{name}:{node.lineno}: {called}(...)")
    return sorted(out)


def cycles(graph: dict[str, dict[str, int]]) -> list[tuple[list[str], list[str]]]:
    """Per strongly connected group of modules (Tarjan): one shortest circle through it (its
    first module repeated at the end) and all its modules; in a stable order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted((_shortest_circle(graph, group), sorted(group)) for group in groups)


def _shortest_circle(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest circle through the group's first module (breadth first)."""
    start = min(group)
    came: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return path[::-1] + [start]
            if w in group and w not in came:
                came[w] = v
                todo.append(w)
    raise AssertionError(f"no circle through {start}")


def floor_of(module: str) -> tuple[str, int]:
    """(package, floor) of a module; the root package is below every floor (-1)."""
    parts = module.split(".")
    if len(parts) == 1:
        return "", -1
    return parts[1], FLOOR.get(parts[1], -2)


def upward(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import of a package on the importer's floor or above (the root included)."""
    out = []
    for name, edges in sorted(graph.items()):
        package, floor = floor_of(name)
        for target, line in sorted(edges.items()):
            other, other_floor = floor_of(target)
            if other == package or other_floor == -1 and package:
                continue
            if floor == -1 or other_floor >= floor:
                where = "the root package" if floor == -1 else f"floor {floor}"
                out.append(f"{name}:{line} imports {target} ({other or 'root'}, floor "
                           f"{other_floor}) from {where}")
    return out


# --- the checker on a made-up package ------------------------------------------------------

def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / PACKAGE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / PACKAGE


def test_the_checker_sees_every_kind_of_import(tmp_path):
    pkg = _tree(tmp_path, {
        "__init__.py": "",
        "protocol/__init__.py": "from .model import Opcode\n",
        "protocol/model.py": "Opcode = 1\n",
        "codec/__init__.py": "",
        "codec/decode.py": "from ..protocol import model\nimport dcpdissect.protocol\n",
        "codec/layouts.py": "def f():\n    from . import decode\n    from .decode import x\n",
        "cli/__init__.py": "from .. import codec\n",
    })
    assert import_graph(pkg) == {
        "dcpdissect": {},
        "dcpdissect.protocol": {"dcpdissect.protocol.model": 1},
        "dcpdissect.protocol.model": {},
        "dcpdissect.codec": {},
        "dcpdissect.codec.decode": {"dcpdissect.protocol.model": 1, "dcpdissect.protocol": 2},
        "dcpdissect.codec.layouts": {"dcpdissect.codec.decode": 2},
        "dcpdissect.cli": {"dcpdissect.codec": 1},
    }


def test_the_checker_finds_circles_upward_imports_and_dynamic_ones(tmp_path):
    pkg = _tree(tmp_path, {
        "__init__.py": "from . import codec\n",
        "protocol/__init__.py": "",
        "protocol/doc.py": "def render():\n    from ..scapy import layers\n",
        "scapy/__init__.py": "",
        "scapy/layers.py": "from ..protocol import doc\nfrom ..luagen import render\n",
        "luagen/__init__.py": "",
        "luagen/render.py": "",
        "codec/__init__.py": "",
        "codec/a.py": "from .b import x\n",
        "codec/b.py": "from . import c\n",
        "codec/c.py": "import dcpdissect.codec.a\n__import__('dcpdissect.codec.b')\n",
    })
    graph = import_graph(pkg)
    assert [circle for circle, _ in cycles(graph)] == [
        ["dcpdissect.codec.a", "dcpdissect.codec.b", "dcpdissect.codec.c", "dcpdissect.codec.a"],
        ["dcpdissect.protocol.doc", "dcpdissect.scapy.layers", "dcpdissect.protocol.doc"]]
    assert upward(graph) == [
        "dcpdissect:1 imports dcpdissect.codec (codec, floor 1) from the root package",
        "dcpdissect.protocol.doc:2 imports dcpdissect.scapy.layers (scapy, floor 6) from floor 0",
        "dcpdissect.scapy.layers:2 imports dcpdissect.luagen.render (luagen, floor 6) from floor 6"]
    assert dynamic_imports(pkg) == ["dcpdissect.codec.c:2: __import__(...)"]


# --- the house ------------------------------------------------------------------------------

def test_every_package_has_a_floor():
    packages = {floor_of(name)[0] for name in modules(ROOT / PACKAGE)} - {""}
    assert packages - set(FLOOR) == set(), "place the new package in FLOORS"


def test_every_import_is_a_statement():
    # The one exception: the kernel's loader imports the kernel modules (kernel.MODULES, each
    # a module of the package that loads it) by name, compiled or from their source.
    hidden = [line for line in dynamic_imports(ROOT / PACKAGE)
              if not line.startswith(f"{PACKAGE}.kernel:")]
    assert hidden == []


def test_no_module_imports_upward():
    graph = import_graph(ROOT / PACKAGE)
    assert len(graph) > 100 and sum(map(len, graph.values())) > 400     # the graph was read
    assert "dcpdissect.protocol" in graph["dcpdissect.codec.decode"]
    bad = upward(graph)
    assert bad == [], "imports against the floors:\n" + "\n".join(bad)


def test_no_import_circles():
    found = cycles(import_graph(ROOT / PACKAGE))
    assert found == [], "import circles:\n" + "\n".join(
        f"{' -> '.join(circle)}  (all {len(group)} in the circle: {', '.join(group)})"
        for circle, group in found)
