"""The shape of core/ (core/guide/architecture.md): no import cycle between modules, the layering
contract kept (import-linter), and modules and functions of a size a reader can hold."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "core"


def module_cycles(package: str) -> list[list[str]]:
    """The import cycles among ``package``'s modules: every strongly connected component of
    its import graph with more than one module (any import counts: top-level, in a function,
    under TYPE_CHECKING)."""
    graph = grimp.build_graph(package, cache_dir=None)
    modules = sorted(graph.modules)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def imported_by(module: str) -> Iterator[str]:
        return iter(sorted(graph.find_modules_directly_imported_by(module)))

    def visit(start: str) -> None:  # Tarjan's algorithm, iterative
        work = [(start, imported_by(start))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append(
                        (target, iter(sorted(graph.find_modules_directly_imported_by(target))))
                    )
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_core_has_no_import_cycle() -> None:
    assert module_cycles("steplog") == []


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "cycle_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from . import b\n")
    (package / "b.py").write_text("def late():\n    from . import c\n")
    (package / "c.py").write_text("from .a import b\n")
    (package / "d.py").write_text("from . import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert module_cycles("cycle_probe") == [["cycle_probe.a", "cycle_probe.b", "cycle_probe.c"]]


def test_the_layering_contract_is_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def _lines(path: Path) -> int:
    return path.read_text().count("\n")


def _functions(paths: Iterable[Path], root: Path = CORE) -> list[tuple[str, int]]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append(
                    (f"{path.relative_to(root)}:{node.name}", node.end_lineno - node.lineno + 1)
                )  # type: ignore[operator]
    return found


SIZED_PACKAGES = ("store", "replay", "compare")
"""The packages whose every function fits on a screen (80 lines)."""

UI = ROOT / "ui"


def _modules() -> list[Path]:
    """Every Python module of core/ and ui/ (a package's sub-packages too)."""
    return sorted(
        p for top in (CORE, UI) for p in top.rglob("*.py") if "__pycache__" not in p.parts
    )


def test_no_module_past_500_lines() -> None:
    sizes = {str(p.relative_to(ROOT)): _lines(p) for p in _modules()}
    assert len(sizes) > 200 and "ui/common.py" in sizes  # the walk reached both trees
    long = {name: size for name, size in sizes.items() if size > 500}
    assert long == {}, "split these modules: at most 500 lines, one concept each"


def test_no_function_past_80_lines_in_store_replay_compare() -> None:
    paths = [p for name in SIZED_PACKAGES for p in (CORE / name).rglob("*.py")]
    assert len(paths) > 30
    assert [(name, size) for name, size in _functions(paths) if size > 80] == []


def test_the_size_checks_see_a_long_function_and_a_long_module(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    probe = tmp_path / "probe.py"
    probe.write_text(f"def long():\n{body}\n\ndef short():\n    return 1\n")
    sizes = dict(_functions([probe], root=tmp_path))
    assert sizes == {"probe.py:long": 81, "probe.py:short": 2}
    assert _lines(probe) == 85
