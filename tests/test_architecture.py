"""The shape of the package: which module imports which.

Imports are read from the source (``ast``), those inside functions included, since a cycle
hidden in a function body is a cycle all the same: whichever module runs first decides which
half-initialised module the other sees. Imports under ``if TYPE_CHECKING:`` are left out: they
never run.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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


def path_to(graph: dict[str, set[str]], start: str, wanted) -> list[str] | None:
    """The shortest import path from ``start`` to a module for which ``wanted(name)`` holds."""
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target in seen:
                    continue
                seen[target] = seen[node] + [target]
                if wanted(target):
                    return seen[target]
                nxt.append(target)
        frontier = nxt
    return None


#: the model's modules, which the hardware (profiles, their schema, derivation and loading) sits below
MODEL_MODULES = ("memmodel.traffic", "memmodel.timing", "memmodel.implementations", "memmodel.model")


def _is_model_module(name: str) -> bool:
    return any(name == m or name.startswith(m + ".") for m in MODEL_MODULES)


def _hardware_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each hardware module (``memmodel/hardware.py`` or every module of a ``memmodel/hardware/``
    package) that reaches a model module, directly or through others, with the path."""
    hardware = [m for m in graph if m == "memmodel.hardware" or m.startswith("memmodel.hardware.")]
    assert hardware, "no memmodel.hardware module or package"
    found = []
    for name in sorted(hardware):
        if path := path_to(graph, name, _is_model_module):
            found.append(" -> ".join(path))
    return found


def test_the_hardware_check_sees_both_layouts_and_indirect_imports():
    graph = {
        "memmodel.hardware": {"memmodel.hardware.load"},
        "memmodel.hardware.load": {"memmodel.units"},
        "memmodel.hardware.derive": {"memmodel.intmath", "memmodel.fileio"},
        "memmodel.fileio": {"memmodel.traffic.l2"},
        "memmodel.units": set(),
        "memmodel.models": set(),  # not memmodel.model
    }
    assert _hardware_violations(graph) == ["memmodel.hardware.derive -> memmodel.fileio -> memmodel.traffic.l2"]
    assert _hardware_violations({"memmodel.hardware": {"memmodel.models", "memmodel.errors"}}) == []
    assert _hardware_violations({"memmodel.hardware": {"memmodel.implementations"}}) == [
        "memmodel.hardware -> memmodel.implementations"
    ]


def test_the_hardware_package_imports_nothing_of_the_model():
    """Profiles, their schema, derivation and loading sit below the model: no module of the
    hardware reaches traffic, timing, implementations or model, not even through another module."""
    violations = _hardware_violations(import_graph())
    assert violations == [], "hardware reaches the model:\n" + "\n".join(violations)


def test_import_memmodel_pulls_in_no_cli_or_gpu_stack():
    code = "import sys, memmodel; print(sorted(m for m in ('click','rich','torch','triton','matplotlib','yaml') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "[]"


#: a percentage figure: a number followed by ``%`` (``90 %``, ``6.4%``)
PERCENT = re.compile(r"\d(?:\.\d+)?\s?%")
#: a single-quoted span inside a string: an example of input syntax, not a figure
QUOTED = re.compile(r"'[^'\n]*'")


def percentage_literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string constant of ``path`` (docstrings and f-string parts
    included) that carries a percentage figure. An f-string's format spec (``{x:.0%}``) is a
    directive, not a figure, and is left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    specs = {
        id(node)
        for value in ast.walk(tree)
        if isinstance(value, ast.FormattedValue) and value.format_spec is not None
        for node in ast.walk(value.format_spec)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in specs:
            # a quoted input example (``'45 %'`` in a message saying what a value may be) is syntax
            text = QUOTED.sub(lambda q: " " * len(q.group(0)), node.value)
            if m := PERCENT.search(text):
                line = node.lineno + node.value.count("\n", 0, m.start())  # the figure's own line in a docstring
                found.append((line, node.value[max(0, m.start() - 30) : m.end() + 10].replace("\n", " ")))
    return sorted(found)


def test_the_percentage_reader_finds_figures_in_docstrings_and_f_strings(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        '"""Module: within 7 % on the H200."""\n'
        "x = 0.9  # a ratio, 90 % in a comment is no literal\n"
        "def f(r):\n"
        '    """No figure here: a share of 0.5.\n\n    Measured: 4-60 % slower."""\n'
        '    return f"{r:.0%} of peak, once up to 18% short"\n'
        "y = \"a ratio such as 0.45 or '45 %'\"\n"
    )
    found = percentage_literals(source)
    assert [line for line, _ in found] == [1, 6, 7]  # the docstring's figure on its own line, 6
    assert "18%" in found[2][1]


def test_no_string_literal_in_memmodel_carries_a_percentage():
    found = [
        f"{path.relative_to(REPO)}:{line}: {text}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, text in percentage_literals(path)
    ]
    assert found == [], "percentage figures in string literals:\n" + "\n".join(found)


def test_gpu_code_is_not_imported_by_the_library():
    """Only the CLI (inside its commands) reaches into memmodel.gpu; the library, the reports and
    the calibration's pure half do not."""
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith(("memmodel.gpu", "memmodel.cli")):
            continue
        assert not {t for t in targets if t.startswith("memmodel.gpu")}, name


#: what the hardware package may import of memmodel: itself and the bottom floor (errors, units, @frozen,
#: the file reader); nothing of the model (traffic, timing, implementations, model, sweep, ...)
HARDWARE_MAY_IMPORT = ("memmodel.errors", "memmodel.units", "memmodel.fileio", "memmodel.frozen")


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


def _undocumented_dataclasses(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ClassDef) or ast.get_docstring(node):
                continue
            for dec in node.decorator_list:
                target = dec.func if isinstance(dec, ast.Call) else dec
                if getattr(target, "id", getattr(target, "attr", None)) in ("dataclass", "frozen"):
                    out.append(f"{path.name}:{node.name}")
    return out


def test_every_dataclass_says_what_it_is(tmp_path):
    """A docstring on every dataclass: it documents, and without one ``dataclass`` computes an
    ``inspect.signature`` for ``__doc__`` at import (about 1 ms each at start-up)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from dataclasses import dataclass\n@dataclass(frozen=True)\nclass A:\n    x: int\n@frozen\nclass B:\n    y: int\n"
    )
    assert _undocumented_dataclasses([bad]) == ["bad.py:A", "bad.py:B"]
    assert _undocumented_dataclasses(sorted(PACKAGE.rglob("*.py"))) == []


def test_no_plain_frozen_dataclass_in_the_package():
    """Every frozen dataclass of memmodel is ``@frozen`` (``memmodel/frozen.py``): one
    ``@dataclass(frozen=True)`` compiles three more methods at import."""
    plain = [
        f"{path.relative_to(PACKAGE)}:{node.lineno}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
        for dec in node.decorator_list
        if isinstance(dec, ast.Call)
        and getattr(dec.func, "id", None) == "dataclass"
        and any(k.arg == "frozen" and getattr(k.value, "value", False) is True for k in dec.keywords)
    ]
    assert plain == []
