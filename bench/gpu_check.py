"""A prepared check of the GPU path, for a machine with an NVIDIA GPU; writes one JSON file.

Run: ``python -m bench.gpu_check --out gpu_check.json`` (about 1 to 5 minutes on an H100/H200).

It records the environment (GPUs, driver, CUDA, cuDNN, TensorRT, ONNX Runtime build and
providers), trains a small digits CNN on the CPU, and for each method and latency backend
(``automl/catalog/runtimes/``, with the options trials use) it runs: node placement counts
(and whether every compute node ran on the backend's provider), the median of
**device-resident** runs (IO binding, inputs and outputs on the GPU, synchronised), the median
of **end-to-end** runs (the batch copied in, the outputs copied back), accuracy on the GPU
against the graph as written (the CPU provider with no graph rewrites: each Q/DQ node on its
own, layers in fp32), and, where an NVIDIA target matches this GPU, the trial's
own ``measure_latency`` (a CUDA graph where ONNX Runtime captures one). Without the CUDA
provider, the same methods run on that reference instead (no device figures), so the recipes
are still checked. With TensorRT, ``int8-trt-mixed`` keeps the CNN's first layer out of int8:
the engine's per-layer precision and TensorRT's per-layer times are read back onto the source
layers (``mixed`` in the JSON). Then one ``automl study start --target T --n-trials 4`` end to
end, T being the NVIDIA target this machine matches.

Each check is ``pass``, ``fail`` or ``missing`` (a package or the hardware is absent: the
JSON says which, and how to install it). Exit status: 0 all passed, 1 a check failed, 2 none
failed but some could not run. The JSON is written in every case.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from automl.candidate import ArchConfig, TrainConfig
from automl.catalog import CPU, CUDA, TRT, get_backend, get_method
from automl.catalog.runtimes._ort import make_session
from automl.catalog.runtimes._ort_packages import (
    gpu_runtime_versions,
    installed_ort_builds,
    require_single_ort,
)
from automl.catalog.runtimes._placement import check_placement, node_placements, placement_counts
from automl.errors import AutomlError, TrialFailed
from automl.inputs.data import load_dataset
from automl.models import build_model
from automl.pipeline.export import export_onnx
from automl.pipeline.latency import measure_latency
from automl.pipeline.profile import SourceGraph, engine_layer_times
from automl.pipeline.quantize import quantize_method
from automl.pipeline.timers import bound_timers
from automl.pipeline.train import train
from automl.pipeline.trt_engine import check_engine_precision, profile_engine
from automl.targets import detect_gpu_names, is_present, list_targets, load_target
from automl.targets.presence import provider_starts

# (method, backend). fp32 on the CUDA EP runs with TF32 off: true fp32. fp8 needs Hopper.
PLAN = [
    ("fp32", "ort-cuda"),
    ("fp16", "ort-cuda"),
    ("fp16", "ort-tensorrt"),
    ("int8-trt", "ort-tensorrt"),
    ("fp8-trt", "ort-tensorrt"),
]
HOPPER_ONLY = {"fp8-trt"}
BATCHES = (1, 64)
ACCURACY_TOLERANCE = {"fp32": 0.01, "fp16": 0.01, "int8-trt": 0.02, "fp8-trt": 0.03}
INSTALL = "make install-gpu (GPU_EXTRAS=dev,gpu,tensorrt for TensorRT)"
_TIMED_SECONDS = 0.5


class Report:
    """The JSON being built: environment, checks, per-method rows and the study."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {"checks": [], "methods": [], "study": None}

    def check(self, name: str, status: str, detail: str = "") -> bool:
        self.data["checks"].append({"name": name, "status": status, "detail": detail})
        print(f"[{status:7}] {name}{': ' + detail if detail else ''}", flush=True)
        return status == "pass"

    def exit_status(self) -> int:
        statuses = {c["status"] for c in self.data["checks"]}
        return 1 if "fail" in statuses else 2 if "missing" in statuses else 0


def _run(command: list[str], timeout: float = 30.0) -> str:
    """A command's stdout, or ``""`` when it is missing or fails."""
    if shutil.which(command[0]) is None:
        return ""
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def environment(report: Report) -> dict[str, Any]:
    """Record the machine and its GPU stack, and check that one ORT build with CUDA is here."""
    import onnxruntime as ort

    if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from the nvidia-* wheels, if present
        try:
            ort.preload_dlls()
        except (OSError, RuntimeError) as e:
            report.check("preload CUDA/cuDNN libraries", "fail", str(e))
    query = "index,name,uuid,driver_version,mig.mode.current"
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "nvidia_smi": _run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"]),
        "gpu_names": detect_gpu_names(),
        "ort_builds": installed_ort_builds(d.metadata["Name"] for d in metadata.distributions()),
        "onnxruntime": ort.__version__,
        "ort_providers": ort.get_available_providers(),
        "ort_providers_starting": _providers(),
        "trial_versions": gpu_runtime_versions(),  # CUDA, cuDNN and TensorRT, as trials record
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "targets_present": [t.name for t in list_targets() if is_present(t)],
    }
    try:
        import torch

        env["torch"] = torch.__version__
        env["torch_cuda"] = torch.version.cuda
        env["torch_cuda_available"] = torch.cuda.is_available()
        env["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except ImportError as e:
        env["torch"] = f"missing: {e}"
    report.data["environment"] = env
    try:
        require_single_ort()
        report.check("one ONNX Runtime build", "pass", ", ".join(env["ort_builds"]))
    except AutomlError as e:  # two builds: the message has the fix
        report.check("one ONNX Runtime build", "fail", str(e))
    gpus = env["gpu_names"]
    report.check("NVIDIA GPU", "pass" if gpus else "missing", ", ".join(gpus) or "none found")
    for provider in (CUDA, TRT):
        starts = provider in env["ort_providers_starting"]
        how = "" if starts else f"this onnxruntime has no {provider}; install: {INSTALL}"
        if not starts and provider in env["ort_providers"]:  # e.g. libnvinfer cannot load
            how = f"{provider} is in this build, but no session starts on it; install: {INSTALL}"
        report.check(f"{provider} starts", "pass" if starts else "missing", how)
    return env


def prepare_model(workdir: Path) -> tuple[Path, Any]:
    """A trained digits CNN (trained on the CPU) exported to ONNX, and the dataset."""
    data = load_dataset("digits", seed=0)
    model = build_model(ArchConfig("cnn", 16, 2), data.input_shape, data.num_classes, seed=0)
    trained = train(model, data, TrainConfig(epochs=4), seed=0).model
    return export_onnx(trained, data.x_test[:64], workdir / "model-fp32.onnx").path, data


def _accuracy(session: Any, x: np.ndarray, y: np.ndarray) -> float:
    name = session.get_inputs()[0].name
    logits = np.concatenate(
        [session.run(None, {name: x[i : i + 64]})[0] for i in range(0, len(x), 64)]
    )
    return float(np.mean(logits.argmax(axis=1) == y))


def _p50(run_once: Any) -> float:
    """Median milliseconds of ``run_once`` over about half a second, after a warm-up."""
    for _ in range(20):
        run_once()
    times: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < _TIMED_SECONDS and len(times) < 5000:
        t0 = time.perf_counter_ns()
        run_once()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(times))


def _cpu_p50(session: Any, batch: np.ndarray) -> float:
    feed = {session.get_inputs()[0].name: batch}
    return _p50(lambda: session.run(None, feed))


def method_row(
    report: Report, method: str, backend_name: str, fp32: Path, data: Any, workdir: Path
) -> dict[str, Any]:
    """Quantize by ``method``, run it on the backend and as written (see above), and check it."""
    backend = get_backend(backend_name)
    provider = backend.provider if backend.provider in _providers() else CPU
    name = f"{method} on {provider}"
    row: dict[str, Any] = {"method": method, "backend": backend.name, "provider": provider}
    out = workdir / "quantized" / f"{method}.onnx"
    path = quantize_method(fp32, out, method, calibration=data.x_calib).path
    unsafe = get_method(method).unsafe_rewrites
    # Not the CPU's fused int8 kernels: on CPUs without VNNI their S8S8 products saturate
    # (int8-trt's digits CNN scores 0.59 there, 0.92 as written).
    reference = make_session(path, [CPU], 1, optimization="disable")
    row["accuracy_as_written"] = _accuracy(reference, data.x_test, data.y_test)
    session = reference
    if provider != CPU:
        options = backend.provider_options(method, workdir / "tensorrt")
        session = make_session(path, backend.providers, 1, options, unsafe)
        if session.get_providers()[0] != provider:  # it could not start: not a placement fault
            raise AutomlError(f"the session runs on {session.get_providers()[0]}, not {provider}")
    placements = node_placements(session)
    row["placement"] = placement_counts(placements)
    try:
        check_placement(placements, provider, backend.placed_ops if provider != CPU else ())
        report.check(f"{name}: compute nodes placed", "pass", json.dumps(row["placement"]))
    except TrialFailed as e:  # it names the stray nodes
        report.check(f"{name}: compute nodes placed", "fail", str(e))
    row["accuracy"] = _accuracy(session, data.x_test, data.y_test)
    gap = abs(row["accuracy"] - row["accuracy_as_written"])
    bound = ACCURACY_TOLERANCE[method]
    report.check(
        f"{name}: accuracy against the graph as written",
        "pass" if gap <= bound else "fail",
        f"{row['accuracy']:.4f} vs {row['accuracy_as_written']:.4f} (bound {bound})",
    )
    for batch_size in BATCHES:
        batch = np.ascontiguousarray(data.x_test[np.arange(batch_size) % len(data.x_test)])
        if provider == CPU:
            row[f"end_to_end_p50_ms_b{batch_size}"] = _cpu_p50(session, batch)
            continue
        timers = bound_timers(session, batch, backend.device)
        row[f"device_p50_ms_b{batch_size}"] = _p50(timers.device_resident)
        row[f"end_to_end_p50_ms_b{batch_size}"] = _p50(timers.end_to_end)
    if provider != CPU:
        row["trial_latency"] = _trial_latency(report, name, method, path, data, workdir)
    if backend.provider == TRT:
        row["engine_precision"] = _engine_precision(report, name, method, path, data)
    return row


def _engine_precision(
    report: Report, name: str, method: str, path: Path, data: Any
) -> dict[str, Any] | None:
    """What TensorRT's engine of the graph, built as a trial's, runs its compute layers in."""
    options = get_backend("ort-tensorrt").provider_options(method).get(TRT, {})
    try:
        precisions = check_engine_precision(path, method, options, 64, data.input_shape, None)
    except TrialFailed as e:  # it says what the engine ran instead
        report.check(f"{name}: engine precision", "fail", str(e))
        return None
    if precisions is None:
        report.check(f"{name}: engine precision", "missing", f"no tensorrt; install: {INSTALL}")
        return None
    report.check(f"{name}: engine precision", "pass", json.dumps(asdict(precisions)))
    return asdict(precisions)


def mixed_layers(report: Report, fp32: Path, data: Any, workdir: Path) -> dict[str, Any] | None:
    """``int8-trt-mixed`` keeping the CNN's first layer: in TensorRT's engine that layer must run
    outside int8 and the others in it, and TensorRT's profiler must time every layer."""
    name = "int8-trt-mixed on TensorrtExecutionProvider"
    if TRT not in _providers() or importlib.util.find_spec("tensorrt") is None:
        report.check(name, "missing", f"needs TensorRT and its Python package; install: {INSTALL}")
        return None
    source = SourceGraph(fp32)
    kept = next(iter(source.layers))
    out = workdir / "quantized" / "int8-trt-mixed-first.onnx"
    path = quantize_method(fp32, out, "int8-trt-mixed", calibration=data.x_calib, keep=[kept]).path
    options = get_backend("ort-tensorrt").provider_options("int8-trt-mixed").get(TRT, {})
    precision = check_engine_precision(path, "int8-trt-mixed", options, 64, data.input_shape, None)
    ran = precision.layers if precision is not None else {}
    holds = ran.keys() == source.layers.keys() and "int8" not in ran[kept].split("+")
    holds &= all(ran.get(layer) == "int8" for layer in source.layers if layer != kept)
    report.check(f"{name}: the kept layer {kept} runs outside int8, the others in int8",
                 "pass" if holds else "fail", json.dumps(ran))  # fmt: skip
    batch = np.ascontiguousarray(data.x_test[:64])
    times = engine_layer_times(source, profile_engine(path, options, batch))
    timed = all(times[layer] > 0 for layer in source.layers)
    report.check(f"{name}: TensorRT's profiler times every layer",
                 "pass" if timed else "fail", json.dumps(times))  # fmt: skip
    return {"kept": kept, "precisions": ran, "layer_ms": times}


def _trial_latency(
    report: Report, name: str, method: str, path: Path, data: Any, workdir: Path
) -> dict[str, Any] | None:
    """The trial's own measurement at batch 64, on the NVIDIA target this GPU is, if any."""
    targets = [t for t in _present_nvidia() if method in load_target(t).methods]
    if not targets:
        report.check(f"{name}: trial latency", "missing", "no NVIDIA target matches this GPU")
        return None
    latency = measure_latency(
        path, load_target(targets[0]), data.x_test, 64, method=method,
        cache_dir=workdir / "tensorrt",
    )  # fmt: skip
    keys = ("p50_ms", "end_to_end_p50_ms", "timing", "backend", "runs", "converged")
    record = {k: getattr(latency, k) for k in keys}
    record["cuda_graph_refused"] = latency.env.get("cuda_graph_refused")
    report.check(f"{name}: trial latency", "pass", json.dumps(record))
    return record


def _providers() -> list[str]:
    """The providers of this onnxruntime that a session starts on (TensorRT needs libnvinfer)."""
    import onnxruntime as ort

    return [p for p in ort.get_available_providers() if provider_starts(p)]


def _present_nvidia() -> list[str]:
    return [t.name for t in list_targets() if t.kind == "cuda" and is_present(t)]


def run_study(report: Report, target: str | None, workdir: Path) -> None:
    """``automl study start --target T --n-trials 4`` in a fresh folder and storage."""
    if target is None:
        report.check("study end to end", "missing", "no NVIDIA target matches this machine")
        return
    command = [sys.executable, "-m", "automl", "study", "start", "--target", target]
    space = "digits-trt" if TRT in _providers() else "digits-gpu"
    command += ["--n-trials", "4", "--space", space]
    command += ["--name", "gpu-check", "--storage", f"sqlite:///{workdir}/study.db"]
    env = {**os.environ, "AUTOML_ARTIFACTS_DIR": str(workdir / "artifacts")}
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=240, cwd=workdir, env=env
        )
        rc, tail = done.returncode, (done.stdout + done.stderr)[-3000:]
    except subprocess.TimeoutExpired as e:
        rc, tail = None, f"timed out after {e.timeout} s"
    report.data["study"] = {
        "command": " ".join(["automl", *command[3:]]),
        "rc": rc,
        "seconds": round(time.perf_counter() - start, 1),
        "output_tail": tail,
    }
    report.check("study end to end", "pass" if rc == 0 else "fail", f"rc={rc}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"))
    parser.add_argument("--no-study", action="store_true", help="skip the end-to-end study")
    args = parser.parse_args(argv)
    report = Report()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        workdir = Path(tmp)
        try:
            env = environment(report)
            fp32, data = prepare_model(workdir)
            hopper = any("H100" in g or "H200" in g for g in env["gpu_names"])
            for method, backend in PLAN:
                provider = get_backend(backend).provider
                usable = env["ort_providers_starting"]
                if method in HOPPER_ONLY and not hopper and CUDA in usable:
                    report.check(f"{method} on {provider}", "missing", "needs an H100 or H200")
                    continue
                if provider not in usable and CUDA in usable:
                    report.check(f"{method} on {provider}", "missing", f"install: {INSTALL}")
                    continue
                try:
                    report.data["methods"].append(
                        method_row(report, method, backend, fp32, data, workdir)
                    )
                except Exception as e:  # one method's failure must not hide the others'
                    report.check(f"{method} on {provider}", "fail", f"{type(e).__name__}: {e}")
            try:
                report.data["mixed"] = mixed_layers(report, fp32, data, workdir)
            except Exception as e:  # as a method's: recorded, and the rest goes on
                report.check("int8-trt-mixed", "fail", f"{type(e).__name__}: {e}")
            if not args.no_study:
                nvidia = _present_nvidia()
                run_study(report, nvidia[0] if nvidia else None, workdir)
        except ModuleNotFoundError as e:  # a machine without automl's dependencies: no finding
            report.check("gpu_check", "missing", f"{e}: install automl's dependencies first")
        except Exception as e:  # a broken environment is a result too: record it, write the JSON
            report.check("gpu_check", "fail", f"{type(e).__name__}: {e}")
    report.data["seconds"] = round(time.perf_counter() - started, 1)
    report.data["exit_status"] = report.exit_status()
    args.out.write_text(json.dumps(report.data, indent=2, default=str) + "\n")
    print(f"wrote {args.out}; exit status {report.data['exit_status']}", flush=True)
    return report.data["exit_status"]


if __name__ == "__main__":
    sys.exit(main())
