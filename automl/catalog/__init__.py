"""The catalog: every quantization method, runtime and model family, one
self-describing file each.

A method is a :class:`Method` subclass in ``automl/catalog/methods/``, a backend a
:class:`Backend` subclass in ``automl/catalog/runtimes/``, a family a :class:`Family` subclass
in ``automl/catalog/families/``; defining the class registers it, and every public module of
those folders is imported here. Targets, search spaces, the compatibility checks, the stages and
the contract tests read :data:`METHODS`, :data:`BACKENDS` and :data:`FAMILIES`; nothing else
lists names. ``docs/architecture.md`` shows how to add one.

This package is a leaf: it imports only :mod:`automl.errors` of ours, and torch, onnx and
onnxruntime only inside the converters and builders.
"""

from __future__ import annotations

import importlib
import pkgutil

from automl.catalog import families, methods, runtimes
from automl.catalog._registry import (
    FAMILIES,
    GRAPHS,
    INT8_MODES,
    LAYER_OPS,
    LAYOUTS,
    METHODS,
    Family,
    Method,
    first_running,
    get_backend,
    get_family,
    get_method,
    input_layout,
    legacy_bits,
    method_for,
    methods_for_bits,
    per_layer_methods,
)
from automl.catalog.runtimes._base import BACKENDS, CPU, CUDA, TRT, Backend, Session

for _package in (methods, runtimes, families):
    for _module in pkgutil.iter_modules(_package.__path__):
        if not _module.name.startswith("_"):
            importlib.import_module(f"{_package.__name__}.{_module.name}")

__all__ = [
    "BACKENDS",
    "CPU",
    "CUDA",
    "FAMILIES",
    "GRAPHS",
    "INT8_MODES",
    "LAYER_OPS",
    "LAYOUTS",
    "METHODS",
    "TRT",
    "Backend",
    "Family",
    "Method",
    "Session",
    "first_running",
    "get_backend",
    "get_family",
    "get_method",
    "input_layout",
    "legacy_bits",
    "method_for",
    "methods_for_bits",
    "per_layer_methods",
]
