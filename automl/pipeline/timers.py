"""The session a latency is timed in, and how one run of it is timed.

:func:`open_runner` opens the session on the backend of the graph's method (see
:mod:`automl.catalog`), checks where its nodes run, and gives its timers and the
environment; :mod:`automl.pipeline.latency` decides how many runs to take.

Each timer runs the session once and returns the milliseconds it took. :func:`host_timer` feeds
a numpy batch and gets numpy outputs back (the CPU backend's figure). :func:`bound_timers`
binds the batch and the outputs to the device once, at fixed addresses, and gives two timers:

- **device-resident**: ``run_with_iobinding`` and a synchronisation; no host copies. With a
  CUDA graph session the run is a graph replay, which needs those fixed addresses.
- **end to end**: the batch copied into the bound input, the run, and the outputs copied back
  to the host: what a caller holding numpy arrays sees.

On the CPU the device is ``"cpu"``, and both timers work as they do on a GPU.
"""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import onnxruntime as ort

from automl.catalog.runtimes._ort import (
    ORT_DTYPES,
    ORT_ERRORS,
    feed,
    input_dtype,
    input_name,
)
from automl.catalog.runtimes._ort_packages import gpu_runtime_versions
from automl.errors import SpecError, TargetUnavailable, TrialFailed
from automl.targets import require_present
from automl.targets.presence import gpu_identity, provider_failure

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from automl.catalog import Backend
    from automl.catalog.runtimes._base import Session
    from automl.targets import Target


class _NoCudaGraph(Exception):
    """A session that a CUDA graph cannot replay as it is bound."""


def host_timer(session: ort.InferenceSession, batch: np.ndarray) -> Callable[[], float]:
    """A timer of ``session.run`` on ``batch``: numpy in, numpy out."""
    feed = {input_name(session): batch}

    def run_once() -> float:
        t0 = time.perf_counter_ns()
        session.run(None, feed)
        return (time.perf_counter_ns() - t0) / 1e6

    return run_once


class BoundTimers(NamedTuple):
    """Timers over one IO binding (each times one run, in milliseconds), and its outputs."""

    device_resident: Callable[[], float]
    end_to_end: Callable[[], float]
    outputs: Callable[[], list[np.ndarray]]


def bound_timers(session: ort.InferenceSession, batch: np.ndarray, device: str) -> BoundTimers:
    """Device-resident and end-to-end timers over one IO binding at fixed addresses.

    Args:
        session: The session; on a GPU, opened on this process's device 0.
        batch: The input batch, as the model takes it.
        device: ``"cuda"`` or ``"cpu"``.

    Returns:
        The timers, and ``outputs``: the last run's outputs, copied to the host.
    """
    bound_input = ort.OrtValue.ortvalue_from_numpy(batch, device, 0)
    binding = session.io_binding()
    binding.bind_ortvalue_input(input_name(session), bound_input)
    for output in session.get_outputs():
        shape = _output_shape(output.shape, len(batch))
        if shape is None or output.type not in ORT_DTYPES:  # ONNX Runtime allocates it
            binding.bind_output(output.name, device, 0)
            continue
        value = ort.OrtValue.ortvalue_from_shape_and_type(shape, ORT_DTYPES[output.type], device, 0)
        binding.bind_ortvalue_output(output.name, value)

    def device_resident() -> float:
        t0 = time.perf_counter_ns()
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        return (time.perf_counter_ns() - t0) / 1e6

    def end_to_end() -> float:
        t0 = time.perf_counter_ns()
        bound_input.update_inplace(batch)
        session.run_with_iobinding(binding)
        binding.copy_outputs_to_cpu()
        return (time.perf_counter_ns() - t0) / 1e6

    return BoundTimers(device_resident, end_to_end, binding.copy_outputs_to_cpu)


def _output_shape(shape: list[int | str | None], batch_size: int) -> list[int] | None:
    """An output's shape at ``batch_size``: a named first dimension is the batch.

    ``None`` when another dimension is unknown before the run.
    """
    if not shape:
        return None
    head, rest = shape[0], shape[1:]
    if not all(isinstance(d, int) for d in rest):
        return None
    return [head if isinstance(head, int) else batch_size, *rest]


def backend_session(
    model_path: Path | str,
    target: Target,
    method: str,
    cache_dir: Path | None = None,
    *,
    cuda_graph: bool = False,
    optimization: str = "all",
    threads: int | None = None,
    profile_prefix: str | None = None,
    batch_size: int | None = None,
) -> Session:
    """A session of ``model_path`` on the runtime that measures ``method`` on ``target``.

    The runtime opens it (:meth:`Backend.open_session`) with the target's threads (or
    ``threads``), for ``batch_size`` where it compiles for a fixed batch, at the graph
    optimisation level ``optimization``; ``cuda_graph`` and ``profile_prefix`` are ONNX
    Runtime's (a CUDA graph replay; its profiler's trace). The trial evaluates accuracy in this
    session, so accuracy is the deployed runtime's.

    Raises:
        TrialFailed: The runtime refused the graph (ONNX Runtime's fallback is off, so a
            provider that fails to start is never replaced by another).
    """
    backend = target.backend_for(method)
    threads = target.intra_op_threads if threads is None else threads
    ort_only = {"cuda_graph": cuda_graph} if cuda_graph else {}
    ort_only |= {"profile_prefix": profile_prefix} if profile_prefix is not None else {}
    return backend.open_session(
        model_path, method, threads=threads, batch_size=batch_size, cache_dir=cache_dir,
        optimization=optimization, **ort_only,
    )  # fmt: skip


@dataclass(frozen=True)
class Runner:
    """A session's timers and its environment: what :func:`open_runner` gives."""

    run_once: Callable[[], float]
    end_to_end: Callable[[], float] | None
    env: dict[str, Any]


def open_runner(
    model: Path | str | ort.InferenceSession,
    target: Target,
    inputs: np.ndarray,
    batch_size: int,
    method: str,
    cache_dir: Path | None,
    optimization: str = "all",
) -> Runner:
    """The timers of ``model`` on the backend of ``method``, its placement checked.

    A GPU backend given a file tries a CUDA graph session first, and a plain one when ONNX
    Runtime cannot capture the graph (the environment records which, and why). A file is
    opened at the graph optimisation level ``optimization``.
    """
    require_present(target, [method])
    if batch_size < 1 or len(inputs) == 0:
        raise SpecError(f"need batch_size >= 1 and some inputs; got {batch_size}, {len(inputs)}")
    backend = target.backend_for(method)
    if not backend.on_device:
        session, env = _session_on(
            model, target, backend, method, cache_dir, optimization, batch_size=batch_size
        )
        batch = _batch(inputs, batch_size, input_dtype(session))
        return Runner(host_timer(session, batch), None, env | {"timing": "host"})
    return _bound_runner(
        model, target, backend, method, cache_dir, (inputs, batch_size), optimization
    )


def _bound_runner(
    model: Path | str | ort.InferenceSession,
    target: Target,
    backend: Backend,
    method: str,
    cache_dir: Path | None,
    batch_of: tuple[np.ndarray, int],
    optimization: str,
) -> Runner:
    """Device-resident timers; on a GPU, of a CUDA graph session where one can be captured."""
    env: dict[str, Any] = {}
    if backend.device == "cuda" and not isinstance(model, ort.InferenceSession):
        try:
            session, env = _session_on(
                model, target, backend, method, cache_dir, optimization, cuda_graph=True
            )
            _require_fixed_outputs(session, batch_of[1])
            _require_cuda_graph(session, backend)
            timers = bound_timers(session, _batch(*batch_of, input_dtype(session)), "cuda")
            timers.device_resident()  # the first run captures the graph, or refuses to
            graph = env | {"timing": "device-resident, cuda-graph"}
            return Runner(timers.device_resident, timers.end_to_end, graph)
        except (*ORT_ERRORS, _NoCudaGraph, TrialFailed) as e:  # e.g. a node off the GPU
            env = {"cuda_graph_refused": f"{type(e).__name__}: {e}"}
    session, own = _session_on(model, target, backend, method, cache_dir, optimization)
    timers = bound_timers(session, _batch(*batch_of, input_dtype(session)), backend.device)
    env = own | env | {"timing": "device-resident"}
    return Runner(timers.device_resident, timers.end_to_end, env)


def _require_cuda_graph(session: ort.InferenceSession, backend: Backend) -> None:
    """Refuse the ``cuda-graph`` label unless the session itself reports its graph option on."""
    reported = session.get_provider_options()
    if not backend.runs_cuda_graph(reported):
        wanted = dict(backend.graph_options)
        raise _NoCudaGraph(f"the session reports {reported.get(backend.provider)}, not {wanted}")


def _require_fixed_outputs(session: ort.InferenceSession, batch_size: int) -> None:
    """Refuse a CUDA graph where an output would be allocated by ONNX Runtime at each run.

    A graph replays the captured addresses: an output that :func:`bound_timers` cannot
    preallocate (its shape is known only after the run) may then be written elsewhere than
    where it is read back.
    """
    loose = [
        o.name
        for o in session.get_outputs()
        if _output_shape(o.shape, batch_size) is None or o.type not in ORT_DTYPES
    ]
    if loose:
        raise _NoCudaGraph(f"outputs {', '.join(loose)} have no fixed shape and type")


def _session_on(
    model: Path | str | Session,
    target: Target,
    backend: Backend,
    method: str,
    cache_dir: Path | None,
    optimization: str,
    *,
    batch_size: int | None = None,
    cuda_graph: bool = False,
) -> tuple[Session, dict[str, Any]]:
    """A session of ``model`` on the runtime, its placement checked, and its env.

    Raises:
        TargetUnavailable: The session does not run on the runtime (ONNX Runtime could not
            start its provider, or a session passed in was opened elsewhere).
        TrialFailed: Compute nodes run on a provider other than the runtime's.
    """
    session = model
    if isinstance(model, (str, os.PathLike)):
        session = backend_session(
            model, target, method, cache_dir, cuda_graph=cuda_graph, optimization=optimization,
            batch_size=batch_size,
        )  # fmt: skip
    wanted = backend.provider
    try:
        placement = backend.placement(session)
    except TargetUnavailable as e:
        hint = ""
        if target.kind == "cuda":
            why = provider_failure(wanted) or "it started in a probe"
            hint = f" ({wanted} did not start: {why}; its libraries come with `{backend.install}`)"
        raise TargetUnavailable(
            f"target {target.name!r} measures {method} on {backend.name}'s {wanted}, but {e}"
            f"{hint}. Latency is never measured on another provider instead."
        ) from e
    own = backend.environment(session)
    options = own.pop("provider_options", None)
    env = env_fingerprint(own["provider"], target.intra_op_threads, target, placement, options)
    return session, env | own | {"backend": backend.name, "graph_optimization": optimization}


def env_fingerprint(
    provider: str,
    threads: int,
    target: Target,
    placement: Mapping[str, int] | None = None,
    provider_options: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Describe where a measurement ran.

    Args:
        provider: The execution provider that ran the model.
        threads: Intra-op threads used.
        target: The target measured.
        placement: Nodes per execution provider of the timed session (see
            :func:`automl.catalog.runtimes._placement.check_placement`).
        provider_options: The options ``provider`` ran with, as the session reports them.

    Returns:
        ORT version, provider, threads, CPU model, logical cores, Python version, platform,
        target name and, when given, ``placement``. A cuda target adds its GPU's name, index,
        UUID and driver version (see :func:`automl.targets.presence.gpu_identity`; ``None``
        where ``nvidia-smi`` cannot tell), the CUDA, cuDNN and TensorRT versions (see
        :func:`automl.catalog.runtimes._ort_packages.gpu_runtime_versions`) and ``tf32``: whether fp32
        ran as TF32 (``None`` when the options do not say).
    """
    env: dict[str, Any] = {
        "target": target.name,
        "onnxruntime": ort.__version__,
        "provider": provider,
        "intra_op_threads": threads,
        "cpu_model": _cpu_model(),
        "logical_cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if target.kind == "cuda":
        gpu = gpu_identity(target) or {}
        env["gpu"] = gpu.get("name")
        env |= {f"gpu_{key}": gpu.get(key) for key in ("index", "uuid")}
        env["driver"] = gpu.get("driver")
        env |= gpu_runtime_versions()
        use_tf32 = (provider_options or {}).get("use_tf32")
        env["tf32"] = None if use_tf32 is None else use_tf32 != "0"
    if placement is not None:
        env["placement"] = dict(placement)
    return env


def _batch(inputs: np.ndarray, batch_size: int, dtype: type) -> np.ndarray:
    return feed(inputs[np.arange(batch_size) % len(inputs)], dtype)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
