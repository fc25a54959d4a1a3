"""One loader for the user's code named ``package.module:function``: datasets, trained-model
factories and model families alike.

The current folder is importable too, as uvicorn does: ``automl`` run next to ``mymodel.py``
finds ``mymodel:build``.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

from automl.errors import SpecError

# package.module:function; the function a plain name (no attribute path).
PLUGIN = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def import_plugin(reference: str, what: str, error: type[SpecError] = SpecError) -> Any:
    """The object ``reference`` names, as ``package.module:name``.

    Args:
        reference: ``package.module:name``.
        what: What it is, for messages (``model factory``, ``dataset plugin``, ``family``).
        error: The error to raise, a kind of :class:`~automl.errors.SpecError`.

    Raises:
        SpecError: (as ``error``) The reference is malformed, or cannot be imported.
    """
    if not PLUGIN.fullmatch(reference):
        raise error(f"{what} {reference!r} must look like 'package.module:function'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, name = reference.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise error(f"{what} {reference!r} cannot be imported: {e}") from e
