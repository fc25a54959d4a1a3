from __future__ import annotations

import pytest

from automl.errors import SpecError
from automl.settings import get_settings


@pytest.fixture
def fresh_settings():
    get_settings.cache_clear()
    yield get_settings
    get_settings.cache_clear()


def test_a_bad_variable_is_named(fresh_settings, monkeypatch):
    monkeypatch.setenv("AUTOML_GRACE_PERIOD_S", "abc")
    with pytest.raises(SpecError, match="AUTOML_GRACE_PERIOD_S: Input should be a valid integer"):
        fresh_settings()


def test_the_grace_period_must_outlast_a_heartbeat_interval(fresh_settings, monkeypatch):
    monkeypatch.setenv("AUTOML_HEARTBEAT_INTERVAL_S", "30")
    monkeypatch.setenv("AUTOML_GRACE_PERIOD_S", "3")
    with pytest.raises(SpecError, match=r"AUTOML_GRACE_PERIOD_S \(3\) must be at least twice"):
        fresh_settings()
    monkeypatch.setenv("AUTOML_GRACE_PERIOD_S", "60")
    assert fresh_settings().grace_period_s == 60


def test_a_list_variable_that_is_not_json_is_named(fresh_settings, monkeypatch):
    monkeypatch.setenv("AUTOML_API_TOKENS", "abc")
    with pytest.raises(SpecError, match=r"api_tokens.*lists are JSON"):
        fresh_settings()


def test_knob_bounds_from_the_environment_change_only_the_knobs_they_name(monkeypatch):
    from automl.settings import KNOB_BOUNDS, Settings

    monkeypatch.setenv("AUTOML_KNOB_BOUNDS", '{"train.lr": [0, 1e31]}')
    bounds = Settings().knob_bounds
    assert bounds["train.lr"] == (0, 1e31)
    assert bounds["arch.kernel_size"] == KNOB_BOUNDS["arch.kernel_size"]  # still bounded
