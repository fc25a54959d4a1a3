"""The quantization methods of the catalog: names, bit-widths, the old form, registration."""

from __future__ import annotations

import pytest

from automl.catalog import METHODS, Method, get_method, legacy_bits, method_for, methods_for_bits
from automl.errors import SpecError, UnsupportedQuantization


def test_the_old_form_has_its_four_bit_widths() -> None:
    assert legacy_bits() == (32, 16, 8, 4)


@pytest.mark.parametrize(
    ("bits", "int8_mode", "name"),
    [
        (32, "static", "fp32"),
        (32, "dynamic", "fp32"),  # int8_mode counts only for 8 bits
        (16, "static", "fp16"),
        (8, "static", "int8-static"),
        (8, "dynamic", "int8-dynamic"),
        (4, "static", "int4-weight"),
    ],
)
def test_the_old_form_names_a_method(bits: int, int8_mode: str, name: str) -> None:
    method = method_for(bits, int8_mode)

    assert method.name == name
    assert method.bits == bits


def test_the_old_form_refuses_what_it_refused() -> None:
    with pytest.raises(UnsupportedQuantization, match=r"bits=3 .*\(32, 16, 8, 4\)"):
        method_for(3)
    with pytest.raises(SpecError, match="'static', 'dynamic'"):
        method_for(8, "qat")


def test_every_method_has_its_own_converter_and_a_description() -> None:
    for method in METHODS.values():
        assert type(method).convert is not Method.convert, method.name
        assert len(method.description) > 20, method.name


def test_entries_are_frozen_with_distinct_names_and_cache_tags() -> None:
    assert all(name == m.name for name, m in METHODS.items())
    assert len({m.cache_tag for m in METHODS.values()}) == len(METHODS)
    assert METHODS["int8-static"].cache_tag == "qdq-u8s8-per-channel-reduce-range"
    with pytest.raises(AttributeError, match="'fp32' is frozen"):
        METHODS["fp32"].bits = 16  # type: ignore[misc]


def test_defining_a_method_registers_it_in_catalog_order(scratch_catalog) -> None:
    class Int2Weight(Method):
        """Two-bit weights, for this test."""

        name, bits, cache_tag, graph = "int2-weight", 2, "int2", "matmul-nbits"

    assert list(METHODS)[-1] == "int2-weight"
    assert get_method("int2-weight").bits == 2
    with pytest.raises(SpecError, match="'int2-weight' is already registered"):
        type("Again", (Method,), {"name": "int2-weight", "graph": "fp32"})


def test_calibration_is_declared_by_the_static_methods() -> None:
    calibrated = {m.name for m in METHODS.values() if m.needs_calibration}

    assert calibrated == {"int8-static", "int8-mixed", "int8-trt", "int8-trt-mixed", "fp8-trt"}


def test_methods_of_bit_widths_follow_the_old_form() -> None:
    assert methods_for_bits([32, 16, 8, 4]) == (
        "fp32",
        "fp16",
        "int8-dynamic",
        "int8-static",
        "int4-weight",
    )
    assert methods_for_bits([8]) == ("int8-dynamic", "int8-static")


def test_unknown_method() -> None:
    assert get_method("int8-trt").bits == get_method("fp8-trt").bits == 8
    with pytest.raises(SpecError, match="unknown quantization method 'fp4'; known: fp32, "):
        get_method("fp4")
