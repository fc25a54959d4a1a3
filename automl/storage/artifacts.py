"""The artifact store on disk: models written whole or not at all, and a folder checked for
writes before a study is created."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

from optuna.artifacts import FileSystemArtifactStore

from automl.errors import SpecError

if TYPE_CHECKING:
    from typing import BinaryIO

_TMP = ".tmp-"  # the stage cache's prefix too: a name no artifact id (a UUID) takes
# A write that fails with one of these fails every write after it on this host.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


class AtomicArtifactStore(FileSystemArtifactStore):
    """Optuna's filesystem artifact store, whose writes leave a whole file or none.

    Optuna's own store writes into the final file, so a full disk leaves a partial model
    under a name that looks complete. Here a write goes to a temporary file in the same
    folder, renamed into place once complete and removed on any error.
    """

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        """Store ``content_body`` as ``artifact_id``, atomically.

        Args:
            artifact_id: The artifact's id (Optuna's upload makes it a UUID).
            content_body: The bytes to store, read to their end.

        Raises:
            OSError: The file could not be written (a full disk, say); nothing is left.
        """
        final = self._get_filepath(artifact_id)
        handle, tmp = tempfile.mkstemp(dir=final.parent, prefix=_TMP)
        try:
            with os.fdopen(handle, "wb") as out:
                shutil.copyfileobj(content_body, out)
            os.replace(tmp, final)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def require_writable(folder: Path, fix: str) -> None:
    """Create ``folder`` if missing, write and remove a probe file in it, then remove the
    folders it created: a command refused later leaves nothing behind.

    Args:
        folder: The artifacts folder.
        fix: How the user gives another folder, e.g. ``"AUTOML_ARTIFACTS_DIR"``.

    Raises:
        SpecError: It cannot be created or written (read-only, not a folder, full).
    """
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        if folder.exists() and not folder.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "it is a file, not a folder")
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=folder, prefix=_TMP)
        try:
            os.write(handle, b"\0")  # an empty file fits on a full disk; a byte does not
        finally:
            os.close(handle)
            Path(probe).unlink(missing_ok=True)
    except OSError as e:
        raise SpecError(
            f"artifacts folder {str(folder)!r} cannot be written: {e.strerror or e}; "
            f"give a writable {fix}"
        ) from None
    finally:
        for path in created:
            with suppress(OSError):  # another process's folder by now: it is left
                path.rmdir()


def disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, says the disk is full, over quota or
    read-only (e.g. remounted so after an I/O error): no write of this host's can succeed.

    Libraries with C++ cores (torch, ONNX Runtime) re-raise it as a ``RuntimeError`` that
    keeps only the message, so that is read too.
    """
    full = {os.strerror(code) for code in DISK_FULL_ERRNOS}
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in DISK_FULL_ERRNOS:
            return True
        if any(text in str(seen) for text in full):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
