from __future__ import annotations

from pathlib import Path

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


def test_the_artifacts_folder_is_the_flag_then_the_environment_then_beside_the_storage(
    monkeypatch, tmp_path
):
    from automl.settings import Settings

    monkeypatch.delenv("AUTOML_ARTIFACTS_DIR", raising=False)
    monkeypatch.delenv("AUTOML_STORAGE", raising=False)
    unset = Settings(_env_file=None)
    assert unset.artifacts_dir == Path("studies/artifacts")  # beside studies/automl.db
    url = f"sqlite:///{tmp_path}/elsewhere/study.db"
    assert unset.for_command(url).artifacts_dir == tmp_path / "elsewhere" / "artifacts"
    assert (
        Settings(_env_file=None, storage=url).artifacts_dir == tmp_path / "elsewhere" / "artifacts"
    )
    assert unset.for_command("sqlite:///my.db").artifacts_dir == Path("artifacts")
    for server in ("postgresql://automl@db/automl", "sqlite://", "not a url"):
        assert unset.for_command(server).artifacts_dir == Path("studies/artifacts")
    flag = tmp_path / "flag"
    assert unset.for_command(url, flag).artifacts_dir == flag
    monkeypatch.setenv("AUTOML_ARTIFACTS_DIR", str(tmp_path / "env"))
    from_env = Settings(_env_file=None)
    assert from_env.for_command(url).artifacts_dir == tmp_path / "env"
    assert from_env.for_command(url, flag).artifacts_dir == flag
