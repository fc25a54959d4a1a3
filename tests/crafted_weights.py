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
    buffer = io.BytesIO()
    torch.save({"w": torch.ones(12)}, buffer)
    content = bytearray(buffer.getvalue())
    entry = content.index(b"PK\x01\x02")  # the central directory, an entry a record
    while not content[entry + 46 :].startswith(b"archive/data/0"):
        entry = content.index(b"PK\x01\x02", entry + 46)
    struct.pack_into("<II", content, entry + 20, compressed, uncompressed)
    with open(path, "wb") as file:
        file.write(content)


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
