"""A model the user trained: its factory builds the architecture, its state dict the weights."""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import re
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from automl.errors import InputRefused, SpecError
from automl.models import WRAPPED, LogitsOf
from automl.plugins import import_plugin

# Mismatched parameters named in a refusal; the rest are counted.
_SHOWN = 3
# The first bytes of a zip archive (a local file header): torch.save's format since torch 1.6.
_ZIP_MAGIC = b"PK\x03\x04"
# The zip end records' signatures: the end of central directory record (22 bytes), and the
# zip64 one (56 bytes) with its locator (20 bytes), which torch.save writes before it.
_END, _END64, _LOCATOR64 = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"


class FactoryUnavailable(SpecError):
    """The factory, or a module it needs, cannot be imported here: other hosts may have it."""


@dataclass(frozen=True)
class TrainedModel:
    """The factory ``package.module:function`` and the weights file, with its digest.

    ``output`` picks the logits out of a model that returns more than a tensor (a key of a
    ``ModelOutput`` or dict, an index of a tuple); ``output_layer`` names the layer that gives
    them, in the user's model (None until it is found, see
    :func:`automl.models.find_output_layer`).
    """

    factory: str
    weights: Path
    digest: str
    output_layer: str | None = None
    output: str | int | None = None

    def build(self) -> nn.Module:
        """The architecture with the weights loaded, in eval mode on the CPU; wrapped in
        :class:`~automl.models.LogitsOf` when ``output`` picks its logits.

        Raises:
            SpecError: The factory fails, the weights file changed since it was opened, or
                the weights do not fit its model.
        """
        model = _call_factory(self.factory)
        state = _read_state_dict(self.weights, self.digest)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as e:
            raise SpecError(
                f"weights {str(self.weights)!r} do not fit the model of {self.factory!r}: "
                f"{_mismatch(model, state) or e}"
            ) from None
        model.eval()
        return model if self.output is None else LogitsOf(model, self.output).eval()

    def layer_name(self, name: str) -> str:
        """``name``, a layer of the user's model, as a layer of :meth:`build`'s module."""
        return name if self.output is None else f"{WRAPPED}.{name}"

    @property
    def pruning_layer(self) -> str:
        """The output layer in :meth:`build`'s module: the layer pruning keeps whole."""
        if self.output_layer is None:
            raise SpecError(f"the output layer of {self.factory!r} has not been found")
        return self.layer_name(self.output_layer)

    def fingerprint(self) -> str:
        """What defines the model: the weights, the factory and its module's source."""
        digest = hashlib.sha256(f"{self.factory}|{self.digest}|{self.output!r}".encode())
        digest.update(_factory_source(self.factory).encode())
        return digest.hexdigest()[:16]


def open_trained(
    factory: str,
    weights: str | Path,
    output_layer: str | None = None,
    output: str | int | None = None,
) -> TrainedModel:
    """The trained model of ``factory`` and ``weights``, after checking the file exists.

    ``output_layer`` names the layer that gives the logits, which pruning keeps whole (None:
    found when the model is checked); ``output`` the logits' key or index in what the model
    returns, when it returns more than a tensor.

    Raises:
        SpecError: The weights file is missing or unreadable here.
        InputRefused: The weights file is empty.
    """
    path = Path(weights).expanduser()
    if not path.is_file():
        raise SpecError(f"weights file {str(weights)!r} does not exist")
    try:
        content = path.read_bytes()
    except OSError as e:
        raise SpecError(f"weights file {str(weights)!r} cannot be read: {e}") from None
    if not content:  # wrong on every host: its study fails, rather than waits for another
        raise InputRefused(
            f"weights file {str(weights)!r} is empty (0 bytes): save it with "
            "torch.save(model.state_dict(), path)"
        )
    digest = hashlib.sha256(content).hexdigest()[:16]
    return TrainedModel(factory, path.resolve(), digest, output_layer, output)


def _factory_source(factory: str) -> str:
    """The source of the factory's module, or its name where the source is not at hand."""
    module_name = factory.partition(":")[0]
    try:
        return inspect.getsource(importlib.import_module(module_name))
    except (ImportError, OSError, TypeError):
        return module_name


def _call_factory(factory: str) -> nn.Module:
    function = import_plugin(factory, "model factory", FactoryUnavailable)
    try:
        model = function()
    except ImportError as e:  # a package the factory needs, missing on this host
        raise FactoryUnavailable(f"model factory {factory!r} failed: {e}") from None
    except Exception as e:  # the user's code: reported as the factory's failure
        raise SpecError(f"model factory {factory!r} failed: {type(e).__name__}: {e}") from None
    if not isinstance(model, nn.Module):
        raise SpecError(
            f"model factory {factory!r} returned {type(model).__name__}, not a torch nn.Module"
        )
    return model


def check_weights_file(path: str | Path) -> None:
    """Check that ``path`` holds a state dict that torch loads with ``weights_only=True``, after
    the archive checks that keep a small file from inflating in memory; no model is built.

    Raises:
        SpecError: The file is missing, empty, unreadable, crafted, or no state dict.
    """
    weights = open_trained(factory="", weights=path)
    _read_state_dict(weights.weights, weights.digest)


def _read_state_dict(path: Path, digest: str) -> dict[str, torch.Tensor]:
    """The state dict in ``path``, whose content must still have ``digest``."""
    try:
        content = path.read_bytes()
    except OSError as e:
        raise SpecError(f"weights file {str(path)!r} cannot be read: {e}") from None
    if hashlib.sha256(content).hexdigest()[:16] != digest:
        raise SpecError(
            f"weights file {str(path)!r} has changed since it was checked (sha256 {digest}...): "
            "a trial never mixes two models; restore it, or start a new study"
        )
    _check_archive(content, path)
    try:
        state = torch.load(io.BytesIO(content), map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds for a file that is not its format
        raise SpecError(
            f"weights file {str(path)!r} is not a state dict saved with torch.save(model."
            "state_dict(), path): weights load with weights_only=True, so a whole pickled model "
            "(torch.save(model)) is refused, and so is another format (e.g. a Hugging Face "
            f".safetensors file: load the model, then save its state_dict). Torch said: {_said(e)}"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise SpecError(
            f"weights file {str(path)!r} must hold a state dict (torch.save(model.state_dict()"
            f", path)), found {type(state).__name__}"
        )
    return state


def _said(e: Exception) -> str:
    """The first line of an error's message, without colour codes (torch's may be empty)."""
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(e)).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:160]}" if lines else type(e).__name__


def _check_archive(content: bytes, path: Path) -> None:
    """Refuse a zip archive whose records would take more memory than the file's size.

    torch.save stores its records uncompressed, but torch.load inflates a compressed one in
    full before it checks its size: a file of a few MB could take gigabytes. A file that is
    not a zip archive is torch's legacy format, whose storages are read from the file itself.
    The records checked must be those torch reads: torch's reader (miniz) and Python's
    zipfile find the central directory differently, so an archive on which they could
    disagree is refused, and so is a record whose local header is not where it says.

    Raises:
        SpecError: A record is compressed or misplaced, the sizes its headers give cannot be
            true, or the central directory is not where the end records say.
    """
    if not content.startswith(_ZIP_MAGIC):  # how torch.load tells its zip format
        return
    refused = f"weights file {str(path)!r} is not an archive that torch.save writes: "
    try:
        archive = zipfile.ZipFile(io.BytesIO(content))
    except Exception as e:  # zipfile raises many kinds for a crafted archive
        raise SpecError(f"{refused}{_said(e)}") from None
    if _directory_offset(content) != archive.start_dir:
        raise SpecError(
            f"{refused}its central directory is not where its end records say (a second "
            "directory, or bytes before the archive); save it again with torch.save(model."
            "state_dict(), path)"
        )
    records = archive.infolist()
    for record in records:
        _check_record(content, record, refused)
    if (total := sum(r.file_size for r in records)) > len(content):
        raise SpecError(
            f"{refused}its headers give its records {total} bytes, more than the whole file "
            f"({len(content)} bytes)"
        )


def _directory_offset(content: bytes) -> int | None:
    """The offset of the central directory as torch's reader (miniz) takes it from the end
    records; None unless the directory ends where they begin, as zipfile takes it to.

    miniz reads the zip64 end record where its locator points, zipfile just before the
    locator: the two must be one. zipfile then reads the directory that ends there, miniz the
    one at the offset that the record gives.
    """
    end = content.rfind(_END, 0, len(content) - 18)  # miniz: the last with 22 bytes after it
    size, offset = struct.unpack_from("<II", content, end + 12)
    begin, locator = end, end - 20
    if locator >= 56 and content.startswith(_LOCATOR64, locator):
        (pointed,) = struct.unpack_from("<Q", content, locator + 8)
        if pointed != locator - 56:
            return None
        if content.startswith(_END64, pointed):
            begin = pointed
            size, offset = struct.unpack_from("<QQ", content, begin + 40)
    return offset if offset + size == begin else None


def _check_record(content: bytes, record: zipfile.ZipInfo, refused: str) -> None:
    """A record stored as it is, with one size in its headers, and its local header where
    the central directory says: torch finds the record's data from that header."""
    local = _local_method(content, record)
    if local is None:
        raise SpecError(
            f"{refused}its record {record.filename!r} has no local header where its central "
            "directory says"
        )
    if record.compress_type != zipfile.ZIP_STORED or local != zipfile.ZIP_STORED:
        raise SpecError(
            f"{refused}its record {record.filename!r} is compressed (torch.save stores "
            "records as they are); save it again with torch.save(model.state_dict(), path)"
        )
    if record.compress_size != record.file_size:
        raise SpecError(
            f"{refused}the headers of its record {record.filename!r} disagree on its size "
            f"({record.compress_size} and {record.file_size} bytes)"
        )


def _local_method(content: bytes, record: zipfile.ZipInfo) -> int | None:
    """The compression method that a record's local header gives (None: no header there)."""
    header = content[record.header_offset : record.header_offset + 10]
    if len(header) < 10 or not header.startswith(_ZIP_MAGIC):
        return None
    return struct.unpack("<H", header[8:10])[0]


def _mismatch(model: nn.Module, state: dict[str, torch.Tensor]) -> str:
    """The missing, unexpected and misshapen parameters, a few of each."""
    expected = model.state_dict()
    parts = []
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [
        f"{k} {tuple(state[k].shape)} in the file, {tuple(v.shape)} in the model"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)):
        if items:
            more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
            parts.append(f"{label}: {', '.join(items[:_SHOWN])}{more}")
    return "; ".join(parts)


def save_module(model: nn.Module, folder: Path) -> dict[str, str]:
    """Save an in-memory model as a factory and a weights file, once per content.

    The factory is the model's class, which every trial process rebuilds with no arguments
    before it loads the weights; the weights go to ``<folder>/<content hash>.pt``.

    Returns:
        The spec's ``model``: ``factory`` and ``weights``.

    Raises:
        SpecError: The class cannot be imported by name, or needs constructor arguments, or
            builds another model without them (``nn.Sequential``).
    """
    cls = type(model)
    factory = f"{cls.__module__}:{cls.__qualname__}"
    instead = (
        "; pass model={'factory': 'package.module:function', 'weights': path} with a "
        "function that builds it"
    )
    if "<locals>" in cls.__qualname__ or "." in cls.__qualname__:
        raise SpecError(f"model class {factory!r} cannot be imported by name{instead}")
    try:
        rebuilt = cls()
    except TypeError as e:
        raise SpecError(
            f"model class {factory!r} needs constructor arguments ({e}){instead}"
        ) from None
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    shapes = {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()}
    if shapes != {k: tuple(v.shape) for k, v in state.items()}:  # e.g. nn.Sequential(...)
        raise SpecError(
            f"model class {factory!r} built with no arguments is another model than this one "
            f"(its layers come from the arguments it was built with){instead}"
        )
    folder.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    for key, tensor in state.items():
        digest.update(key.encode())
        digest.update(tensor.numpy().tobytes())
    path = folder / f"{digest.hexdigest()[:16]}.pt"
    if not path.is_file():
        torch.save(state, path)
    return {"factory": factory, "weights": str(path.resolve())}
