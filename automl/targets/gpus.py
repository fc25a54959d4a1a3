"""This host's NVIDIA GPUs, shared among the local worker processes.

Each trial process of ``automl study start --jobs K`` and ``automl serve --workers K`` gets one
GPU through ``CUDA_VISIBLE_DEVICES``, round-robin: process ``i`` gets GPU ``i mod N``. CUDA
reads the variable once, when a process first initialises it, and ignores later changes, so
it is set before anything touches CUDA: a spawned worker sets it first thing, and a parent
that runs trials itself sets it before its first trial (see :func:`pin_this_process`).

With more processes than GPUs, several share a GPU; :func:`measurement_lock` serialises their
latency measurements on it, so that no trial times its neighbour's load. Training is not
serialised: it shares the GPU and only its duration suffers.

GPU indices are ``nvidia-smi``'s, which are CUDA's when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` or
when the GPUs are all one model (CUDA lists the fastest first). The workers that automl starts
name their GPU by UUID, which needs no order. This module imports neither torch nor
onnxruntime.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import os
import re
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from automl.targets.nvidia_smi import query_gpus

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

    from automl.targets import Target

# CUDA's own variable, not an automl setting: the settings class does not own it.
VISIBLE = "CUDA_VISIBLE_DEVICES"

# Nesting depth of measurement_lock per GPU in this process, and the lock that orders its
# threads: flock locks belong to an open file, so a second one here would wait on the first.
_DEPTH: collections.Counter[str] = collections.Counter()
_THREAD_LOCKS: dict[str, threading.RLock] = {}


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as ``nvidia-smi`` lists it.

    Attributes:
        index: ``nvidia-smi``'s index (PCI bus order).
        uuid: Its UUID, ``GPU-…``; a ``CUDA_VISIBLE_DEVICES`` entry as it is.
        name: Its model, e.g. ``NVIDIA H100 80GB HBM3``.
    """

    index: int
    uuid: str
    name: str


def list_gpus() -> list[Gpu]:
    """The NVIDIA GPUs of this host, all of them, whatever ``CUDA_VISIBLE_DEVICES`` says.

    Returns:
        One record per GPU in ``nvidia-smi``'s order; empty when ``nvidia-smi`` is missing,
        fails or times out.
    """
    return _parse_gpus(query_gpus("index,uuid,name") or "")


def _parse_gpus(csv_text: str) -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=index,uuid,name --format=csv,noheader`` lines."""
    gpus = []
    for line in csv_text.splitlines():
        fields = [f.strip() for f in line.split(",", 2)]
        if len(fields) == 3 and fields[0].isdigit() and all(fields):
            gpus.append(Gpu(index=int(fields[0]), uuid=fields[1], name=fields[2]))
    return gpus


def _entries(value: str) -> list[str]:
    return [e.strip() for e in value.split(",") if e.strip()]


def worker_environment(
    worker_index: int,
    gpus: Sequence[Gpu],
    environ: Mapping[str, str] | None = None,
    accepts: Callable[[str], bool] | None = None,
) -> dict[str, str]:
    """The environment variables of trial process number ``worker_index``: its GPU.

    Args:
        worker_index: The process's number, from 0.
        gpus: This host's GPUs (:func:`list_gpus`).
        environ: The environment the processes start from; defaults to this process's. A
            ``CUDA_VISIBLE_DEVICES`` set there is the user's choice of GPUs: its entries are
            shared instead of the host's GPUs (an empty value leaves no GPU to share).
        accepts: Whether a GPU of that name may measure the studies to run (a target's exact
            names); the host's other GPUs are left out, so that a mixed host never times a
            trial on a card that is not its target's.

    Returns:
        ``{"CUDA_VISIBLE_DEVICES": entry}`` with entry ``worker_index mod N`` of the GPUs
        shared (a UUID, or the user's entry as written); empty when there is none.
    """
    inherited = (os.environ if environ is None else environ).get(VISIBLE)
    if inherited is None:
        pool = [g.uuid for g in gpus if accepts is None or accepts(g.name)]
    else:
        pool = _entries(inherited)
    return {VISIBLE: pool[worker_index % len(pool)]} if pool else {}


def pin_this_process(environment: Mapping[str, str]) -> bool:
    """Put ``environment`` into this process's environment, unless CUDA may have read it.

    A process whose CUDA is initialised keeps the GPUs it saw, and would then compute on one
    GPU while its lock and records named another. This refuses when torch has initialised
    CUDA here; it cannot see a CUDA context that onnxruntime made, nor the driver's
    initialisation by ``torch.cuda.is_available()``, so call it before the process runs a trial.

    Args:
        environment: From :func:`worker_environment`.

    Returns:
        Whether it was set. When not, the process keeps its environment: CUDA's device 0 of
        the GPUs it sees.
    """
    torch = sys.modules.get("torch")
    if environment and torch is not None and torch.cuda.is_initialized():
        return False
    os.environ.update(environment)
    return True


def current_gpu(
    gpus: Sequence[Gpu] | None = None, environ: Mapping[str, str] | None = None
) -> Gpu | None:
    """The GPU this process computes on: the first it sees, as ``CUDA_VISIBLE_DEVICES`` says.

    Args:
        gpus: This host's GPUs; ``None`` runs :func:`list_gpus`.
        environ: Defaults to this process's environment.

    Returns:
        The host GPU the variable's first entry names (its UUID, a prefix of it, or its index),
        or the first GPU when the variable is unset; ``None`` when there is no GPU, the
        variable hides them all, or its entry is none of the host's GPUs (a MIG instance).
    """
    gpus = list_gpus() if gpus is None else gpus
    value = (os.environ if environ is None else environ).get(VISIBLE)
    if value is None:
        return gpus[0] if gpus else None
    entries = _entries(value)
    if not entries:
        return None
    first = entries[0]
    for gpu in gpus:
        if (first.startswith("GPU-") and gpu.uuid.startswith(first)) or first == str(gpu.index):
            return gpu
    return None


def default_lock_dir() -> Path:
    """Where :func:`measurement_lock` keeps its lock files: one folder per host (``$TMPDIR``)."""
    return Path(tempfile.gettempdir()) / "automl-gpu-locks"


@contextlib.contextmanager
def measurement_lock(target: Target, *, lock_dir: Path | None = None) -> Iterator[Path | None]:
    """Hold this process's GPU alone while the block measures latency on it.

    Wrap the timed runs of a trial, not its training: every process on the host that measures
    on the same GPU waits for the lock (an advisory ``flock`` on a file named after the GPU's
    UUID), so that a measurement never overlaps another's load. The lock is released when the
    block ends, or by the kernel when the process dies, so no lock outlives its holder. Nested
    blocks in one process take it once; threads of one process take turns.

    Processes that name one GPU differently and cannot resolve it to a UUID (a MIG instance,
    no ``nvidia-smi``) lock by the name as written, so they exclude only processes that
    write it alike.

    Args:
        target: The target measured: a cpu target locks nothing.
        lock_dir: The folder of the lock files; defaults to :func:`default_lock_dir`.
            Processes exclude each other only when they use the same folder. A folder this
            makes is open to every user, sticky as ``/tmp`` is.

    Yields:
        The lock file held, or ``None`` when nothing is locked (a cpu target, no GPU here).
    """
    name = _lock_name() if target.kind == "cuda" else None
    if name is None:
        yield None
        return
    path = (lock_dir or default_lock_dir()) / f"{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.lock"
    with _THREAD_LOCKS.setdefault(name, threading.RLock()):
        fd = None if _DEPTH[name] else _locked(path)
        _DEPTH[name] += 1
        try:
            yield path
        finally:
            _DEPTH[name] -= 1
            if fd is not None:
                os.close(fd)  # releases the flock


def _lock_name() -> str | None:
    """This process's GPU as a lock name: its UUID, else its entry as written; None: no GPU."""
    gpu = current_gpu()
    if gpu is not None:
        return gpu.uuid
    entries = _entries(os.environ.get(VISIBLE, ""))
    return entries[0] if entries else None


def _locked(path: Path) -> int:
    """Open ``path`` (made if missing) and wait for its exclusive flock; the open descriptor."""
    try:
        path.parent.mkdir(parents=True)
        path.parent.chmod(0o1777)  # other users' workers share the host's GPUs, and so its locks
    except FileExistsError:
        pass
    # Read-only: flock needs no write access, so another user's lock file serves as well.
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd
