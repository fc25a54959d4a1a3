"""A candidate's label: the model as built, and the method as deployed."""

from __future__ import annotations

from automl.candidate import Built, describe


def _values(width: int, ratio: float, method: str = "int8-static") -> dict:
    arch = {"family": "mlp", "width": width, "depth": 1}
    return {"arch": arch, "pruning_ratio": ratio, "method": method, "batch_size": 32}


def test_two_params_that_build_one_network_read_alike() -> None:
    # Channels are kept in multiples of 8: w8 at 0.2 keeps its 8, w16 at 0.2 keeps 8 of 16.
    kept = describe(_values(8, 0.2), Built("int8-static", (8,), pruned=False))
    halved = describe(_values(16, 0.2), Built("int8-static", (8,), pruned=True))
    assert kept == "mlp w8 d1 prune 0.2 removed nothing int8-static batch 32"
    assert halved == "mlp w8 d1 (w16 prune 0.2) int8-static batch 32"
    assert describe(_values(16, 0.0), Built("int8-static", (16,), pruned=False)) == (
        "mlp w16 d1 int8-static batch 32"
    )


def test_a_record_without_what_was_built_reads_as_it_always_did() -> None:
    assert describe(_values(16, 0.0)) == "mlp w16 d1 prune 0.0 int8-static batch 32"


def test_many_widths_read_as_their_range_and_a_method_as_what_it_did() -> None:
    built = Built("fp32", (16, 24, 32, 64, 64), pruned=True)
    label = describe(_values(32, 0.5, "int8-mixed"), built)
    assert label == "mlp w16-64 d1 (w32 prune 0.5) fp32 (all layers kept) batch 32"
    unpruned_cnn = {**_values(16, 0.0), "arch": {"family": "cnn", "width": 16, "depth": 2}}
    assert describe(unpruned_cnn, Built("int8-static", (16, 16, 32, 32))).startswith(
        "cnn w16/32 d2"
    )


def test_a_row_names_the_runtime_it_was_searched_on() -> None:
    values = {**_values(16, 0.0), "runtime": "openvino"}
    assert describe(values).endswith("int8-static batch 32 on openvino")
    assert "on " not in describe(_values(16, 0.0))  # the target's own runtime goes unsaid


def test_an_unknown_runtime_is_refused_with_the_known_ones() -> None:
    import pytest

    from automl.candidate import ArchConfig, Candidate
    from automl.errors import SpecError

    with pytest.raises(SpecError, match=r"unknown runtime 'tvm'; known: .*openvino"):
        Candidate(ArchConfig("mlp", 8, 1), runtime="tvm")
