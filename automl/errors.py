"""The error hierarchy: one root and a few meaningful subclasses."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pydantic import ValidationError


class AutomlError(Exception):
    """Root of every error automl raises on purpose."""


class SpecError(AutomlError, ValueError):
    """The user's input is wrong (spec, search space, dataset, option). Nothing is run."""


class DataError(SpecError):
    """A dataset is missing, malformed or inconsistent."""


class InputRefused(SpecError):
    """A study's input is wrong wherever it runs: a trained model whose weights do not fit,
    that does not run on the data or export, or scores at chance; or a file that a REST
    submission named and that now lies outside the data root. Its study cannot go on."""


class StorageUnavailable(AutomlError):
    """The study storage cannot be reached (server down, wrong host, port, database or user)."""


class TargetUnavailable(AutomlError):
    """The target's hardware is not present on this machine, so it cannot be measured here."""


class DiskFull(TargetUnavailable):
    """A trial's write found this host's disk full, over quota or read-only: every trial of
    every study here would fail the same way, so its worker stops (exit code 3)."""


class UnsupportedQuantization(AutomlError):
    """The bit-width cannot be applied to this model or run on this target."""


class Aborted(KeyboardInterrupt):
    """A second Ctrl-C: the running trial ends at once, and Optuna marks it FAIL.

    A subclass, because CPython (``python -m``) ends the process by SIGINT, whatever exit code
    it was given, once a plain ``KeyboardInterrupt`` has passed through ``exec()``, as it does
    when it lands in the lazy import of torch (dataclasses build methods with ``exec``).
    """


class TrialFailed(AutomlError):
    """A trial could not produce a candidate; the study records it as FAIL and goes on."""


def validation_message(item: Mapping) -> str:
    """The message of one of pydantic's errors (an item of ``ValidationError.errors()``),
    without the "Value error, " prefix it gives a validator's own ``ValueError``."""
    return item["msg"].removeprefix("Value error, ")


def validation_details(error: ValidationError) -> str:
    """One indented line per problem of ``error``: the field's dotted path (none for the whole
    file), then its :func:`validation_message`."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        message = validation_message(item)
        lines.append(f"  {where}: {message}" if where else f"  {message}")
    return "\n".join(lines)


def host_trouble(error: BaseException) -> bool:
    """Whether ``error`` is this host's trouble, not its study's: out of memory (torch's CUDA
    error, or its CPU allocator's RuntimeError), or a file or disk error (EIO, ENOSPC, EMFILE).
    torch is looked up only if something imported it already."""
    torch = sys.modules.get("torch")
    out_of_memory = (torch.OutOfMemoryError,) if torch is not None else ()
    if isinstance(error, (MemoryError, OSError, *out_of_memory)):
        return True
    return isinstance(error, RuntimeError) and "DefaultCPUAllocator: can't allocate" in str(error)
