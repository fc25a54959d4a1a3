"""Files uploaded over REST: stored under the data root, checked as a study's load checks them,
and never overwritten.

An upload is written to a hidden temporary file in the data root, checked there, then linked
under its name in one step (``os.link``, which fails on any existing name, a symlink
included). So a client never sees half a file, and a study never sees its data or weights
change under it: a name holds the first file stored under it. Sending the same bytes again
(a retry) is answered as a success; other bytes under a taken name are refused.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool

from api.errors import ApiError
from api.model_check import CheckNotRun, run_check
from automl.errors import DataError
from automl.inputs.data import load_dataset
from automl.storage.artifacts import DISK_FULL_ERRNOS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from automl.settings import Settings

# What each suffix holds, and the spec field that names such a file.
KINDS = {".npz": ("dataset", "dataset"), ".pt": ("weights", "model.weights")}
KINDS[".pth"] = KINDS[".pt"]
_WRITE_BYTES = 1 << 20  # received bytes are written to disk a MiB at a time


@dataclass(frozen=True)
class Stored:
    """A file stored under the data root: its name there, what it is, its size and digest,
    and whether this upload stored it (False: the same bytes were already there)."""

    name: str
    kind: str
    field: str
    size_bytes: int
    sha256: str
    created: bool


async def store_upload(body: AsyncIterator[bytes], name: str, settings: Settings) -> Stored:
    """Store the uploaded ``body`` as ``name`` under the data root, once it passes the checks
    of its kind (see :func:`check_file`).

    Raises:
        ApiError: 422 for a name of another kind, or a file its checks refuse; 409 when another
            file has the name; 507 when the data root's disk takes no more; 503 when the
            weights check could not run in time.
    """
    suffix = PurePosixPath(name).suffix.lower()
    if suffix not in KINDS:
        raise ApiError(
            422, "invalid_file_name",
            f"{name!r} is neither a dataset (.npz) nor weights (.pt, .pth): name the file with "
            "its kind's suffix",
            field="name",
        )  # fmt: skip
    kind, field = KINDS[suffix]
    root = settings.data_root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=root, prefix=".upload-", suffix=suffix)
    try:
        with os.fdopen(descriptor, "wb") as file:
            size, digest = await _receive(body, file)
        await run_in_threadpool(check_file, Path(temporary), name, kind, settings)
        created = await run_in_threadpool(_publish, Path(temporary), root / name, digest)
    finally:
        Path(temporary).unlink(missing_ok=True)
    return Stored(name, kind, field, size, digest, created)


async def _receive(body: AsyncIterator[bytes], file) -> tuple[int, str]:
    """Write ``body`` to ``file`` and flush it to disk; its size and SHA-256."""
    digest, size, pending = hashlib.sha256(), 0, bytearray()
    try:
        async for chunk in body:
            digest.update(chunk)
            size += len(chunk)
            pending += chunk
            if len(pending) >= _WRITE_BYTES:
                await run_in_threadpool(file.write, bytes(pending))
                pending.clear()
        await run_in_threadpool(_finish, file, bytes(pending))
    except OSError as e:
        if e.errno in DISK_FULL_ERRNOS:
            raise ApiError(
                507, "insufficient_storage",
                f"the server's data root has no room for the file ({e.strerror}); its operator "
                "must free some",
            ) from None  # fmt: skip
        raise
    return size, digest.hexdigest()


def _finish(file, rest: bytes) -> None:
    file.write(rest)
    file.flush()
    os.fsync(file.fileno())


def check_file(path: Path, name: str, kind: str, settings: Settings) -> None:
    """Check ``path`` as a study would load it, naming it ``name``: a dataset is loaded (its
    ``.npz`` headers are checked against ``AUTOML_DATA_MAX_MB`` and the other limits before
    any array is decompressed, then its arrays and labels), weights in a child process that
    loads them with torch (see :mod:`api.weights_check`).

    Raises:
        ApiError: 422 naming what is wrong with the file; 503 when the weights check could
            not run in time.
    """
    if kind == "dataset":
        try:
            load_dataset(str(path), name=name)
        except DataError as e:
            raise ApiError(422, "invalid_file", str(e), field="body") from None
        return
    try:
        done = run_check(
            "api.weights_check", str(path), name, timeout_s=settings.model_check_timeout_s
        )
    except CheckNotRun as e:
        raise ApiError(
            503, "check_unavailable",
            f"the check of {name!r} {e} (AUTOML_MODEL_CHECK_TIMEOUT_S); retry later",
        ) from None  # fmt: skip
    if done.returncode != 0:
        said = done.stdout.strip() or f"its check ended with exit code {done.returncode}"
        raise ApiError(422, "invalid_file", said, field="body")


def _publish(temporary: Path, path: Path, digest: str) -> bool:
    """Link the checked file under its name; False when the same bytes are there already.

    Raises:
        ApiError: 409 when the name holds another file, or is a link or a folder.
    """
    try:
        os.link(temporary, path)
        return True
    except FileExistsError:
        if path.is_symlink() or not path.is_file() or _sha256(path) != digest:
            raise ApiError(
                409, "file_exists",
                f"{path.name!r} already holds another file under the data root; a stored file "
                "is never replaced (a study may be using it): upload under another name",
            ) from None  # fmt: skip
        return False


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while block := file.read(_WRITE_BYTES):
            digest.update(block)
    return digest.hexdigest()
