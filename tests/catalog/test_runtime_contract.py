"""Every runtime of the catalog, held to the shipped contract suite
(:mod:`automl.testing.runtime_contract`); the cases come from the registry, so a runtime
defined anywhere the catalog (or a pytest plugin) loads is checked the moment it exists."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from automl.catalog import BACKENDS, CPU
from automl.pipeline.quantize import quantize_method
from automl.targets.presence import provider_starts
from automl.testing.runtime_contract import AbsentRuntime, StartingRuntime

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from automl.catalog import Backend
    from automl.inputs.data import Dataset


def _starts(name: str) -> bool:
    """Whether the runtime starts here: a GPU build of ONNX Runtime lists its providers even
    where no driver lets them load, so those are probed."""
    runtime = BACKENDS[name]
    gpu = [p for p in runtime.providers if runtime.device == "cuda" and p != CPU]
    return runtime.unavailable() is None and all(map(provider_starts, gpu))


STARTING = [name for name in BACKENDS if _starts(name)]
ABSENT = [name for name in BACKENDS if name not in STARTING]


@pytest.fixture(scope="module")
def graphs(digits: Dataset, exported_models, tmp_path_factory) -> Callable[[str], Path]:
    """A method's name → the digits MLP quantized by it, made once, on first use."""
    folder, made = tmp_path_factory.mktemp("runtime-contract"), {}

    def get(method: str) -> Path:
        if method not in made:
            out = folder / f"{method}.onnx"
            quantize_method(exported_models["mlp"], out, method, calibration=digits.x_calib)
            made[method] = out
        return made[method]

    return get


@pytest.fixture
def data(digits: Dataset) -> Dataset:
    return digits


@pytest.mark.parametrize("name", STARTING)
class TestRuntimesThatStart(StartingRuntime):
    @pytest.fixture
    def runtime(self, name: str) -> Backend:
        return BACKENDS[name]


@pytest.mark.parametrize("name", ABSENT)
class TestRuntimesThatCannotStart(AbsentRuntime):
    @pytest.fixture
    def runtime(self, name: str) -> Backend:
        return BACKENDS[name]
