from __future__ import annotations

import numpy as np
import pytest

from automl.errors import SpecError
from automl.pipeline.latency import latency_stats
from automl.pipeline.latency_decision import (
    decide_all,
    decide_budget,
    fewest_runs,
    quantile_interval,
    sample_until_decided,
)
from automl.search.objectives import Constraint

# Recorded-like run times: 1,000 runs spread evenly over [0.5, 0.9] ms, and the same shifted.
FAST = np.linspace(0.5, 0.9, 1000)
SLOW = FAST + 1.0
# FAST in a fixed shuffled order, as a model's runs arrive.
ARRIVING = np.random.default_rng(0).permutation(FAST)


def test_the_interval_is_a_pair_of_order_statistics_at_binomial_ranks() -> None:
    values = np.arange(1, 101, dtype=np.float64)

    median = quantile_interval(values[::-1], 0.5)
    p90 = quantile_interval(values, 0.9)

    # n=100, q=0.5: ranks floor(50 - 9.8) = 40 and ceil(51 + 9.8) = 61.
    assert (median.value_ms, median.low_ms, median.high_ms, median.runs) == (50.5, 40.0, 61.0, 100)
    # q=0.9: half-width 1.96 * 3 = 5.88, ranks floor(84.12) = 84 and ceil(96.88) = 97.
    assert (p90.low_ms, p90.high_ms) == (84.0, 97.0)
    assert p90.value_ms == pytest.approx(90.1)


def test_the_median_interval_is_latency_stats_ci() -> None:
    values = np.random.default_rng(0).lognormal(size=333)

    stats, median = latency_stats(values, 1), quantile_interval(values, 0.5)

    assert (stats.ci_low_ms, stats.ci_high_ms) == (median.low_ms, median.high_ms)


def test_a_bound_whose_rank_is_out_of_range_does_not_exist() -> None:
    p99 = quantile_interval(FAST[:50], 0.99)

    assert p99.low_ms is not None and p99.high_ms is None
    assert fewest_runs(0.99) == 563
    assert quantile_interval(FAST[:562], 0.99).high_ms is None
    assert quantile_interval(FAST[:563], 0.99).high_ms is not None


@pytest.mark.parametrize(("samples", "quantile"), [([], 0.5), ([1.0], 0.0), ([1.0], 1.0)])
def test_an_interval_needs_samples_and_a_proper_quantile(samples, quantile) -> None:
    with pytest.raises(ValueError):
        quantile_interval(samples, quantile)


def test_runs_wholly_under_a_bound_meet_it() -> None:
    decision = decide_budget(FAST, 1, "latency_p99_ms", "<=", 1.0)

    assert decision.verdict == "meets"
    assert decision.low <= decision.value <= decision.high <= 1.0
    assert decision.runs == 1000
    assert decision.reason.startswith("p99 0.896 ms [") and "wholly <= 1" in decision.reason


def test_runs_wholly_over_a_bound_exceed_it_even_when_few() -> None:
    many = decide_budget(SLOW, 1, "latency_p99_ms", "<=", 1.0)
    few = decide_budget(SLOW[:50], 1, "latency_p99_ms", "<=", 1.0)

    assert (many.verdict, few.verdict) == ("exceeds", "exceeds")
    assert few.high is None and few.low > 1.0
    assert "wholly > 1 (? : too few runs, 50, to bound its other end)" in few.reason
    assert "?" not in many.reason


def test_an_interval_that_straddles_the_bound_is_within_noise() -> None:
    decision = decide_budget(FAST, 1, "latency_p99_ms", "<=", 0.896)

    assert decision.verdict == "within-noise"
    assert decision.low < 0.896 < decision.high
    assert decision.reason.endswith("straddles 0.896")


def test_too_few_runs_for_a_p99_are_within_noise_and_say_so() -> None:
    decision = decide_budget(FAST[:50], 1, "latency_p99_ms", "<=", 1.0)

    assert decision.verdict == "within-noise" and decision.high is None
    assert "too few runs" in decision.reason
    assert "needs at least 563 runs, got 50" in decision.reason


def test_per_sample_latency_and_throughput_are_of_the_median() -> None:
    per_sample = decide_budget(FAST, 8, "latency_per_sample_ms", "<=", 0.1)
    throughput = decide_budget(FAST, 8, "throughput_sps", ">=", 10_000)
    median = quantile_interval(FAST, 0.5)

    assert per_sample.verdict == "meets" and per_sample.value == pytest.approx(0.7 / 8)
    assert (per_sample.low, per_sample.high) == (median.low_ms / 8, median.high_ms / 8)
    assert throughput.verdict == "meets" and throughput.value == pytest.approx(8000 / 0.7)
    # The slowest runs bound the throughput from below.
    assert throughput.low == pytest.approx(8000 / median.high_ms)
    assert decide_budget(FAST, 8, "throughput_sps", ">=", 20_000).verdict == "exceeds"


def test_a_p95_budget_is_decided_on_the_95th_percentile_of_the_runs() -> None:
    decision = decide_budget(FAST, 8, "latency_p95_ms", "<=", 100.0)

    p95 = quantile_interval(FAST, 0.95)
    assert (decision.value, decision.low, decision.high) == (p95.value_ms, p95.low_ms, p95.high_ms)
    assert decision.verdict == "meets" and decision.reason.startswith("p95 ")


def test_only_latency_budgets_are_decided() -> None:
    with pytest.raises(SpecError, match="cannot decide"):
        decide_budget(FAST, 1, "accuracy", ">=", 0.9)


def test_constraints_are_decided_in_order() -> None:
    budgets = [
        Constraint.model_validate(c) for c in ("latency_p99_ms <= 1", "latency_p50_ms <= 0.6")
    ]

    decisions = decide_all(FAST, 1, budgets)

    assert [(d.metric, d.verdict) for d in decisions] == [
        ("latency_p99_ms", "meets"),
        ("latency_p50_ms", "exceeds"),
    ]


def _runs(times_ms):
    queue = iter(times_ms)
    return lambda: next(queue)


def test_runs_go_on_until_a_p99_budget_is_decided() -> None:
    budget = Constraint.model_validate("latency_p99_ms <= 1")
    times = np.tile(ARRIVING, 3)

    samples, stop = sample_until_decided(
        _runs(times), 1, [budget], min_runs=200, rel_ci=1.0, max_seconds=60
    )

    assert stop == "decided"
    # Looks at 200, 300, 450, 675 runs: 675 is the first past the 563 a p99 needs.
    assert len(samples) == 675
    assert decide_budget(samples, 1, budget.metric, budget.op, budget.bound).verdict == "meets"


def test_runs_stop_at_the_cap_while_the_budget_is_within_noise() -> None:
    budget = Constraint.model_validate("latency_p50_ms <= 0.7")
    times = np.tile([0.6, 0.8], 3000)  # every interval of the median spans 0.6 to 0.8

    samples, stop = sample_until_decided(
        _runs(times), 1, [budget], min_runs=100, rel_ci=1.0, max_runs=4000
    )

    assert (stop, len(samples)) == ("cap", 4000)


def test_without_budgets_the_runs_stop_once_the_median_is_tight() -> None:
    samples, stop = sample_until_decided(
        _runs(np.tile(ARRIVING, 5)), 1, [], min_runs=200, rel_ci=0.05
    )

    assert (stop, len(samples)) == ("decided", 200)
