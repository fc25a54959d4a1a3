"""A method defined outside the catalog's folder is picked up by the contract suite as it is."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# A real recipe the catalog lacks: signed int8 activations and weights, symmetric, per channel.
THROWAWAY = '''
from automl.catalog import Method
from automl.catalog.methods._tools import to_qdq


class Int8Symmetric(Method):
    """QDQ S8S8, symmetric activations: a method defined by a test."""

    name, bits, needs_calibration = "int8-symmetric", 8, True
    cache_tag, backends = "qdq-s8s8-symmetric", ("ort-cpu",)

    def convert(self, src, dst, calibration):
        to_qdq(src, dst, calibration, activations="QInt8", extra={"ActivationSymmetric": True})
'''


def test_a_method_defined_by_a_plugin_is_tested_by_the_contract_suite(tmp_path: Path) -> None:
    (tmp_path / "throwaway_method.py").write_text(THROWAWAY)
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
