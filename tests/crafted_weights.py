"""A crafted weights file for the tests of the weights checks: small on disk, huge once loaded."""

from __future__ import annotations

import collections
import io
import pickle
import struct
import zipfile

import torch

_CHUNK = 1 << 24


class _Storage:
    """Stands for the storage of the tensor, which the pickle names by a persistent id."""


class _Tensor:
    """Pickles as torch.save pickles a tensor: a call of ``_rebuild_tensor_v2`` on a storage."""

    def __init__(self, numel: int) -> None:
        self.numel = numel

    def __reduce__(self):
        rebuild = torch._utils._rebuild_tensor_v2
        return rebuild, (_Storage(), 0, (self.numel,), (1,), False, collections.OrderedDict())


class _Pickler(pickle.Pickler):
    def __init__(self, file, numel: int) -> None:
        super().__init__(file, protocol=2)
        self.numel = numel

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):  # as torch.save names the storage of its record data/0
            return "storage", torch.ByteStorage, "0", "cpu", self.numel
        return None


def deflated_weights(path, inflated: int = 1 << 29) -> None:
    """A torch.save archive of the state dict ``{"w": <inflated bytes of uint8>}`` whose record
    ``data/0`` is ``inflated`` zeros, deflated (512 MiB by default, about 2 MB on disk), written
    without ever holding them. torch.save stores its records uncompressed."""
    pickled = io.BytesIO()
    _Pickler(pickled, inflated).dump({"w": _Tensor(inflated)})
    # Level 1: zeros deflate three times faster than at the default level, still 200 to 1.
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        stored = zipfile.ZIP_STORED
        archive.writestr("archive/data.pkl", pickled.getvalue(), compress_type=stored)
        archive.writestr("archive/byteorder", "little", compress_type=stored)
        archive.writestr("archive/version", "3\n", compress_type=stored)
        with archive.open("archive/data/0", "w", force_zip64=True) as record:
            zeros = bytes(_CHUNK)
            for _ in range(inflated // _CHUNK):
                record.write(zeros)
            record.write(bytes(inflated % _CHUNK))


def lying_sizes(path, compressed: int, uncompressed: int) -> None:
    """A torch.save archive of a small state dict whose central directory gives its record
    ``data/0`` these sizes; its local header (torch.save writes a data descriptor) gives none."""
    content, entry = _small_archive()
    struct.pack_into("<II", content, entry + 20, compressed, uncompressed)
    with open(path, "wb") as file:
        file.write(content)


def misplaced_local_header(path) -> None:
    """A torch.save archive of a small state dict whose central directory puts the local
    header of its record ``data/0`` one byte after where it is."""
    content, entry = _small_archive()
    (local,) = struct.unpack_from("<I", content, entry + 42)
    struct.pack_into("<I", content, entry + 42, local + 1)
    with open(path, "wb") as file:
        file.write(content)


def _small_archive() -> tuple[bytearray, int]:
    """torch.save's archive of ``{"w": torch.ones(12)}``, and where in it the central
    directory's entry of its record ``data/0`` begins."""
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(12)}, buffer)
    content = bytearray(buffer.getvalue())
    entry = content.index(b"PK\x01\x02")  # the central directory, an entry a record
    while not content[entry + 46 :].startswith(b"archive/data/0"):
        entry = content.index(b"PK\x01\x02", entry + 46)
    return content, entry


def lying_legacy(path, claimed: int = 1 << 30) -> None:
    """A state dict in torch's legacy format (a pickle, not a zip archive) whose one storage
    claims ``claimed`` floats (4 GiB by default) in its pickle and in its data's header; the
    file holds 70,001."""
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(70_001)}, buffer, _use_new_zipfile_serialization=False)
    content = buffer.getvalue()
    pickled, header = b"J" + struct.pack("<i", 70_001), struct.pack("<q", 70_001)
    assert pickled in content and header in content  # the pickle names it twice: storage, tensor
    content = content.replace(pickled, b"J" + struct.pack("<i", claimed))
    content = content.replace(header, struct.pack("<q", claimed))
    with open(path, "wb") as file:
        file.write(content)


def two_directories(path, inflated: int = 1 << 20, zip64: bool = False) -> None:
    """:func:`deflated_weights`' archive with a harmless copy of its central directory (its
    records stored, their local headers nowhere) between the real one and the end record,
    which still gives the real one's offset: torch's reader (miniz) reads the directory at that
    offset, the deflated one; Python's zipfile the copy, which ends where the end records
    begin. With ``zip64``, each directory is followed by a zip64 end record: the locator
    points to the real one's, which miniz reads, and zipfile reads the copy's, just before it.
    """
    deflated_weights(path, inflated)
    content = path.read_bytes()
    end = content.rindex(b"PK\x05\x06")
    count, size, offset = struct.unpack_from("<HII", content, end + 10)
    real, harmless = content[offset:end], bytearray(content[offset:end])
    entry = 0
    while entry < size:
        struct.pack_into("<H", harmless, entry + 10, zipfile.ZIP_STORED)
        (compressed,) = struct.unpack_from("<I", harmless, entry + 20)
        struct.pack_into("<I", harmless, entry + 24, compressed)  # the size, once "inflated"
        (local,) = struct.unpack_from("<I", harmless, entry + 42)
        struct.pack_into("<I", harmless, entry + 42, local + 1)  # no local header there
        entry += 46 + sum(struct.unpack_from("<3H", harmless, entry + 28))
    head, copy = content[:offset], offset + size
    if zip64:
        copy += 56
        real += _zip64_end(count, size, offset)
        harmless += _zip64_end(count, size, copy) + _zip64_locator(offset + size)
    eocd = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, count, count, size, offset, 0)
    path.write_bytes(head + real + harmless + eocd)


def _zip64_end(count: int, size: int, offset: int) -> bytes:
    """A zip64 end of central directory record (56 bytes) for a directory on disk 0."""
    return struct.pack("<4sQ2H2I4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, size, offset)


def _zip64_locator(record: int) -> bytes:
    """A zip64 end of central directory locator that points to the record at ``record``."""
    return struct.pack("<4sIQI", b"PK\x06\x07", 0, record, 1)
