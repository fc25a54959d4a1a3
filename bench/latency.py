"""How trustworthy is a latency number? Repeatability, agreement with timeit, and cost.

Run: ``.venv/bin/python -m bench.latency [--repeats 5]``.
Six fixed candidates are each measured ``repeats`` times in fresh ORT sessions, in random
order, as a trial measures them: the session evaluates the test set at the serving batch, then
is timed (see :func:`automl.trials.trial.evaluate_and_measure`). For each it prints the CV of the
reported median, the ratio of our median to a plain ``timeit`` loop over ``session.run`` in a
fresh process, and the time the latency stage cost (evaluation not counted). ``timeit`` reports
a mean of runs, so the ratio of our mean to it is printed too: where a share of runs are slow
(a busy host), the median sits below the mean, and that ratio shows whether our timing loop
itself agrees with ``timeit``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from automl.candidate import ArchConfig, TrainConfig
from automl.catalog import method_for
from automl.inputs.data import load_dataset
from automl.models import build_model
from automl.pipeline.export import export_onnx
from automl.pipeline.quantize import quantize
from automl.pipeline.train import train
from automl.targets import load_target
from automl.trials.trial import evaluate_and_measure

SMALL = ArchConfig("cnn", 32, 2)
LARGE = ArchConfig("resnet", 48, 3, kernel_size=5)
CANDIDATES = {  # name: (architecture, bits, int8_mode, batch)
    "fp32 b1": (SMALL, 32, "static", 1),
    "int8-qdq b1": (SMALL, 8, "static", 1),
    "int8-dynamic b1": (SMALL, 8, "dynamic", 1),
    "fp16 b1": (SMALL, 16, "static", 1),
    "fp32 b32": (SMALL, 32, "static", 32),
    # Tens of ms a run, as the slowest trials of digits-mixed: it stops on time, before min_runs.
    "large int8-qdq b128": (LARGE, 8, "static", 128),
}
TIMEIT = """
import json, sys, timeit, numpy as np, onnxruntime as ort
path, batch, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
options = ort.SessionOptions(); options.intra_op_num_threads = threads
options.inter_op_num_threads = 1
session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
x = np.load(sys.argv[4])[:batch]
feed = {session.get_inputs()[0].name: x}
timer = timeit.Timer(lambda: session.run(None, feed))
number = timer.autorange()[0]  # as many runs as take 0.2 s or more; they also warm up
times = timer.repeat(number=number, repeat=7)
print(json.dumps(min(times) / number * 1000))
"""


def _models(workdir: Path, data) -> dict[str, Path]:
    fp32 = {}
    for arch in dict.fromkeys(arch for arch, *_ in CANDIDATES.values()):  # in a fixed order
        model = build_model(arch, data.input_shape, data.num_classes)
        trained = train(model, data, TrainConfig(epochs=3)).model
        fp32[arch] = export_onnx(trained, data.x_test[:64], workdir / f"{arch.family}.onnx").path
    paths = {}
    for name, (arch, bits, mode, _) in CANDIDATES.items():
        out = workdir / f"{name.replace(' ', '-')}.onnx"
        paths[name] = quantize(fp32[arch], out, bits, calibration=data.x_calib, int8_mode=mode).path
    return paths


def _timeit_ms(path: Path, batch: int, inputs: Path, threads: int) -> float:
    args = [sys.executable, "-c", TIMEIT, str(path), str(batch), str(threads), str(inputs)]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    target = load_target("cpu")
    data = load_dataset("digits", seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        paths = _models(workdir, data)
        order = [name for name in CANDIDATES for _ in range(args.repeats)]
        random.Random(0).shuffle(order)
        medians: dict[str, list[float]] = {name: [] for name in CANDIDATES}
        means: dict[str, list[float]] = {name: [] for name in CANDIDATES}
        costs: dict[str, list[float]] = {name: [] for name in CANDIDATES}
        converged: dict[str, list[bool]] = {name: [] for name in CANDIDATES}
        for name in order:
            timings = {"evaluate": 0.0, "latency": 0.0}
            _, bits, int8_mode, batch = CANDIDATES[name]
            _, latency = evaluate_and_measure(
                paths[name], target, data, batch, timings=timings,
                method=method_for(bits, int8_mode).name,
            )  # fmt: skip
            costs[name].append(timings["latency"])
            medians[name].append(latency.p50_ms)
            means[name].append(latency.mean_ms)
            converged[name].append(latency.converged)
        np.save(workdir / "x.npy", np.resize(data.x_test, (128, *data.input_shape)))
        print(f"{'candidate':<20} {'median ms':>10} {'CV of median':>13} {'ours/timeit':>12}"
              f" {'mean/timeit':>12} {'cost s':>7} {'converged':>9}")  # fmt: skip
        for name, (*_, batch) in CANDIDATES.items():
            reference = _timeit_ms(paths[name], batch, workdir / "x.npy", target.intra_op_threads)
            values = medians[name]
            cv = statistics.stdev(values) / statistics.mean(values)
            print(
                f"{name:<20} {statistics.median(values):10.4f} {100 * cv:12.2f}% "
                f"{statistics.median(values) / reference:12.3f}"
                f" {statistics.median(means[name]) / reference:12.3f}"
                f" {statistics.mean(costs[name]):7.3f}"
                f" {f'{sum(converged[name])}/{len(values)}':>9}"
            )


if __name__ == "__main__":
    main()
