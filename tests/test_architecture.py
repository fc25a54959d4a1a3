"""The import contract: layers import one way (docs/architecture.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# layer → the packages of ours it must never import
FORBIDDEN = {
    "automl": ("api",),
    "automl/service": ("automl.trials", "automl.pipeline", "automl.fleet"),
    "automl/storage": (
        "automl.trials", "automl.pipeline", "automl.fleet", "automl.service", "automl.search",
        "automl.report",
    ),
    "automl/search": ("automl.trials", "automl.fleet", "automl.service", "automl.report"),
    "automl/pipeline": ("automl.trials", "automl.fleet", "automl.service", "automl.search"),
    "automl/trials": ("automl.fleet", "automl.report", "automl.service"),
}  # fmt: skip


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports when it runs, at any depth (lazy imports in functions
    included; ``if TYPE_CHECKING:`` blocks, which never run, left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and ast.unparse(node.test) in _TYPE_CHECKING:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


_TYPE_CHECKING = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_one_way(layer: str) -> None:
    broken = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for module in sorted(imported_modules(path))
        if any(module == f or module.startswith(f"{f}.") for f in FORBIDDEN[layer])
    ]
    assert not broken, "\n".join(broken)


# Leaves: what each may import of ours.
LEAVES = {
    "automl/catalog": ("automl.errors", "automl.catalog"),
    "automl/targets": ("automl.errors", "automl.targets", "automl.settings", "automl.catalog"),
}


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_the_catalog_and_the_targets_import_no_layer(leaf: str) -> None:
    broken = [
        f"{file.relative_to(ROOT)} imports {module}"
        for file in sorted((ROOT / leaf).rglob("*.py"))
        for module in sorted(imported_modules(file))
        if module.split(".")[0] in ("automl", "api") and not module.startswith(LEAVES[leaf])
    ]
    assert not broken, "\n".join(broken)


def _unit(module: str) -> str | None:
    """The package (``automl.pipeline``), top-level module (``automl.inputs.data``) or ``api`` that
    ``module`` belongs to; ``None`` outside ours."""
    parts = module.split(".")
    if parts[0] not in ("automl", "api"):
        return None
    return ".".join(parts[:2]) if parts[0] == "automl" else "api"


def _unit_graph() -> dict[str, dict[str, str]]:
    """unit → {unit it imports: one file that imports it}, lazy imports included."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted([*(ROOT / "automl").rglob("*.py"), *(ROOT / "api").rglob("*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        source = _unit(module)
        for imported in imported_modules(path):
            target = _unit(imported)
            if target and source and target != source:
                graph.setdefault(source, {}).setdefault(target, str(path.relative_to(ROOT)))
    return graph


def _path(graph: dict[str, dict[str, str]], start: str, goal: str) -> list[str] | None:
    """A chain of imports from ``start`` to ``goal``, if there is one."""
    seen, frontier = {start}, [[start]]
    while frontier:
        chain = frontier.pop()
        for nxt in graph.get(chain[-1], {}):
            if nxt == goal:
                return [*chain, nxt]
            if nxt not in seen:
                seen.add(nxt)
                frontier.append([*chain, nxt])
    return None


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = _unit_graph()
    cycles = []
    for source, targets in graph.items():
        for target, file in targets.items():
            back = _path(graph, target, source)
            if back:
                cycles.append(f"{file}: {source} → {' → '.join(back)}")
    assert not cycles, "\n".join(cycles)


def test_the_cycle_check_sees_a_lazy_import_and_no_type_checking_one(tmp_path: Path) -> None:
    lazy = tmp_path / "m.py"
    lazy.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import automl.service\n"
        "def f():\n    from automl.fleet import study_loop\n"
    )
    assert "automl.fleet" in imported_modules(lazy)
    assert "automl.service" not in imported_modules(lazy)
    graph = {"automl.a": {"automl.b": "a.py"}, "automl.b": {"automl.c": "b.py"}}
    assert _path(graph, "automl.a", "automl.c") == ["automl.a", "automl.b", "automl.c"]
    assert _path(graph, "automl.c", "automl.a") is None


def test_the_api_imports_neither_torch_nor_the_study_loop() -> None:
    code = (
        "import sys, api; from api import create_app; from api.main import create_app; "
        "heavy = [m for m in ('torch', 'automl.fleet.study_loop', 'automl.trials.objective') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_the_top_of_automl_holds_at_most_twelve_modules() -> None:
    modules = sorted(p.name for p in (ROOT / "automl").glob("*.py"))
    assert len(modules) <= 12, modules
