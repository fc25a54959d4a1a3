"""A crafted dataset file for the tests of the size limits: small on disk, huge in memory."""

from __future__ import annotations

import io
import zipfile

import numpy as np

_SMALL = {
    "y_train": np.arange(10) % 2,
    "x_test": np.zeros((4, 50), np.float32),
    "y_test": np.arange(4) % 2,
}


def crafted_npz(path, rows: int = 6_000_000, cols: int = 50, key: str = "x_train") -> None:
    """An .npz of about 1 MB whose array ``key`` decompresses to rows x cols float32 (1.2 GB by
    default), written without ever holding the array."""
    header = io.BytesIO()
    fields = {"descr": "<f4", "fortran_order": False, "shape": (rows, cols)}
    np.lib.format.write_array_header_1_0(header, fields)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            zeros = bytes(4 * cols * 100_000)
            for _ in range(rows // 100_000):
                member.write(zeros)
        for key, value in _SMALL.items():
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(f"{key}.npy", buffer.getvalue())
