"""What bench.search says about a sampler against random search: a ratio with its spread."""

from __future__ import annotations

from bench.search import ratio_to_random


def test_the_ratio_to_random_comes_with_its_interval_and_per_seed_range() -> None:
    curves = {
        "default": [[1.0, 2.0], [1.0, 3.0], [2.0, 2.0]],  # final hypervolumes 2, 3, 2
        "random": [[1.0, 2.0], [1.0, 2.0], [1.0, 1.0]],  # 2, 2, 1
    }

    said = ratio_to_random(curves, "default")

    assert said.startswith("ratio to random 1.400, 95 % interval ")  # 7/3 over 5/3
    low, high = (float(x) for x in said.split("interval ")[1].split(",")[0].split("-"))
    assert 1.0 <= low <= 1.4 <= high <= 2.0
    assert said.endswith("per seed 1.000-2.000")
    assert ratio_to_random(curves, "random").endswith("1.000-1.000, per seed 1.000-1.000")
