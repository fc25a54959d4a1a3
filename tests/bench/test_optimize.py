"""The statistics that bench.optimize decides by (run as the benchmark runs: from the root)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from zygote import Zygote

ROOT = Path(__file__).parents[2]


def _ratio_interval(
    zygote: Zygote, default: list[float], random: list[float], groups: list[int] | None = None
) -> list[float]:
    """``bench._common.ratio_interval`` in a process forked from ``zygote``, from the root."""
    code = (
        "import json, sys; from bench._common import ratio_interval; "
        "print(json.dumps(ratio_interval(*json.loads(sys.argv[1]))))"
    )
    args = ["-c", code, json.dumps([default, random, groups])]
    out = zygote.python(args, cwd=ROOT, env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_ratio_of_means_lies_inside_its_bootstrap_interval(zygote) -> None:
    default, random = [8.1, 9.8, 8.1, 9.7, 9.8], [4.4, 5.4, 8.5, 5.9, 9.7]
    ratio, low, high = _ratio_interval(zygote, default, random)
    assert ratio == pytest.approx(sum(default) / sum(random))
    assert 1.0 < low < ratio < high


def test_equal_samplers_give_a_ratio_of_one_and_no_spread(zygote) -> None:
    assert _ratio_interval(zygote, [3.0, 3.0, 3.0], [3.0, 3.0, 3.0]) == [1.0, 1.0, 1.0]


def test_pairs_are_resampled_within_their_pretrained_model(zygote) -> None:
    # Two models, each with identical pairs: all the spread is between models, which keep
    # their share of the mean, so the grouped interval has none; ungrouped, it has.
    default, random = [4.0, 4.0, 4.0, 9.0, 9.0, 9.0], [4.0, 4.0, 4.0, 6.0, 6.0, 6.0]
    ratio, low, high = _ratio_interval(zygote, default, random, [0, 0, 0, 1, 1, 1])
    assert ratio == low == high == pytest.approx(1.3)
    ungrouped = _ratio_interval(zygote, default, random)
    assert ungrouped[0] == pytest.approx(1.3) and ungrouped[1] < 1.3 < ungrouped[2]
