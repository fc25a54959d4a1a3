"""Shared fixtures: the real digits dataset, loaded once."""

from __future__ import annotations

import pytest

from automl.data import Dataset, load_dataset


@pytest.fixture(scope="session")
def digits() -> Dataset:
    return load_dataset("digits", seed=0)
