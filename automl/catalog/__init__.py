"""The catalog: every quantization method and latency backend, one self-describing file each.

A method is a :class:`Method` subclass in ``automl/catalog/methods/``, a backend a
:class:`Backend` subclass in ``automl/catalog/backends/``; defining the class registers it, and
every module of those folders is imported here. Targets, search spaces, the quantize stage,
the timers and the contract tests read :data:`METHODS` and :data:`BACKENDS`; nothing else lists
names. ``docs/architecture.md`` shows how to add one.

This package is a leaf: it imports only :mod:`automl.errors` of ours, and onnx and onnxruntime
only inside the converters.
"""

from __future__ import annotations

import importlib
import pkgutil

from automl.catalog import backends, methods
from automl.catalog._registry import (
    BACKENDS,
    CPU,
    CUDA,
    INT8_MODES,
    METHODS,
    TRT,
    Backend,
    Method,
    first_running,
    get_backend,
    get_method,
    legacy_bits,
    method_for,
    methods_for_bits,
)

for _package in (methods, backends):
    for _module in pkgutil.iter_modules(_package.__path__):
        if not _module.name.startswith("_"):
            importlib.import_module(f"{_package.__name__}.{_module.name}")

__all__ = [
    "BACKENDS",
    "CPU",
    "CUDA",
    "INT8_MODES",
    "METHODS",
    "TRT",
    "Backend",
    "Method",
    "first_running",
    "get_backend",
    "get_method",
    "legacy_bits",
    "method_for",
    "methods_for_bits",
]
