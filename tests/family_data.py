"""Small datasets of every input kind, written as ``.npz`` and loaded as a user's would be.

A plugin: use it with ``pytest_plugins = ["family_data"]``; ``family_cases.FAMILY_CASES``
pairs each family with the data it takes.
"""

from __future__ import annotations

import numpy as np
import pytest

from automl.inputs import synthetic
from automl.inputs.data import Dataset, load_dataset


@pytest.fixture(scope="session")
def family_data(tmp_path_factory) -> dict[str, Dataset]:
    """``features`` (N, 64), ``signals`` (N, 1, 64), ``images`` (N, 3, 32, 32) and ``tokens``
    (N, 16), loaded."""
    folder = tmp_path_factory.mktemp("family-data")
    arrays = {
        "features": {
            k: v.reshape(len(v), -1) if k.startswith("x_") else v
            for k, v in synthetic.signals(n_train=200, n_test=64).items()
        },
        "signals": synthetic.signals(n_train=200, n_test=64),
        "images": synthetic.images(n_train=120, n_test=48),
        "tokens": synthetic.tokens(n_train=600, n_test=64),
    }
    loaded = {}
    for name, values in arrays.items():
        np.savez(folder / f"{name}.npz", **values)
        loaded[name] = load_dataset(str(folder / f"{name}.npz"))
    return loaded
