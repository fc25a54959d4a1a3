"""The statistics that bench.optimize decides by (run as the benchmark runs: from the root)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


def _ratio_interval(default: list[float], random: list[float]) -> list[float]:
    code = (
        "import json, sys; from bench.optimize import ratio_interval; "
        "print(json.dumps(ratio_interval(*json.loads(sys.argv[1]))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps([default, random])],
        cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_the_ratio_of_means_lies_inside_its_bootstrap_interval() -> None:
    default, random = [8.1, 9.8, 8.1, 9.7, 9.8], [4.4, 5.4, 8.5, 5.9, 9.7]
    ratio, low, high = _ratio_interval(default, random)
    assert ratio == pytest.approx(sum(default) / sum(random))
    assert 1.0 < low < ratio < high


def test_equal_samplers_give_a_ratio_of_one_and_no_spread() -> None:
    assert _ratio_interval([3.0, 3.0, 3.0], [3.0, 3.0, 3.0]) == [1.0, 1.0, 1.0]
