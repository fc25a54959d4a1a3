"""Refuse to run with two ONNX Runtime builds installed side by side; name the GPU libraries.

Every ONNX Runtime build on PyPI (``onnxruntime``, ``onnxruntime-gpu``, ...) installs the same
``onnxruntime`` import package. Installed together, the last one overwrites the other's files:
``import onnxruntime`` then loads a mix, and the CUDA and TensorRT providers may be missing or
broken without an error. ``pip`` does not prevent it: installing ``automl[gpu]`` over the CPU
install does exactly that, hence ``make install-gpu``.

The check reads package metadata only; it imports neither onnxruntime nor torch, so it is
cheap to call when the CLI starts (:func:`gpu_runtime_versions` and :func:`load_gpu_libraries`,
called by a measurement, import onnxruntime and ask the loaded GPU libraries).
"""

from __future__ import annotations

import ctypes
import importlib.util
import logging
import re
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from automl.errors import AutomlError

if TYPE_CHECKING:
    from collections.abc import Iterable

logger = logging.getLogger("automl.catalog.runtimes._ort_packages")

# Distributions whose wheels install the ``onnxruntime`` import package.
ORT_DISTRIBUTIONS = frozenset(
    {
        "onnxruntime",
        "onnxruntime-gpu",
        "onnxruntime-directml",
        "onnxruntime-openvino",
        "onnxruntime-qnn",
        "onnxruntime-rocm",
        "onnxruntime-migraphx",
        "onnxruntime-training",
        "ort-nightly",
        "ort-nightly-gpu",
    }
)


def _normalise(name: str) -> str:
    """A distribution name in PEP 503 form: ``ONNXRuntime_GPU`` → ``onnxruntime-gpu``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_ort_builds(installed: Iterable[str]) -> list[str]:
    """The ONNX Runtime builds among installed distribution names.

    Args:
        installed: Names of installed distributions, in any spelling pip accepts.

    Returns:
        The ONNX Runtime builds among them, normalised and sorted.
    """
    return sorted({_normalise(n) for n in installed} & ORT_DISTRIBUTIONS)


def check_single_ort(installed: Iterable[str]) -> None:
    """Raise when more than one ONNX Runtime build is among ``installed``.

    Args:
        installed: Names of installed distributions.

    Raises:
        AutomlError: Two or more builds are installed. The message names them and gives the
            one-line fix, which keeps ``onnxruntime-gpu`` when it is one of them.
    """
    builds = installed_ort_builds(installed)
    if len(builds) < 2:
        return
    keep = "onnxruntime-gpu" if "onnxruntime-gpu" in builds else "onnxruntime"
    raise AutomlError(
        f"{' and '.join(builds)} are installed together; they ship the same `onnxruntime` "
        "package and overwrite each other's files, so the GPU providers may be missing or "
        f"broken. Keep one: pip uninstall -y {' '.join(builds)} && pip install {keep}"
        + (" (or run `make install-gpu` in the checkout)" if keep == "onnxruntime-gpu" else "")
    )


def require_single_ort() -> None:
    """:func:`check_single_ort` on this Python's installed distributions.

    Raises:
        AutomlError: Two or more ONNX Runtime builds are installed.
    """
    names = (d.metadata["Name"] or "" for d in metadata.distributions())
    check_single_ort(n for n in names if n)


# The libraries whose versions a GPU measurement records: a file name's start, the function
# that returns its version, and the value from which it counts majors in 10,000s, not 1,000s
# (cuDNN 9 and TensorRT 10 widened their encoding: 91801 is 9.18.1, 8906 is 8.9.6).
_LOADED_LIBRARIES = {
    "cudnn": ("libcudnn.so", "cudnnGetVersion", 90000),
    "tensorrt": ("libnvinfer.so", "getInferLibVersion", 100000),
}


def gpu_runtime_versions() -> dict[str, str | None]:
    """The CUDA that ONNX Runtime was built for, and the cuDNN and TensorRT loaded here.

    cuDNN's and TensorRT's versions are asked of the libraries mapped into this process (by
    their own ``cudnnGetVersion`` and ``getInferLibVersion``), not read from pip's metadata:
    what ran is what was loaded, wherever it came from.

    Returns:
        ``{"cuda", "cudnn", "tensorrt"}``; ``None`` where absent (any CPU build of ONNX
        Runtime; a library not loaded in this process). Imports ``onnxruntime``, for its
        build information.
    """
    from onnxruntime.capi import build_and_package_info as build

    versions: dict[str, str | None] = {"cuda": getattr(build, "cuda_version", None)}
    mapped = _mapped_libraries(Path("/proc/self/maps"))
    for library, (prefix, function, wide_from) in _LOADED_LIBRARIES.items():
        path = next((p for p in mapped if p.name.startswith(prefix)), None)
        versions[library] = _library_version(path, function, wide_from) if path else None
    return versions


def _mapped_libraries(maps: Path) -> list[Path]:
    """The files mapped into this process, in the order of ``/proc/self/maps``."""
    try:
        lines = maps.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    paths = (line.split(maxsplit=5)[5] for line in lines if len(line.split(maxsplit=5)) == 6)
    return [Path(p) for p in dict.fromkeys(paths) if p.startswith("/")]


def _library_version(path: Path, function: str, wide_from: int) -> str | None:
    """``major.minor.patch`` from a library's version function; None if it has none."""
    try:
        call = getattr(ctypes.CDLL(str(path)), function)
    except (OSError, AttributeError):
        return None
    call.restype = ctypes.c_size_t
    value = int(call())
    major, rest = divmod(value, 10000 if value >= wide_from else 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


@cache
def load_gpu_libraries() -> tuple[str, ...]:
    """Load the CUDA, cuDNN and TensorRT libraries of pip's NVIDIA wheels into this process,
    once, so that ONNX Runtime's GPU providers find them.

    ONNX Runtime's provider libraries have no RUNPATH: ``onnxruntime.preload_dlls()`` loads
    CUDA and cuDNN from the wheels, and TensorRT's ``libnvinfer`` is loaded here from the
    ``tensorrt_libs`` package (globally, for the providers that link it). A CPU build of
    ONNX Runtime loads nothing.

    Returns:
        The names of the TensorRT libraries loaded.
    """
    import onnxruntime

    gpu = {"CUDAExecutionProvider", "TensorrtExecutionProvider"}
    if not gpu & set(onnxruntime.get_available_providers()):
        return ()
    if hasattr(onnxruntime, "preload_dlls"):
        onnxruntime.preload_dlls()
    loaded = []
    for library in tensorrt_libraries():
        try:
            ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:  # the provider's own load then says what is missing
            logger.warning("TensorRT library %s does not load: %s", library.name, e)
        else:
            loaded.append(library.name)
    return tuple(loaded)


def tensorrt_libraries() -> list[Path]:
    """TensorRT's shared libraries in the ``tensorrt_libs`` package, ``libnvinfer`` first."""
    spec = importlib.util.find_spec("tensorrt_libs")
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    found = [p for folder in folders for p in Path(folder).glob("libnvinfer*.so*")]
    return sorted(found, key=lambda p: (not p.name.startswith("libnvinfer.so"), p.name))
