"""The checks before a study's first trial: here, the serving harness's floor against the SLO."""

from __future__ import annotations

import re

import pytest

from automl.errors import SpecError
from automl.fleet.preflight import check_harness, suggested_slo_ms
from automl.pipeline.serving_floor import MAX_FLOOR_SHARE
from automl.search.spec import parse_spec


def test_a_harness_too_slow_for_the_slo_is_refused_with_the_option_that_raises_it():
    """The floor is measured for real: a 0.1 µs SLO puts any host's over a tenth of it."""
    spec = parse_spec(
        {"search_space": "digits-serving",
         "serving": {"rate_rps": 200, "slo_p99_ms": 0.0001, "duration_s": 0.1}}
    )  # fmt: skip
    with pytest.raises(SpecError) as refused:
        check_harness(spec)
    said = str(refused.value)
    floor_ms = float(re.search(r"the load harness alone takes p99 (\S+) ms", said)[1])
    raised = re.search(
        r"Raise it with --slo-p99-ms (\S+) \(or slo_p99_ms in the spec's serving:\)", said
    )
    assert raised is not None, said
    assert float(raised[1]) >= floor_ms / MAX_FLOOR_SHARE * 0.99  # the floor is shown to 3 digits


@pytest.mark.parametrize(
    ("floor_ms", "slo_ms"), [(4.92, 100.0), (0.3, 5.0), (0.0123, 0.2), (1.7, 50.0), (40.0, 1000.0)]
)
def test_the_suggested_slo_is_a_round_number_with_room_for_the_floor(floor_ms, slo_ms):
    assert suggested_slo_ms(floor_ms) == pytest.approx(slo_ms)
    assert floor_ms / suggested_slo_ms(floor_ms) < MAX_FLOOR_SHARE
