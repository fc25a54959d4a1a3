"""What every runtime of the catalog must do: a pytest suite, shipped as classes.

A test module subclasses :class:`StartingRuntime` for the runtimes that can start on the host
and :class:`AbsentRuntime` for those that cannot, and gives them three fixtures: ``runtime`` (a
:class:`automl.catalog.Backend`), ``graphs`` (a method's name → a digits graph of it) and
``data`` (the digits :class:`automl.inputs.data.Dataset`). ``tests/catalog/
test_runtime_contract.py`` parametrizes them over :data:`automl.catalog.BACKENDS`, so a
runtime is checked the moment it is defined: a session opens and runs, a timing converges and
records where it ran, placement is read, accuracy on each method's graph stays within the
method's stated drop; and one that cannot start here is refused clearly, never replaced.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np
import pytest

from automl.catalog import Backend, get_method
from automl.errors import TargetUnavailable
from automl.pipeline.latency import measure_latency
from automl.targets import list_targets, load_target

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from automl.inputs.data import Dataset
    from automl.targets import Target

_BATCH = 8


def target_of(runtime: Backend) -> Target:
    """A target that measures every method of ``runtime`` on it alone: a shipped target that
    offers it, or the cpu target's record with it as its only runtime."""
    for target in list_targets():
        if runtime.name in target.backends:
            return target.on_runtime(runtime.name)
    return dataclasses.replace(
        load_target("cpu"), backends=(runtime.name,), methods=runtime.methods
    )


def accuracy(runtime: Backend, path: Path, method: str, data: Dataset) -> float:
    """Test accuracy of the graph at ``path`` run on ``runtime`` at the contract's batch."""
    session = runtime.open_session(path, method, threads=1, batch_size=_BATCH)
    name = session.get_inputs()[0].name
    logits = session.run(None, {name: data.x_test})[0]
    return float(np.mean(np.argmax(logits, axis=1) == data.y_test))


class StartingRuntime:
    """The promises of a runtime that can start here."""

    def test_it_says_it_can_start(self, runtime: Backend) -> None:
        assert runtime.unavailable() is None

    def test_a_session_opens_and_runs_a_short_batch(
        self, runtime: Backend, graphs: Callable[[str], Path], data: Dataset
    ) -> None:
        for method in runtime.methods:
            session = runtime.open_session(graphs(method), method, threads=1, batch_size=_BATCH)
            name = session.get_inputs()[0].name
            (logits,) = session.run(None, {name: data.x_test[:3]})
            assert logits.shape == (3, 10), method

    def test_a_timing_converges_and_records_where_it_ran(
        self, runtime: Backend, graphs: Callable[[str], Path], data: Dataset
    ) -> None:
        method = runtime.methods[0]
        latency = measure_latency(
            graphs(method), target_of(runtime), data.x_test, _BATCH, method=method,
            min_runs=20, max_seconds=2.0, rel_ci=0.2,
        )  # fmt: skip
        assert latency.p50_ms > 0 and latency.runs >= 20
        assert latency.backend == runtime.name and latency.source == runtime.package
        assert latency.provider == runtime.provider
        assert sum(latency.env["placement"].values()) > 0

    def test_placement_counts_the_compute_it_ran(
        self, runtime: Backend, graphs: Callable[[str], Path]
    ) -> None:
        for method in runtime.methods:
            session = runtime.open_session(graphs(method), method, threads=1, batch_size=_BATCH)
            placement = runtime.placement(session)
            assert placement and all(n > 0 for n in placement.values()), method

    def test_accuracy_stays_within_each_method_s_drop(
        self, runtime: Backend, graphs: Callable[[str], Path], data: Dataset
    ) -> None:
        reference = accuracy(runtime, graphs("fp32"), "fp32", data)
        for method in runtime.methods:
            drop = reference - accuracy(runtime, graphs(method), method, data)
            assert drop <= get_method(method).accuracy_drop, f"{method}: {drop:.4f}"


class AbsentRuntime:
    """The promises of a runtime that cannot start here: a clear refusal, never another."""

    def test_it_says_why_and_how_to_install_it(self, runtime: Backend) -> None:
        reason = runtime.unavailable()
        assert reason and runtime.install in reason

    def test_a_measurement_on_it_is_refused_not_moved(
        self, runtime: Backend, graphs: Callable[[str], Path], data: Dataset
    ) -> None:
        method = next(m for m in runtime.methods if get_method(m).graph in ("fp32", "fp16"))
        with pytest.raises(TargetUnavailable):
            measure_latency(graphs(method), target_of(runtime), data.x_test, 1, method=method)
