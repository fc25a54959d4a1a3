"""OpenVINO against ONNX Runtime on the CPU: latency side by side, with the ratio's spread.

Run: ``.venv/bin/python -m bench.runtimes [--repeats 5] [--rounds 400] [--alternations 9]``.
The models of :mod:`bench.models` (``cnn`` and ``mobilenet_v2`` by default) are built with
random init weights (seed 0; latency does not depend on the weights' values), exported to
ONNX, and quantized by ``int8-static`` (QDQ, U8 activations and S8 weights, calibrated on the
model's data). Every graph is opened on both runtimes with one thread, at each batch (1 and 8),
through the catalog's ``open_session`` (OpenVINO compiles for that batch). In each repeat, a
fresh session per runtime is warmed up and the two are timed in turn, run for run (ABBA:
:func:`automl.pipeline.latency.interleaved_per_sample`), for ``--rounds`` rounds or
``--seconds``; the repeats of a row are spread over the whole run, repeat after repeat of
every row. A row gives each runtime's median ms per batch (median over repeats), OpenVINO ÷
ONNX Runtime (median over repeats, and min-max), and how many compute layers OpenVINO ran in
int8 (its placement).

Then the independent-harness check, for each runtime on one graph (``--check``): the p50 that
automl's :func:`automl.pipeline.latency.measure_latency` records on a target of that runtime
alone, against the median of a plain ``time.perf_counter`` loop over the exported file on the
runtime's own API (same threads and settings), alternated ``--alternations`` times; the
median of the pairs' ratios should be within 5 % of 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from automl.catalog import get_backend
from automl.inputs.data import Dataset, load_dataset
from automl.pipeline.export import export_onnx
from automl.pipeline.latency import interleaved_per_sample, measure_latency
from automl.pipeline.quantize import quantize_method
from automl.pipeline.timers import env_fingerprint, host_timer
from automl.targets import load_target
from bench.models import MODELS

RUNTIMES = ("ort-cpu", "openvino")
WARMUP_SECONDS = 0.1
AGREE = 0.05  # the independent harness's tolerance


def build(name: str, data: Dataset, tmp: Path, methods: list[str]) -> dict[str, Path]:
    """The graphs of model ``name`` (random init weights, seed 0): method -> ONNX file."""
    torch.manual_seed(0)
    model = MODELS[name].factory().eval()
    fp32 = export_onnx(model, data.x_test[:64], tmp / f"{name}-fp32.onnx").path
    graphs = {"fp32": fp32}
    for method in methods:
        if method != "fp32":
            out = tmp / f"{name}-{method}.onnx"
            graphs[method] = quantize_method(fp32, out, method, calibration=data.x_calib).path
    return {method: graphs[method] for method in methods}


def int8_layers(placement: dict[str, int]) -> str:
    """OpenVINO's compute layers in int8, of all of them (``3/4``)."""
    int8 = sum(n for key, n in placement.items() if key.endswith((":u8", ":i8")))
    return f"{int8}/{sum(placement.values())}"


def warm(timer) -> None:
    """Untimed runs for ``WARMUP_SECONDS`` (at least 10)."""
    start, done = time.perf_counter(), 0
    while done < 10 or time.perf_counter() - start < WARMUP_SECONDS:
        timer()
        done += 1


def one_repeat(path: Path, method: str, x: np.ndarray, args: argparse.Namespace) -> tuple:
    """Fresh sessions on both runtimes, timed in turn: (ms per batch per runtime, OpenVINO's
    placement)."""
    timers, placement = [], {}
    for runtime in RUNTIMES:
        backend = get_backend(runtime)
        session = backend.open_session(path, method, threads=1, batch_size=len(x))
        if runtime == "openvino":
            placement = backend.placement(session)
        timers.append((host_timer(session, x), len(x)))
    for timer, _ in timers:
        warm(timer)
    per_sample = interleaved_per_sample(timers, rounds=args.rounds, max_seconds=args.seconds)
    return [ms * len(x) for ms in per_sample], placement


def side_by_side(graphs: dict, inputs: dict, args: argparse.Namespace) -> None:
    """The table of OpenVINO ÷ ONNX Runtime per model, method and batch."""
    rows = [(name, method, batch) for name in graphs for method in args.methods
            for batch in args.batches]  # fmt: skip
    times: dict[tuple, list[list[float]]] = {row: [] for row in rows}
    placements: dict[tuple, dict[str, int]] = {}
    for _ in range(args.repeats):
        for row in rows:
            name, method, batch = row
            x = inputs[name][np.arange(batch) % len(inputs[name])]
            ms, placements[row] = one_repeat(graphs[name][method], method, x, args)
            times[row].append(ms)
    print(f"\n## OpenVINO ÷ ONNX Runtime, 1 thread, {args.repeats} repeats of up to "
          f"{args.rounds} interleaved runs per runtime ({args.seconds} s cap)\n")  # fmt: skip
    print("| model | method | batch | ORT ms | OpenVINO ms | OV ÷ ORT median (min-max) "
          "| OV int8 layers |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        ort_ms, ov_ms = zip(*times[row], strict=True)
        ratios = [ov / ort for ort, ov in times[row]]
        print(f"| {' | '.join(map(str, row))} | {statistics.median(ort_ms):.4f} | "
              f"{statistics.median(ov_ms):.4f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | {int8_layers(placements[row])} |")  # fmt: skip


def plain_timer(runtime: str, path: Path, x: np.ndarray):
    """One run of ``path`` on the runtime's own API, with the settings automl uses: a function
    that runs it once (ONNX Runtime's ``InferenceSession.run``, or OpenVINO's request, its input
    shared rather than copied)."""
    if runtime == "ort-cpu":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        return lambda: session.run(None, feed)
    import openvino as ov

    core = ov.Core()
    model = core.read_model(str(path))
    model.reshape({model.inputs[0]: list(x.shape)})
    config = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "ENABLE_CPU_PINNING": False,
              "INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": 1}  # fmt: skip
    request = core.compile_model(model, "CPU", config).create_infer_request()
    return lambda: request.infer({0: x}, share_inputs=True)  # no copy in, as automl calls it


def plain_p50(runtime: str, path: Path, x: np.ndarray, runs: int) -> float:
    """The median ms of ``runs`` timed runs after warm-up, timed with ``time.perf_counter``."""
    run = plain_timer(runtime, path, x)
    warm(run)
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def harness_check(graphs: dict, inputs: dict, args: argparse.Namespace) -> None:
    """automl's recorded p50 against a plain loop's, per runtime, on the ``--check`` graph."""
    name, method, batch = args.check[0], args.check[1], int(args.check[2])
    path, x = graphs[name][method], inputs[name][np.arange(batch) % len(inputs[name])]
    print(f"\n## Independent harness: {name} {method} batch {batch}, {args.alternations} "
          "alternations (automl's measure_latency, then a plain perf_counter loop)\n")  # fmt: skip
    print("| runtime | automl p50 ms (runs) | plain loop p50 ms | automl ÷ plain median "
          f"(min-max) | within {AGREE:.0%} |")  # fmt: skip
    print("|---|---|---|---|---|")
    for runtime in RUNTIMES:
        target = dataclasses.replace(load_target("cpu"), backends=(runtime,))
        ours, plain, runs = [], [], []
        for _ in range(args.alternations):
            latency = measure_latency(path, target, x, batch, method=method)
            ours.append(latency.p50_ms)
            runs.append(latency.runs)
            plain.append(plain_p50(runtime, path, x, max(latency.runs, 200)))
        ratios = [a / b for a, b in zip(ours, plain, strict=True)]
        ratio = statistics.median(ratios)
        print(f"| {runtime} | {statistics.median(ours):.4f} ({int(statistics.median(runs))}) | "
              f"{statistics.median(plain):.4f} | {ratio:.3f} ({min(ratios):.3f}-"
              f"{max(ratios):.3f}) | {'yes' if abs(ratio - 1) <= AGREE else 'NO'} |")  # fmt: skip


def main() -> None:
    import onnxruntime as ort
    import openvino as ov

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS),
                        default=["cnn", "mobilenet_v2"])  # fmt: skip
    parser.add_argument("--methods", nargs="+", choices=get_backend("openvino").methods,
                        default=["fp32", "int8-static"])  # fmt: skip
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=5, help="fresh sessions per row")
    parser.add_argument("--rounds", type=int, default=400, help="runs per runtime per repeat")
    parser.add_argument("--seconds", type=float, default=1.0, help="cap per row and repeat")
    parser.add_argument("--check", nargs=3, default=["cnn", "int8-static", "1"],
                        metavar=("MODEL", "METHOD", "BATCH"),
                        help="the graph of the independent-harness check")  # fmt: skip
    parser.add_argument("--alternations", type=int, default=9, help="pairs in the check")
    args = parser.parse_args()
    if args.check[0] not in args.models or args.check[1] not in args.methods:
        parser.error("--check must name one of --models and one of --methods")
    cpu = env_fingerprint("CPUExecutionProvider", 1, load_target("cpu"))["cpu_model"]
    print(f"{datetime.date.today()}, {cpu}, onnxruntime {ort.__version__}, "
          f"openvino {ov.__version__}; random init weights (seed 0)")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
        data = {name: load_dataset(MODELS[name].source(Path(tmp))) for name in args.models}
        graphs = {name: build(name, data[name], Path(tmp), args.methods) for name in args.models}
        inputs = {name: data[name].x_test.astype(np.float32) for name in args.models}
        side_by_side(graphs, inputs, args)
        harness_check(graphs, inputs, args)


if __name__ == "__main__":
    main()
