"""Latency on CUDA through torch, for a CUDA target whose ONNX Runtime lacks the CUDA provider.

It runs fp32 and fp16 only; other bit-widths are refused before any training, since latency is
never estimated. :func:`automl.pipeline.latency.measure_latency` uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnxruntime as ort

from automl.errors import UnsupportedQuantization

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import torch

    from automl.targets import Target


def cuda_available() -> bool:
    """Whether torch sees a CUDA device here."""
    import torch

    return torch.cuda.is_available()


def check_measurable(target: Target, bits: int) -> None:
    """Refuse, before any training, a bit-width whose latency cannot be measured here.

    Without ONNX Runtime's provider for a CUDA target, latency falls back to torch on CUDA,
    which runs fp32 and fp16 only.

    Raises:
        UnsupportedQuantization: The candidate's bit-width cannot be timed on this host.
    """
    if times_with_torch(target):
        _dtype_name(bits)


def times_with_torch(target: Target) -> bool:
    """Whether ``target`` is timed with torch on CUDA here (ONNX Runtime lacks its provider)."""
    return (
        target.kind == "cuda" and target.execution_providers[0] not in ort.get_available_providers()
    )


def _dtype_name(bits: int) -> str:
    """The torch dtype that times a ``bits`` candidate on the torch-cuda path.

    Raises:
        UnsupportedQuantization: torch has no path for that bit-width; only ONNX Runtime's
            CUDA provider (onnxruntime-gpu) can time it, and latency is never estimated.
    """
    if bits not in (16, 32):
        raise UnsupportedQuantization(
            f"{bits}-bit candidates can only be timed with onnxruntime-gpu on this GPU; "
            "install it, or leave that bit-width out of the search space"
        )
    return "float16" if bits == 16 else "float32"


def cuda_runner(
    torch_model: torch.nn.Module, batch: np.ndarray, bits: int
) -> tuple[Callable[[], float], int, dict[str, Any]]:
    """A timed run of a copy of ``torch_model`` on CUDA, in ms by CUDA events.

    Returns:
        The run, torch's CPU thread count, and what the environment fingerprint adds (torch's
        version and dtype, and the GPU's name).
    """
    import copy

    import torch

    dtype = getattr(torch, _dtype_name(bits))
    model = copy.deepcopy(torch_model).to(device="cuda", dtype=dtype).eval()
    x = torch.from_numpy(batch).to(device="cuda")
    x = x.to(dtype) if x.is_floating_point() else x  # token ids stay int64
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)

    def run_once() -> float:
        with torch.inference_mode():
            start.record()
            model(x)
            end.record()
        end.synchronize()
        return start.elapsed_time(end)

    env = {"torch": torch.__version__, "torch_dtype": str(dtype).removeprefix("torch.")}
    env["gpu"] = torch.cuda.get_device_name()
    return run_once, torch.get_num_threads(), env
