"""The load harness: open-loop arrivals, Triton's batcher rules, drops, and the max-rate search.

The model is a stand-in with a known service time (it sleeps), so what the harness does can be
told from what the model costs. Bounds are one-sided where the machine's noise could only push
a figure up.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from automl.errors import SpecError
from automl.pipeline.serving import (
    Batching,
    arrival_schedule,
    harness_floor,
    max_rate,
    measure_load,
    measure_serving,
)
from automl.search.spec import Serving
from automl.targets import load_target

ROWS = np.zeros((16, 4), np.float32)


def sleeper(per_batch_ms: float, first_ms: float | None = None):
    """A model that takes ``per_batch_ms`` a batch (``first_ms`` for its first batch)."""
    calls = []

    def run(batch: np.ndarray) -> None:
        time.sleep((first_ms if first_ms is not None and not calls else per_batch_ms) / 1e3)
        calls.append(len(batch))

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_the_schedule_is_poisson_at_the_rate_and_seeded() -> None:
    times = arrival_schedule(2000, 2.0, seed=3)
    assert abs(len(times) - 4000) < 4 * np.sqrt(4000)
    gaps = np.diff(times)
    assert abs(gaps.mean() - 1 / 2000) < 0.1 / 2000 and abs(gaps.std() / gaps.mean() - 1) < 0.1
    assert np.array_equal(times, arrival_schedule(2000, 2.0, seed=3))
    with pytest.raises(SpecError, match="above 0"):
        arrival_schedule(0, 1.0)


def test_arrivals_go_on_while_the_batcher_is_stalled_and_count_the_stall() -> None:
    stalled = sleeper(0.2, first_ms=300)  # the first batch holds the only instance for 0.3 s
    run = measure_load([stalled], ROWS, Batching(max_batch=64), 400, duration_s=1.0, seed=1)

    # Every request of the schedule arrived and was served: none waited for a response to be sent.
    assert run.requests == len(arrival_schedule(400, 1.0, seed=1)) == run.completed
    # Those that arrived during the stall waited for it: their latency counts from arrival.
    assert run.latency_ms["p99"] >= 200
    assert sum(stalled.calls) == run.requests


def test_a_batch_forms_when_full_before_its_queue_delay() -> None:
    run = measure_load(
        [sleeper(1.0)], ROWS, Batching(max_batch=8, max_queue_delay_ms=200), 4000, duration_s=0.5
    )

    assert max(run.batch_sizes) == 8 and run.kept_up
    full = run.batch_sizes[8] * 8
    assert full >= 0.8 * run.completed  # nearly every request rode in a full batch
    assert run.latency_ms["p50"] < 200  # none waited out the delay: the batches filled first


def test_the_queue_delay_flushes_a_batch_that_does_not_fill() -> None:
    run = measure_load(
        [sleeper(1.0)], ROWS, Batching(max_batch=32, max_queue_delay_ms=20), 50, duration_s=1.0
    )

    assert max(run.batch_sizes) < 32 and run.kept_up  # at 50/s, 32 never wait together
    # The oldest request of every batch waited the whole delay before its batch formed.
    assert run.latency_ms["p50"] >= 20 * 0.5 and run.latency_ms["p99"] >= 20


def test_instances_serve_at_once() -> None:
    slow = Batching(max_batch=1, instances=2)
    run = measure_load([sleeper(8.0), sleeper(8.0)], ROWS, slow, 150, duration_s=1.0)

    assert run.kept_up  # one instance serves 125/s at 8 ms a request; two keep up with 150/s


def test_a_run_that_cannot_keep_up_is_recorded_with_its_drops() -> None:
    run = measure_load(
        [sleeper(10.0)], ROWS, Batching(max_batch=1), 400, duration_s=0.5, deadline_s=0.6
    )

    assert not run.kept_up and run.dropped > 0 and run.completed + run.dropped == run.requests
    assert run.achieved_rps < 150  # about 100/s: what one 10 ms instance serves, not the offer


def test_the_harness_floor_is_measured_with_a_model_that_does_nothing() -> None:
    floor = harness_floor(ROWS, Batching(max_batch=4, max_queue_delay_ms=1), 1000, duration_s=0.5)

    assert floor.kept_up and floor.completed == floor.requests
    assert floor.latency_ms["p50"] >= 0


def test_the_max_rate_search_brackets_what_the_model_can_serve() -> None:
    batching = Batching(max_batch=1)

    def measure(rate: float):
        return measure_load([sleeper(4.0)], ROWS, batching, rate, duration_s=0.6)

    found, runs = max_rate(measure, slo_p99_ms=60, start_rps=25, probes=7)
    assert 25 <= found < 260  # one 4 ms instance serves at most 250/s
    assert [r.offered_rps for r in runs][:3] == [25, 50, 100]  # doubling while it holds
    assert any(not r.p99_within(60) for r in runs)  # and a rate that broke it bounds the search


def test_a_first_run_that_must_hold_and_breaks_ends_the_search() -> None:
    batching = Batching(max_batch=1)

    def measure(rate: float):
        return measure_load([sleeper(4.0)], ROWS, batching, rate, duration_s=0.3)

    found, runs = max_rate(measure, slo_p99_ms=60, start_rps=1000, probes=5, first_must_hold=True)
    assert found == 0 and len(runs) == 1  # 1000/s against at most 250/s: it cannot matter
    found, runs = max_rate(measure, slo_p99_ms=60, start_rps=25, probes=3, first_must_hold=True)
    assert found == 100 and [r.offered_rps for r in runs] == [25, 50, 100]  # held: searched on


def test_a_model_that_breaks_the_slo_at_the_rate_to_beat_is_served_once(tmp_path) -> None:
    """:func:`measure_serving` on a real graph: a rate to beat far above what it serves ends the
    search after one run, recorded with no max rate; one it can serve starts the search."""
    from tiny_graphs import tiny_matmul

    tiny_matmul(tmp_path / "tiny.onnx")
    scenario = Serving(slo_p99_ms=20, duration_s=0.2)

    def serve(rate_to_beat: float, probes: int = 6) -> dict:
        return measure_serving(
            tmp_path / "tiny.onnx", load_target("cpu"), ROWS, Batching(max_batch=4), scenario,
            method="fp32", start_rps=10, rate_to_beat=rate_to_beat, probes=probes,
        )  # fmt: skip

    beaten = serve(5e6)  # a million requests in 0.2 s: no harness here keeps up
    assert beaten["metrics"] == {} and beaten["record"]["held_rate_to_beat"] is False
    assert [r["offered_rps"] for r in beaten["record"]["runs"]] == [5e6]
    assert beaten["record"]["beat_rate_to_beat"] is False
    held = serve(20)
    assert held["record"]["held_rate_to_beat"] is True and held["metrics"]["max_rate_rps"] > 20
    assert held["record"]["runs"][0]["offered_rps"] == 20 and len(held["record"]["runs"]) > 1
    assert held["record"]["beat_rate_to_beat"] is True
    tied = serve(20, probes=1)  # held 20/s, and tried no higher rate: a tie adds nothing
    assert tied["record"]["held_rate_to_beat"] is True and tied["metrics"] == {}
    assert tied["record"]["beat_rate_to_beat"] is False


def test_bad_settings_are_refused() -> None:
    with pytest.raises(SpecError, match="max_batch >= 1"):
        Batching(max_batch=0)
    with pytest.raises(SpecError, match="2 instances configured, 1 given"):
        measure_load([sleeper(1.0)], ROWS, Batching(instances=2), 10, duration_s=0.1)
