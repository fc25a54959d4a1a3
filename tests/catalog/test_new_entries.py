"""A method or a family defined outside the catalog's folders is picked up by its contract
suite as it is: the ones that docs/architecture.md shows how to add."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented(kind: str) -> str:
    """The ``Method``, ``Family`` or runtime (``OrtBackend``) that docs/architecture.md shows how
    to add, as given there."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    pattern = rf"```python\n(from automl\.catalog[\w.]* import {kind}\n.*?)```"
    return re.search(pattern, page, re.S)[1]


def run_contract(tmp_path: Path, plugin: str, suite: str, name: str) -> str:
    """Run ``suite`` with ``plugin`` loaded, on the cases of ``name``; its output."""
    (tmp_path / "throwaway_entry.py").write_text(plugin)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "tests")])}
    command = [sys.executable, "-m", "pytest", suite, "-p", "throwaway_entry", "-q"]
    command += ["-p", "no:schemathesis", "-p", "no:hypothesispytest"]  # unused: 3 s of imports
    out = subprocess.run(
        [*command, "-k", name, "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_a_method_defined_by_a_plugin_is_tested_by_the_contract_suite(tmp_path: Path) -> None:
    printed = run_contract(
        tmp_path, documented("Method"), "tests/catalog/test_method_contract.py", "int8-symmetric"
    )
    # 2 models × accuracy, 2 runtimes that run QDQ int8 (ONNX Runtime's CPU and OpenVINO),
    # 2 runtimes that lack it.
    assert re.search(r"\b6 passed\b", printed), printed[-2000:]


def test_a_family_defined_by_a_plugin_is_tested_by_the_contract_suite(tmp_path: Path) -> None:
    printed = run_contract(
        tmp_path, documented("Family"), "tests/catalog/test_family_contract.py", "tapered-mlp"
    )
    # built, trained, pruned, exported and quantized; refused on token ids.
    assert re.search(r"\b2 passed\b", printed), printed[-2000:]


def test_a_runtime_defined_by_a_plugin_is_tested_by_the_contract_suite(tmp_path: Path) -> None:
    printed = run_contract(
        tmp_path, documented("OrtBackend"), "tests/catalog/test_runtime_contract.py", "xnnpack"
    )
    # The PyPI build of ONNX Runtime has no XNNPACK: its refusal, and a measurement refused.
    assert re.search(r"\b2 passed\b", printed), printed[-2000:]
