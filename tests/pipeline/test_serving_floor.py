"""The harness's floor on the host: one measurement for a study's start check and its trials, and
a trial's load runs measured again, then marked, when the floor after them is over the limit.

The floor is measured for real; the limit is crossed by the study's own SLO (a tiny one puts any
host's floor over a tenth of it, a minute-long one keeps every host's under).
"""

from __future__ import annotations

import numpy as np
import pytest
from tiny_graphs import tiny_matmul

from automl.candidate import Batching
from automl.pipeline.serving import measure_serving
from automl.pipeline.serving_floor import MAX_FLOOR_SHARE, busy_host, host_floor, measured_clean
from automl.search.spec import Serving
from automl.targets import load_target

ROWS = np.zeros((16, 4), np.float32)
TINY_SLO_MS = 0.0001  # 0.1 µs: no harness serves a request that fast
LOOSE_SLO_MS = 60_000.0  # a minute: no host is that busy


@pytest.fixture
def tiny_onnx(tmp_path):
    return tiny_matmul(tmp_path / "tiny.onnx")


def test_the_floor_is_measured_at_the_scenarios_rate_and_stops_at_a_run_within_the_limit():
    at_rate = host_floor(Serving(rate_rps=200, slo_p99_ms=LOOSE_SLO_MS, duration_s=0.1))
    assert at_rate.rate_rps == 200 and not at_rate.too_high and 0 < at_rate.share < 1e-3
    searched = host_floor(Serving(rate_rps="max", slo_p99_ms=TINY_SLO_MS, duration_s=0.05))
    assert searched.rate_rps == 1000 and searched.too_high and searched.share > 100


@pytest.mark.parametrize("slo_ms", [TINY_SLO_MS, LOOSE_SLO_MS])
def test_load_runs_under_a_floor_over_the_limit_are_measured_again_and_marked(tiny_onnx, slo_ms):
    scenario = Serving(rate_rps=200, slo_p99_ms=slo_ms, duration_s=0.1)
    calls = []

    def measure() -> dict:
        calls.append(1)
        return measure_serving(
            tiny_onnx, load_target("cpu"), ROWS, Batching(max_batch=4), scenario,
            method="fp32", start_rps=10,
        )  # fmt: skip

    served = measured_clean(measure, scenario)
    record = served["record"]
    assert record["floor_rps"] == 200 and record["runs"][0]["offered_rps"] == 200
    if slo_ms == TINY_SLO_MS:  # measured twice, under the floor both times: not clean
        assert len(calls) == 2 and record["floor_share_before_remeasure"] > MAX_FLOOR_SHARE
        reason = busy_host(record)
        assert reason is not None and "\n" not in reason
        assert f"{record['floor_share_of_slo']:.2f} of the SLO (limit 0.10)" in reason
        assert "the host was too busy to measure this deployment; rerun on a quieter host" in reason
    else:  # measured once, as before, and clean
        assert len(calls) == 1 and "floor_share_before_remeasure" not in record
        assert record["floor_share_of_slo"] <= MAX_FLOOR_SHARE and busy_host(record) is None
        assert served["metrics"]["serving_p99_ms"] == record["runs"][0]["p99_bound_ms"]


def test_a_record_without_load_runs_has_no_floor_to_judge() -> None:
    assert busy_host({"screened": "by its isolated latency", "rate_bound_rps": 10.0}) is None
