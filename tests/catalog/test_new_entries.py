"""A method defined outside the catalog's folder is picked up by the contract suite as it is:
the one that docs/architecture.md shows how to add."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented_method() -> str:
    """The method that docs/architecture.md shows how to add, as its code block gives it."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    return re.search(r"```python\n(from automl\.catalog import Method\n.*?)```", page, re.S)[1]


def test_a_method_defined_by_a_plugin_is_tested_by_the_contract_suite(tmp_path: Path) -> None:
    (tmp_path / "throwaway_method.py").write_text(documented_method())
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "tests")])}
    suite = "tests/catalog/test_method_contract.py"
    command = [sys.executable, "-m", "pytest", suite, "-p", "throwaway_method", "-q"]
    out = subprocess.run(
        [*command, "-k", "int8-symmetric", "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip

    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # 2 models × accuracy, 1 runnable backend (the CPU), 2 backends that lack it.
    assert re.search(r"\b5 passed\b", out.stdout), out.stdout[-2000:]
