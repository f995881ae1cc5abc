"""The shape of the package: which module imports which.

Imports are read from the source (``ast``), those inside functions included, since a cycle
hidden in a function body is a cycle all the same: whichever module runs first decides which
half-initialised module the other sees. Imports under ``if TYPE_CHECKING:`` are left out: they
never run.
"""

from __future__ import annotations

import ast
from pathlib import Path

from .conftest import REPO

PACKAGE = REPO / "memmodel"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` that can run (at module level or in any function)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _nearest(name: str, modules: dict[str, Path]) -> str | None:
    """The module of ``name`` (``memmodel.traffic.flash.fa2`` -> ``memmodel.traffic.flash``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """memmodel module -> the memmodel modules it imports (a package's ``__init__`` counts as
    the package; ``from . import x`` names module ``x`` where there is one)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imported(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                wanted = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in wanted:
                found = _nearest(target, modules) if target.startswith("memmodel") else None
                if found and found != name:
                    targets.add(found)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same module, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_reader_sees_imports_in_functions_and_skips_type_checking():
    graph = import_graph()
    # model.py imports memmodel.backward inside tiled_traffic()
    assert "memmodel.backward" in graph["memmodel.model"]
    # implementations.py imports Profile under TYPE_CHECKING only
    assert "memmodel.hardware" not in graph["memmodel.implementations"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles_in_memmodel():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_gpu_code_is_not_imported_by_the_library():
    """Only the CLI (inside its commands) reaches into memmodel.gpu; the library, the reports and
    the calibration's pure half do not."""
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith(("memmodel.gpu", "memmodel.cli")):
            continue
        assert not {t for t in targets if t.startswith("memmodel.gpu")}, name


#: what the hardware package may import of memmodel: itself and the bottom floor (errors, units,
#: the file reader); nothing of the model (traffic, timing, implementations, model, sweep, ...)
HARDWARE_MAY_IMPORT = ("memmodel.errors", "memmodel.units", "memmodel.fileio")


def test_the_hardware_package_is_a_leaf():
    """memmodel.hardware (every module under memmodel/hardware/, imports in functions included)
    imports nothing of the model: the model imports it, never the reverse."""
    graph = import_graph()
    hardware = {name for name in graph if name == "memmodel.hardware" or name.startswith("memmodel.hardware.")}
    assert {"memmodel.hardware.profile", "memmodel.hardware.schema", "memmodel.hardware.load"} <= hardware
    assert "memmodel.hardware.load" in graph["memmodel.hardware"]  # the reader sees the package's own imports
    for name in sorted(hardware):
        outside = {t for t in graph[name] if t not in hardware and t not in HARDWARE_MAY_IMPORT}
        assert not outside, f"{name} imports {sorted(outside)}"
    # the model reaches the profiles through the package, downward
    assert "memmodel.hardware" in graph["memmodel.timing"]
    assert "memmodel.hardware.schema" in graph["memmodel.traffic.l2"]


def test_the_leaf_check_would_see_an_upward_import(tmp_path, monkeypatch):
    """A hardware module importing the model, even inside a function, is caught."""
    import shutil
    import sys

    fake = tmp_path / "memmodel"
    shutil.copytree(PACKAGE, fake, ignore=shutil.ignore_patterns("__pycache__", "*.yaml"))
    load = fake / "hardware" / "load.py"
    load.write_text(load.read_text() + "\n\ndef _late():\n    from ..traffic import l2\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert "memmodel.traffic.l2" in import_graph()["memmodel.hardware.load"]
