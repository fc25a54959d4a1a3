"""The import contract: layers import one way (the README's "Architecture" section)."""

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
    "automl/trials": ("automl.fleet", "automl.report"),  # remeasure reads fronts via service
}  # fmt: skip


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth (lazy imports in functions included)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_one_way(layer: str) -> None:
    broken = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in sorted((ROOT / layer).rglob("*.py"))
        for module in sorted(imported_modules(path))
        if any(module == f or module.startswith(f"{f}.") for f in FORBIDDEN[layer])
    ]
    assert not broken, "\n".join(broken)


# Data tables of the pipeline that the target registry checks names against at load.
DATA_TABLES = ("automl.pipeline.methods", "automl.pipeline.backends")


@pytest.mark.parametrize("leaf", ["automl/targets", *DATA_TABLES])
def test_targets_and_the_tables_they_read_import_no_layer(leaf: str) -> None:
    path = ROOT / leaf.replace(".", "/")
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path.with_suffix(".py")]
    allowed = ("automl.errors",)  # the tables: data only
    if leaf == "automl/targets":
        allowed += ("automl.targets", "automl.settings", *DATA_TABLES)
    broken = [
        f"{file.relative_to(ROOT)} imports {module}"
        for file in files
        for module in sorted(imported_modules(file))
        if module.split(".")[0] in ("automl", "api") and not module.startswith(allowed)
    ]
    assert not broken, "\n".join(broken)


def test_the_api_imports_neither_torch_nor_the_study_loop() -> None:
    code = (
        "import sys, api; from api import create_app; from api.main import create_app; "
        "heavy = [m for m in ('torch', 'automl.fleet.study_loop', 'automl.trials.objective') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
