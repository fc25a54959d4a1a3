"""A submission whose space cannot take its data is refused with 422, and no study is made."""

from __future__ import annotations

import httpx
import numpy as np
import optuna

from api import create_app
from automl.inputs import synthetic
from automl.storage.factory import open_storage

pytest_plugins = ["api_fixtures"]


def test_the_api_answers_422_and_creates_no_study(api_storage_url, api_settings, run_api):
    settings = api_settings(api_storage_url)
    np.savez(settings.data_root / "tokens.npz", **synthetic.tokens(n_train=60, n_test=20))
    storage = open_storage(api_storage_url, settings)
    before = len(optuna.get_all_study_summaries(storage))
    body = {"search_space": "signals-cnn", "dataset": "tokens.npz", "n_trials": 2}
    with run_api(create_app(settings, storage=storage)) as url:
        headers = {"Authorization": f"Bearer {settings.api_tokens[0].get_secret_value()}"}
        response = httpx.post(f"{url}/v1/studies", json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_spec"
    assert "family 'cnn' needs (C, L) or (C, H, W) float inputs" in response.json()["message"]
    assert len(optuna.get_all_study_summaries(storage)) == before
