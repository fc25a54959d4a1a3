"""Whether this machine can measure a target: its GPU, matched exactly, and its runtime.

A CUDA target lists the exact ``nvidia-smi --query-gpu=name`` models it measures
(``device_names``), compared without regard to case or repeated spaces, never as substrings:
"A100" must not take an "RTX A1000", nor "H200" a "GH200 480GB". A MIG slice is refused even
when its parent is a listed model: it has a fraction of the GPU's SMs and memory bandwidth, so
its latencies are not the target's. ONNX Runtime is imported only once a CUDA target's GPU
has been found, to ask for its providers, and a provider that needs libraries of its own
(TensorRT's libnvinfer) is counted only once a tiny session has started on it.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from functools import cache
from typing import TYPE_CHECKING

from automl.catalog import CPU, get_backend
from automl.errors import TargetUnavailable
from automl.targets.gpus import VISIBLE, current_gpu, list_gpus
from automl.targets.nvidia_smi import (
    MIG,
    detect_gpu_names,
    is_mig,
    parse_gpu_identities,
    query_gpus,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from automl.catalog import Backend
    from automl.targets._registry import Target

logger = logging.getLogger("automl.targets.presence")
_STORAGE_HINT = "postgresql://USER@HOST/DB"


def gpu_identity(target: Target) -> dict[str, str] | None:
    """Index, UUID, driver version and name of the GPU here that measures ``target``.

    That is the first entry of ``CUDA_VISIBLE_DEVICES`` when it is set, else the first GPU of
    the target's model.

    Returns:
        ``{"index", "uuid", "driver", "name"}`` from ``nvidia-smi`` (its index is CUDA's device
        number when every GPU is visible), or ``None`` when none matches or it cannot tell.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    for fields in ("name,mig.mode.current", "name"):  # as in detect_gpu_names
        out = query_gpus(f"index,uuid,driver_version,{fields}")
        if out is not None:
            gpus = parse_gpu_identities(out)
            if visible:  # this process's GPU only (automl's workers name it by UUID)
                gpus = [g for g in gpus if visible in (g["index"], g["uuid"])]
            return next((g for g in gpus if device_refusal(target, g["name"]) is None), None)
    return None


def serves_any(targets: Sequence[Target]) -> Callable[[str], bool] | None:
    """Whether a GPU of that name can measure one of ``targets`` (their CUDA ones); None when
    none is a CUDA target (every GPU will do, for none is timed)."""
    cuda = [t for t in targets if t.kind == "cuda"]
    if not cuda:
        return None
    return lambda name: any(device_refusal(t, name) is None for t in cuda)


def require_pinned_gpu(target: Target) -> None:
    """Refuse to measure ``target`` on a GPU that is not one of its own.

    This process's GPU is the first entry of ``CUDA_VISIBLE_DEVICES``; unset, it is CUDA's
    first device, which on a host of several GPU models may be any of them.

    Raises:
        TargetUnavailable: This process would compute on another GPU, naming it and the fix.
    """
    if target.kind != "cuda":
        return
    gpus = list_gpus()
    ours = [g for g in gpus if device_refusal(target, g.name) is None]
    pinned = os.environ.get(VISIBLE)
    gpu = current_gpu(gpus)
    mixed = len({_canonical(g.name) for g in gpus}) > 1
    # CUDA numbers GPUs fastest first unless told PCI order: on a mixed host an index is
    # nvidia-smi's only then; a UUID is unambiguous.
    by_index = pinned is not None and not pinned.strip().startswith("GPU-")
    unordered = by_index and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID"
    clear = pinned is not None or not mixed
    if gpu is not None and gpu in ours and clear and not (mixed and unordered):
        return
    where = f"CUDA_VISIBLE_DEVICES={pinned!r}" if pinned is not None else "CUDA's first device"
    if gpu is not None and gpu in ours and mixed and unordered:
        where += " (an index, which CUDA counts fastest first here: name the GPU by its UUID)"
    seen = repr(gpu.name) if gpu is not None else "no GPU of this host's"
    raise TargetUnavailable(
        f"this process would measure target {target.name!r} on {where}, {seen}, which is not "
        f"its GPU ({' or '.join(map(repr, target.device_names))}); pin one that is with "
        f"CUDA_VISIBLE_DEVICES={ours[0].uuid if ours else '<its UUID>'}"
        + (" (this host mixes GPU models)" if mixed else "")
    )


def _canonical(gpu_name: str) -> str:
    return " ".join(gpu_name.split()).casefold()


def device_refusal(target: Target, gpu_name: str) -> str | None:
    """Why a GPU cannot measure ``target``; ``None`` when it can. Pure: names only.

    Args:
        target: A CUDA target.
        gpu_name: A GPU's name as ``nvidia-smi --query-gpu=name`` (or CUDA) reports it.

    Returns:
        ``None`` when the name equals one of the target's ``device_names`` (case and repeated
        spaces aside) and is not a MIG slice; otherwise the reason, for people.
    """
    accepted = {_canonical(n) for n in target.device_names}
    base = MIG.split(gpu_name, maxsplit=1)[0]
    if _canonical(base) not in accepted:
        wanted = " or ".join(repr(n) for n in target.device_names) or "no GPU (a cpu target)"
        return f"{gpu_name!r} is not {wanted}"
    if is_mig(gpu_name):
        return (
            f"{gpu_name!r} is a MIG slice, refused: it has a fraction of the GPU's compute and "
            "memory bandwidth, so its latencies are not the target's; measure on a whole GPU "
            "(MIG mode off)"
        )
    return None


def matching_gpus(target: Target, gpu_names: Sequence[str]) -> list[str]:
    """The names among ``gpu_names`` that can measure ``target`` (see :func:`device_refusal`)."""
    return [g for g in gpu_names if device_refusal(target, g) is None]


def runtime_refusal(
    target: Target, providers: Sequence[str], methods: Sequence[str] = ()
) -> str | None:
    """Why an ONNX Runtime with ``providers`` cannot measure ``target``; ``None`` when it can.

    Pure: names only. Latency is never measured on another provider in the target's place.

    Args:
        target: The target.
        providers: The providers of the ONNX Runtime here that can start (those of
            ``onnxruntime.get_available_providers()``, TensorRT only once a session starts).
        methods: The quantization methods to be measured; each needs the provider of its
            backend (see :meth:`Target.backend_for`). None given: the first backend's. Those
            the target does not run are left to the search space's check, which names them.

    Returns:
        ``None`` when ``providers`` has them all; otherwise one line that names what is
        missing and the fix.
    """
    methods = [m for m in methods if m in target.methods]
    missing = [b for b in _needed(target, methods) if b.provider not in providers]
    if not missing:
        return None
    backend = missing[0]
    fix = f"run `{backend.install}` in the automl checkout"
    if target.kind != "cuda":
        fix = f"install an ONNX Runtime build with {backend.provider}"
    runs = [m for m in methods if target.backend_for(m) == backend]
    scope = f" {', '.join(runs)} on" if runs else ""
    return (
        f"target {target.name!r} measures{scope} ONNX Runtime's {backend.provider} (backend "
        f"{backend.name}), which the installed ONNX Runtime lacks or cannot start (it has "
        f"{', '.join(providers) or 'none'}): {fix}"
    )


def is_present(
    target: Target, detected: Sequence[str] | None = None, methods: Sequence[str] = ()
) -> bool:
    """Whether this machine can measure the target.

    Args:
        target: The target.
        detected: GPU names to match, by name only; ``None`` inspects this machine.
        methods: The quantization methods to be measured (see :func:`runtime_refusal`).

    Returns:
        For cpu, whether the runtimes of ``methods`` (its first runtime when none is given)
        can start here (``True`` when matching by name only); for cuda, whether a GPU is one of the target's ``device_names`` and
        not a MIG slice (see :func:`device_refusal`), and, inspecting this machine, whether
        its ONNX Runtime has the providers of ``methods`` (see :func:`runtime_refusal`).
    """
    if target.kind == "cpu":
        return detected is not None or not any(b.unavailable() for b in _needed(target, methods))
    gpus = detect_gpu_names() if detected is None else detected
    if not matching_gpus(target, gpus):
        return False
    if detected is not None:
        return True
    return runtime_refusal(target, _ort_providers(target, methods), methods) is None


def require_present(target: Target, methods: Sequence[str] = ()) -> None:
    """Raise unless this machine has the target's hardware and a runtime that can use it.

    Args:
        target: The target.
        methods: The quantization methods to be measured: their backends' providers must be
            here too (see :func:`runtime_refusal`).

    Raises:
        TargetUnavailable: The hardware is absent: the message names what is missing, what
            was detected and why each GPU was refused, and how to run a worker on the right
            hardware. Or ONNX Runtime lacks a provider (see :func:`runtime_refusal`).
    """
    if target.kind == "cpu":
        _require_runtimes(target, methods)
        return
    gpus = detect_gpu_names()
    if is_present(target, gpus):
        refusal = runtime_refusal(target, _ort_providers(target, methods), methods)
        if refusal:
            raise TargetUnavailable(refusal + _start_failures(target, methods))
        return
    if gpus:
        seen = "; ".join(device_refusal(target, g) or repr(g) for g in gpus)
    else:
        seen = "no NVIDIA GPU (nvidia-smi found none)"
    wanted = " or ".join(repr(n) for n in target.device_names)
    raise TargetUnavailable(
        f"target {target.name!r} needs a whole NVIDIA GPU named {wanted} "
        f"({target.description}), but this machine has: {seen}. "
        "Latency is always measured on the target hardware and is never estimated as a "
        "fallback. Run a worker on a machine with that GPU, sharing the study storage: "
        f"automl worker --target {target.name} --storage {_STORAGE_HINT}"
    )


def _require_runtimes(target: Target, methods: Sequence[str]) -> None:
    """Raise where a runtime that measures ``methods`` on ``target`` cannot start here."""
    for runtime in _needed(target, methods):
        if reason := runtime.unavailable():
            raise TargetUnavailable(
                f"target {target.name!r} measures {', '.join(methods) or 'its methods'} on "
                f"runtime {runtime.name!r}, which cannot start on this machine: {reason}"
            )


def _needed(target: Target, methods: Sequence[str]) -> list[Backend]:
    """The backends of ``methods`` on ``target`` (its first backend when none is given)."""
    needed = dict.fromkeys(target.backend_for(m) for m in methods if m in target.methods)
    return list(needed) or [get_backend(target.backends[0])]


def _gpu_providers(target: Target, methods: Sequence[str]) -> list[str]:
    """The GPU providers that ``methods`` need on ``target``, in order."""
    needed = (p for b in _needed(target, methods) for p in b.providers if p != CPU)
    return list(dict.fromkeys(needed))


def _ort_providers(target: Target, methods: Sequence[str]) -> list[str]:
    """The providers of the ONNX Runtime here that can measure ``methods`` (imported only now).

    ``get_available_providers()`` lists the providers a build has, even where they cannot
    load: a GPU build lists CUDA on a host without the driver, and ONNX Runtime loads a
    provider's libraries only when a session starts. So a GPU provider that ``methods`` need
    counts only when :func:`provider_starts` says so.
    """
    import onnxruntime

    needed = _gpu_providers(target, methods)
    providers = list(onnxruntime.get_available_providers())
    return [p for p in providers if p not in needed or provider_starts(p)]


def _start_failures(target: Target, methods: Sequence[str]) -> str:
    """Why the GPU providers that ``methods`` need, and that this build has, do not start."""
    import onnxruntime

    available = onnxruntime.get_available_providers()
    failures = {p: provider_failure(p) for p in _gpu_providers(target, methods) if p in available}
    said = [f"{p} failed to start with: {why}" for p, why in failures.items() if why]
    return f" ({'; '.join(said)})" if said else ""


# The probe's graph is written in an IR version every ONNX Runtime we support reads: onnx's
# default follows onnx (1.23 writes IR 14), which ORT-GPU 1.31 refuses ("max supported 13").
PROBE_IR_VERSION = 10
# Run in a child process: a TensorRT session holds a CUDA context on GPU 0 for as long as its
# process lives, and a provider that cannot load prints to stdout. The child loads the GPU
# libraries of pip's NVIDIA wheels first, as a measuring process does.
_PROBE = """
import sys, warnings
import onnxruntime as ort
from automl.catalog.runtimes._ort_packages import load_gpu_libraries
from automl.targets.presence import probe_model
load_gpu_libraries()
options = ort.SessionOptions()
options.log_severity_level = 4
warnings.simplefilter("ignore")  # "not in available provider names"
session = ort.InferenceSession(probe_model(), options, providers=[sys.argv[1]], enable_fallback=0)
sys.exit(0 if sys.argv[1] in session.get_providers() else 3)
"""


def probe_model() -> bytes:
    """A one-node ONNX graph (Relu over 8 floats), at :data:`PROBE_IR_VERSION`."""
    import onnx

    x, y = (onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 8]) for n in "xy")
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    graph = onnx.helper.make_graph([node], "probe", [x], [y])
    model = onnx.helper.make_model(
        graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=PROBE_IR_VERSION
    )
    return model.SerializeToString()


def provider_starts(provider: str) -> bool:
    """Whether a one-node session starts on ``provider`` (asked once per process)."""
    return provider_failure(provider) is None


@cache
def provider_failure(provider: str) -> str | None:
    """Why a one-node session does not start on ``provider``; None when it does.

    A provider missing from the build leaves the session on the CPU, and one whose libraries
    fail to load raises (fallback off): both give the reason, which is logged as well.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE, provider], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        why = "a one-node session did not start within 300 s"
    else:
        if done.returncode == 0:
            return None
        why = probe_reason(done.stderr)
    logger.warning("%s does not start here: %s", provider, why)
    return why


_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_LOAD_ERROR = re.compile(r"Failed to load library \S+ with error: (.+)")
DRIVER_LIBRARY = "libcuda.so.1"


def probe_reason(stderr: str) -> str:
    """The reason in a failed probe's ``stderr``, in one line without colour codes.

    A provider library that cannot load makes ONNX Runtime log the missing library, then end
    with generic advice to install CUDA and cuDNN; the missing library is the reason. The
    driver's own library is named as such: no install of automl's brings it.
    """
    text = _COLOUR.sub("", stderr)
    loads = _LOAD_ERROR.findall(text)
    if not loads:
        return (text.strip().splitlines() or ["registered another provider"])[-1]
    why = loads[-1].strip()
    if why.startswith(DRIVER_LIBRARY):
        why += (
            " (the NVIDIA driver's library, which no pip install brings: install the driver, "
            "or give this container the GPU, as `docker run --gpus all` does)"
        )
    return why
