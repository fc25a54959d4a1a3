"""Picking a trial of the front for a budget: the best that meets it, ties to the front."""

from __future__ import annotations

from automl.fleet.decide import pick_among
from automl.pipeline.latency_decision import BudgetDecision


def _meets(number: int) -> BudgetDecision:
    return BudgetDecision(
        "latency_p99_ms", "<=", 10.0, "meets", 0.2, 0.19, 0.21, 500, f"trial {number} meets"
    )


def test_of_equally_accurate_trials_the_front_s_is_picked_over_the_baseline_beside_it():
    front = [
        {"number": 0, "metrics": {"accuracy": 0.936}, "on_front": False},  # the baseline
        {"number": 1, "metrics": {"accuracy": 0.936}, "on_front": True},
        {"number": 2, "metrics": {"accuracy": 0.930}, "on_front": True},
    ]
    pick = pick_among(front, "accuracy", {n: _meets(n) for n in (0, 1, 2)})
    assert pick.number == 1
