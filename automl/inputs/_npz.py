"""Reading a user's ``.npz``: its headers checked before any array is decompressed, and a
damaged archive refused in one line."""

from __future__ import annotations

import errno
import lzma
import zipfile
import zlib
from typing import TYPE_CHECKING

import numpy as np

from automl.errors import DataError
from automl.inputs._checks import DATASET_KEYS, REQUIRED_KEYS, check_headers

if TYPE_CHECKING:
    from pathlib import Path


def read_npz(path: Path, name: str) -> dict[str, np.ndarray]:
    """The dataset arrays of the ``.npz`` file ``path``, named ``name`` in messages; its
    headers are checked before any array is decompressed.

    Raises:
        DataError: The file is missing, a symlink loop, damaged, crafted, over the limits, or
            names its arrays otherwise than :data:`DATASET_KEYS`.
    """
    try:
        resolved = path.expanduser().resolve(strict=True)
    except FileNotFoundError:
        raise DataError(f"dataset file {name!r} does not exist") from None
    except (OSError, RuntimeError) as e:  # RuntimeError: a symlink loop, before Python 3.13
        loop = isinstance(e, RuntimeError) or e.errno == errno.ELOOP
        raise DataError(
            f"dataset file {name!r} cannot be opened: "
            f"{'it is a symlink loop' if loop else _reason(e)}; name the .npz file itself"
        ) from None
    if not resolved.is_file():
        raise DataError(f"dataset file {name!r} does not exist")
    try:
        with zipfile.ZipFile(resolved) as archive:
            members = check_headers(archive, name, DATASET_KEYS)  # before any decompression
            arrays = {key: _read(archive, member) for key, member in members.items()}
            keys = (member.removesuffix(".npy") for member in archive.namelist())
            unread = sorted(key for key in keys if key not in DATASET_KEYS)
    except DataError:
        raise
    except _UNREADABLE as e:
        raise DataError(f"dataset file {name!r} is not a readable .npz: {_reason(e)}") from e
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing and unread:  # e.g. X_train: the names are exact
        raise DataError(
            f"dataset {name!r} lacks arrays {missing} and has {unread}, which are not read: "
            f"name its arrays {list(DATASET_KEYS)}, in lower case"
        )
    return arrays


def _read(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> np.ndarray:
    """The array in ``member``, read as numpy.load reads it: the member checked is the one
    read, from the file that was checked."""
    with archive.open(member) as file:
        return np.lib.format.read_array(file, allow_pickle=False)


# What reading a damaged archive raises: zipfile's own errors, zlib's and lzma's for corrupt
# data, EOFError for truncated data, RuntimeError for an encrypted member, NotImplementedError
# for an unknown compression method.
_UNREADABLE = (
    OSError, ValueError, zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, RuntimeError,
    NotImplementedError,
)  # fmt: skip


def _reason(error: Exception) -> str:
    """``error`` in one line, without the file's path: an OSError's reason, else the first
    line of its message, or its type where it says nothing."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    lines = str(error).splitlines()
    return lines[0] if lines else type(error).__name__
