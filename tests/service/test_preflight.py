"""The one pre-flight: every check on every spec before any study exists."""

from __future__ import annotations

import optuna
import pytest

from automl.errors import SpecError
from automl.search.spec import parse_spec
from automl.service.create import create_study
from automl.service.preflight import preflight
from automl.settings import Settings
from automl.storage.factory import open_storage


def _store(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    return open_storage(url, Settings(storage=url, artifacts_dir=tmp_path / "art"))


def test_a_check_refusing_the_last_spec_leaves_no_study_behind(tmp_path):
    store = _store(tmp_path)
    specs = [parse_spec({"name": n, "search_space": "digits-mlp"}) for n in ("a", "b")]
    seen: list[str] = []

    def refuse_b(spec):
        seen.append(spec.name)
        if spec.name == "b":
            raise SpecError("b is refused")

    with pytest.raises(SpecError, match="b is refused"):
        preflight(
            specs, [lambda s: seen.append(s.name), refuse_b], lambda s: create_study(s, store)
        )
    assert seen == ["a", "b", "a", "b"]  # each check in turn, on every spec
    assert optuna.get_all_study_names(store) == []


def test_created_studies_come_back_in_spec_order(tmp_path):
    store = _store(tmp_path)
    specs = [parse_spec({"name": n, "search_space": "digits-mlp"}) for n in ("b", "a")]
    made = preflight(specs, [], lambda s: create_study(s, store).study_name)
    assert made == ["b", "a"]
    assert sorted(optuna.get_all_study_names(store)) == ["a", "b"]
