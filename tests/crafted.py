"""Crafted dataset files for the tests of the size limits: small on disk, huge in memory, or
with headers that lie about what their members hold."""

from __future__ import annotations

import io
import zipfile

import numpy as np

_SMALL = {
    "y_train": np.arange(10) % 2,
    "x_test": np.zeros((4, 50), np.float32),
    "y_test": np.arange(4) % 2,
}
_BLOCK = 4 * 2**20  # zeros written at a time


def crafted_npz(
    path, rows: int = 6_000_000, cols: int = 50, key: str = "x_train", level: int | None = None
) -> None:
    """An .npz of about 1 MB (5 MB at deflate ``level`` 1) whose array ``key`` decompresses to
    rows x cols float32 (1.2 GB by default), written without ever holding the array."""
    crafted_headers_npz(path, {key: ((rows, cols), "<f4", rows * cols * 4)}, level=level)


def crafted_headers_npz(
    path,
    members: dict[str, tuple[tuple[int, ...], str, int]],
    arrays: dict | None = None,
    level: int | None = None,
) -> None:
    """An .npz of ``members``, in their order, then of ``arrays`` (by default small train labels
    and a test split) that they leave out. Each member is ``key: (shape, descr, size)``: a
    header that says ``shape`` and ``descr`` (negative, overflowing or lying, as the test
    wants), then ``size`` zero bytes of data, whatever the header says. Deflate ``level`` 1
    writes twice as fast as the default, into a file four times larger."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:
        for key, (shape, descr, size) in members.items():
            _write_member(archive, f"{key}.npy", shape, descr, size)
        for key, value in (_SMALL if arrays is None else arrays).items():
            if key not in members:
                buffer = io.BytesIO()
                np.save(buffer, value)
                archive.writestr(f"{key}.npy", buffer.getvalue())


def duplicated_npz(path, rows: int = 150_000, cols: int = 1000) -> None:
    """An .npz whose x_train is two members: first ``x_train``, which numpy reads, of rows x
    cols uint8 pixels (150 MB by default, which a load holds as float32), then a small
    ``x_train.npy``; the labels are those of the first."""
    labels = (np.arange(rows) % 2).astype(np.int8)
    pixels = {"x_train": np.zeros((10, cols), np.uint8), "x_test": np.zeros((100, cols), np.uint8)}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        _write_member(archive, "x_train", (rows, cols), "|u1", rows * cols)
        for key, value in {**pixels, "y_train": labels, "y_test": labels[:100]}.items():
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(f"{key}.npy", buffer.getvalue())


def _write_member(archive: zipfile.ZipFile, name: str, shape, descr: str, size: int) -> None:
    """A member ``name`` whose header says ``shape`` and ``descr``, then ``size`` zero bytes,
    written a block at a time."""
    with archive.open(name, "w", force_zip64=True) as member:
        member.write(_header(shape, descr))
        for start in range(0, size, _BLOCK):
            member.write(bytes(min(_BLOCK, size - start)))


def append_member(path, key: str, shape: tuple[int, ...], descr: str, size: int = 0) -> None:
    """Add to the .npz ``path`` a member ``key`` whose header says ``shape`` and ``descr``,
    followed by ``size`` zero bytes."""
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{key}.npy", _header(shape, descr) + bytes(size))


def _header(shape: tuple[int, ...], descr: str) -> bytes:
    """An .npy header (format 1.0) that says ``shape`` and ``descr``, whatever they are."""
    header = io.BytesIO()
    fields = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(header, fields)
    return header.getvalue()


def damaged_npz(path, damage: str, at: float = 0.5) -> None:
    """A small valid dataset whose x_train member is then damaged: ``deflate`` and ``lzma``
    overwrite 16 bytes of its compressed data, ``at`` (0..1) into it; ``encrypted`` flags it
    as encrypted (zipfile then wants a password)."""
    method = zipfile.ZIP_LZMA if damage == "lzma" else zipfile.ZIP_DEFLATED
    x = np.random.default_rng(0).random((200, 50)).astype(np.float32)
    arrays = {"x_train": x, "y_train": np.arange(200) % 2, "x_test": x[:20]}
    with zipfile.ZipFile(path, "w", method) as archive:
        for key, value in {**arrays, "y_test": np.arange(20) % 2}.items():
            buffer = io.BytesIO()
            np.save(buffer, value)
            archive.writestr(f"{key}.npy", buffer.getvalue())
        info = archive.getinfo("x_train.npy")
    data = bytearray(path.read_bytes())
    local = info.header_offset  # the local header: flags at 6, name and extra lengths at 26
    if damage == "encrypted":
        data[local + 6] |= 1
        data[data.find(b"PK\x01\x02") + 8] |= 1  # x_train's entry, first in the directory
    else:
        lengths = data[local + 26 : local + 30]
        start = local + 30 + int.from_bytes(lengths[:2], "little")
        start += int.from_bytes(lengths[2:], "little") + int(at * info.compress_size)
        data[start : start + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
