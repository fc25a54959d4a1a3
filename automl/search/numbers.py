"""Numbers in specs and spaces: a number given as text is refused, saying how to write it.

YAML (PyYAML reads YAML 1.1) takes ``1e12`` for the text "1e12": its floats need a dot and a
signed exponent (``1.0e+12``). Left to pydantic, such text became a number in one field, stayed
text in another (a space's fixed value), and failed later with "'<' not supported between
instances of 'str' and 'int'".
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pydantic import field_validator

from automl.search.params import CategoricalParam, FixedParam, FloatParam, param_values
from automl.settings import KNOB_BOUNDS

if TYPE_CHECKING:
    from automl.search.params import Param

# The numeric knobs that take whole numbers (the others of KNOB_BOUNDS take any number).
_WHOLE = frozenset({
    "arch.width", "arch.depth", "arch.kernel_size", "arch.stages", "arch.heads", "bits",
    "keep_fp32", "batch_size", "serving.max_batch", "serving.instances", "finetune_epochs",
    "train.epochs", "train.batch_size",
})  # fmt: skip
_EXPONENT = re.compile(r"([-+]?[0-9_]*\.?[0-9_]*)[eE]([-+]?[0-9]+)")


def number_not_text(value: str | bool, *, whole: bool = False) -> str:
    """Why ``value`` is no number where one belongs (a ``whole`` one); a YAML number read as
    text is rewritten as YAML reads a number."""
    if isinstance(value, bool):
        return f"takes a number, not {str(value).lower()}"
    written = _EXPONENT.fullmatch(value.strip())
    if written is None or not any(c.isdigit() for c in written[1]):
        return f"takes a number, not the text {value!r}"
    number = float(value)
    if whole and number.is_integer():
        fix = f"{number:.0f}"
    else:
        mantissa = written[1] if "." in written[1] else f"{written[1]}.0"
        exponent = written[2] if written[2][0] in "+-" else f"+{written[2]}"
        fix = f"{mantissa}e{exponent}, with a dot and a signed exponent"
    return f"takes a number, not the text {value!r} (YAML reads {value} as text: write {fix})"


def numbers_not_text(*fields: str, whole: bool) -> Any:
    """A before-validator of a model's number ``fields`` (``whole`` ones: int) that refuses text
    and true/false: pydantic would parse "24", and take true for 1.

    Its constraints stay on the field (``Field(ge=...)``), where the JSON schema shows them.
    """

    def refuse(value: object) -> object:
        if isinstance(value, str | bool):
            raise ValueError(number_not_text(value, whole=whole))
        return value

    return field_validator(*fields, mode="before")(staticmethod(refuse))


def check_numbers(name: str, param: Param) -> None:
    """Refuse a space's param that gives a numeric knob text, or (a whole-number knob)
    fractions.

    Raises:
        ValueError: Names the param, its knob and the value.
    """
    key = param.sets or name
    if key not in KNOB_BOUNDS and key not in _WHOLE:
        return
    whole = key in _WHOLE
    where = f"parameter {name!r}" + (f" ({key})" if key != name else "")
    if whole and isinstance(param, FloatParam):
        raise ValueError(f"{where} takes whole numbers: make it type int")
    if not isinstance(param, CategoricalParam | FixedParam):
        return  # an int or float range: pydantic read its ends as numbers
    for value in param_values(param):
        if isinstance(value, str):
            raise ValueError(f"{where} {number_not_text(value, whole=whole)}")
        if whole and not isinstance(value, int):
            raise ValueError(f"{where} takes whole numbers, not {value!r}")
