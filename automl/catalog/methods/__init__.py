"""Quantization methods, one file each (see :class:`automl.catalog.Method`)."""

from automl.catalog.methods._tools import tool_failure

__all__ = ["tool_failure"]
