"""Small real filesystems for tests of full and read-only disks: a tmpfs mounted over a folder.

Root ignores permission bits, and the tests run as root, so a read-only folder is a read-only
mount, and a full disk is a small one, filled.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

FILLER = "filler"


@contextmanager
def tmpfs(folder: Path, size_kb: int, *, read_only: bool = False) -> Iterator[Path]:
    """Mount a tmpfs of ``size_kb`` over ``folder`` (created if missing) for the block.

    Mounting needs root (CAP_SYS_ADMIN), which CI has; elsewhere the test is skipped.
    """
    folder.mkdir(parents=True, exist_ok=True)
    options = f"size={size_kb}k" + (",ro" if read_only else "")
    mount = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)]
    done = subprocess.run(mount, capture_output=True, text=True, check=False)
    if done.returncode:
        pytest.skip(f"a tmpfs cannot be mounted here (root is needed): {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "--lazy", str(folder)], check=True)


def fill(folder: Path, leave_kb: int) -> None:
    """Write a file into ``folder`` that leaves only ``leave_kb`` free on its filesystem."""
    stat = os.statvfs(folder)
    free = stat.f_bavail * stat.f_frsize
    (folder / FILLER).write_bytes(b"\0" * (free - leave_kb * 1024))
