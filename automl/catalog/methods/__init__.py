"""Quantization methods, one file each (see :class:`automl.catalog.Method`)."""

from automl.catalog.methods._tools import pre_process, tool_failure

__all__ = ["pre_process", "tool_failure"]
