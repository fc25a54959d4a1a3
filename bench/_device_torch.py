"""What torch's CUDA can measure on a GPU machine, for :mod:`bench.device_check`.

Nothing here needs ONNX Runtime or TensorRT. The CUDA driver is asked through ``ctypes`` in a
child process, so that each child reads ``CUDA_VISIBLE_DEVICES`` afresh, as a worker does.
Every function returns plain numbers; the claims are judged in :mod:`bench.device_check`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

# Asks the CUDA driver for its devices, in CUDA's order, with the UUIDs nvidia-smi prints.
_DRIVER_PROBE = r"""
import ctypes, json
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(json.dumps({"error": str(e)})); raise SystemExit
out = {"cuInit": cu.cuInit(0), "devices": []}
n = ctypes.c_int(); cu.cuDeviceGetCount(ctypes.byref(n))
for i in range(n.value):
    d = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(d), i)
    name = ctypes.create_string_buffer(256); cu.cuDeviceGetName(name, 256, d)
    raw = (ctypes.c_ubyte * 16)()
    (getattr(cu, "cuDeviceGetUuid_v2", None) or cu.cuDeviceGetUuid)(raw, d)
    h = bytes(raw).hex()
    uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    out["devices"].append({"ordinal": i, "name": name.value.decode(), "uuid": uuid})
print(json.dumps(out))
"""


def cuda_devices(visible: str | None = None) -> dict[str, Any]:
    """The CUDA driver's devices in a fresh process, with ``CUDA_VISIBLE_DEVICES=visible``
    (unset when ``None``): ``{"devices": [{ordinal, name, uuid}]}`` or ``{"error": ...}``."""
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    try:
        done = subprocess.run(
            [sys.executable, "-c", _DRIVER_PROBE],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        return {"error": f"{type(e).__name__}: {e}"}


def host_timed(fn: Any) -> float:
    """Milliseconds of one call of ``fn``, timed on the host with the device synchronised:
    how a trial times a device-resident run."""
    import torch

    start = time.perf_counter_ns()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter_ns() - start) / 1e6


def p50(fn: Any, runs: int) -> float:
    """Median of ``runs`` host-timed calls, in milliseconds."""
    return statistics.median(host_timed(fn) for _ in range(runs))


def workloads() -> dict[str, Any]:
    """A digits-sized MLP at batch 64 (64→16→16→10) and a 4096² GEMM, in fp32 on GPU 0."""
    import torch

    dev = torch.device("cuda:0")
    x = torch.randn(64, 64, device=dev)
    weights = [torch.randn(a, b, device=dev) for a, b in ((64, 16), (16, 16), (16, 10))]
    a, b = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)

    def mlp() -> Any:
        h = x
        for w in weights[:-1]:
            h = torch.relu(h @ w)
        return h @ weights[-1]

    return {"mlp_b64": mlp, "gemm_4096": lambda: a @ b}


def warm_up_adequacy(fn: Any, warm_up: Any, idle_s: float = 3.0) -> dict[str, float]:
    """p50 after a warm-up from idle, against p50 after a further 2 s of load.

    Args:
        fn: The work to time.
        warm_up: The warm-up under test, given a function that times one run.
        idle_s: How long the GPU idles first, as between two trials.
    """
    import torch

    torch.cuda.synchronize()
    time.sleep(idle_s)
    spent = time.perf_counter()
    warm_up(lambda: host_timed(fn))
    spent = time.perf_counter() - spent
    after_warm_up = p50(fn, 100)
    end = time.perf_counter() + 2.0
    while time.perf_counter() < end:
        fn()
    torch.cuda.synchronize()
    after_load = p50(fn, 100)
    return {"warm_up_s": round(spent, 3), "p50_after_warm_up_ms": round(after_warm_up, 4),
            "p50_after_2s_load_ms": round(after_load, 4)}  # fmt: skip


def timing_split(fn: Any, runs: int = 300) -> dict[str, float]:
    """Host-timed p50 of ``fn``, its CUDA-event p50 (GPU time), and the host-timed p50 of its
    CUDA graph's replay: launch overhead is the gap between them."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    events = []
    for _ in range(runs):
        start.record()
        fn()
        end.record()
        end.synchronize()
        events.append(start.elapsed_time(end))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return {"host_timed_p50_ms": round(p50(fn, runs), 4),
            "cuda_event_p50_ms": round(statistics.median(events), 4),
            "cuda_graph_p50_ms": round(p50(graph.replay, runs), 4)}  # fmt: skip


def tf32_effect(size: int = 2048) -> dict[str, dict[str, float]]:
    """Relative error of an fp32 matmul against fp64, and its p50, with TF32 off and on."""
    import torch

    a = torch.randn(size, size, device="cuda")
    b = torch.randn(size, size, device="cuda")
    exact = a.double() @ b.double()
    matmul = torch.backends.cuda.matmul
    modern = hasattr(matmul, "fp32_precision")  # allow_tf32 is deprecated where it exists
    before = matmul.fp32_precision if modern else matmul.allow_tf32
    out = {}
    try:
        for on in (False, True):
            if modern:
                matmul.fp32_precision = "tf32" if on else "ieee"
            else:
                matmul.allow_tf32 = on
            error = ((a @ b).double() - exact).abs().max() / exact.abs().max()
            out["on" if on else "off"] = {"max_rel_error": float(error),
                                          "p50_ms": round(p50(lambda: a @ b, 30), 4)}  # fmt: skip
    finally:
        if modern:
            matmul.fp32_precision = before
        else:
            matmul.allow_tf32 = before
    return out


def matmul_times(shape: tuple[int, int, int]) -> dict[str, float | str]:
    """p50 of an ``m×k @ k×n`` matmul in fp16, fp8 (e4m3, ``torch._scaled_mm``) and int8
    (``torch._int_mm``), in milliseconds; a kind that does not run gives its error."""
    import torch

    m, k, n = shape
    dev = torch.device("cuda:0")
    one = torch.tensor(1.0, device=dev)

    def fp16() -> Any:
        a, b = torch.randn(m, k, device=dev).half(), torch.randn(k, n, device=dev).half()
        return lambda: a @ b

    def fp8() -> Any:
        a = torch.randn(m, k, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=dev).to(torch.float8_e4m3fn).t()
        return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.half)

    def int8() -> Any:
        a = torch.randint(-8, 8, (m, k), device=dev, dtype=torch.int8)
        b = torch.randint(-8, 8, (k, n), device=dev, dtype=torch.int8)
        return lambda: torch._int_mm(a, b)

    runs = 20 if m >= 1024 else 200
    out: dict[str, float | str] = {}
    for name, make in (("fp16", fp16), ("fp8", fp8), ("int8", int8)):
        try:
            fn = make()
            for _ in range(5):
                fn()
            out[name] = round(p50(fn, runs), 4)
        except (RuntimeError, TypeError) as e:  # e.g. fp8 before compute capability 8.9
            out[name] = f"{type(e).__name__}: {str(e)[:160]}"
    return out
