"""One trial end to end: candidate + target → a quantized ONNX artifact and its metrics."""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import onnxruntime as ort
import torch

from automl.candidate import Batching
from automl.catalog import LAYER_OPS, TRT
from automl.catalog.runtimes._ort_packages import gpu_runtime_versions, load_gpu_libraries
from automl.errors import TrialFailed
from automl.metrics import REGISTRY
from automl.pipeline.evaluate import Evaluation, evaluate
from automl.pipeline.latency import Latency, LatencyBudget, measure_latency, per_sample_in_turn
from automl.pipeline.profile import SourceGraph, quantizes_nothing
from automl.pipeline.serving_floor import busy_host
from automl.pipeline.timers import backend_session
from automl.pipeline.trt_engine import ENGINE_RECORD, check_engine_precision
from automl.records import BUILT, QUANTIZATION_GAIN
from automl.targets.gpus import measurement_lock
from automl.targets.presence import gpu_identity
from automl.trials.baseline import BaselineFigures, is_unmodified, measure_baseline
from automl.trials.deployment import Deployment
from automl.trials.quant_gain import measure_gain
from automl.trials.screen import RateToBeat, serve_screened
from automl.trials.stage_cache import content_key
from automl.trials.stages import CachedStages, timed

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from automl.candidate import Candidate
    from automl.catalog import Method
    from automl.inputs.data import Dataset
    from automl.inputs.onnx_model import OnnxModel
    from automl.inputs.trained_model import TrainedModel
    from automl.pipeline.quantize import QuantizedModel
    from automl.pipeline.trt_engine import EnginePrecision
    from automl.search.objectives import Constraint
    from automl.search.spec import Serving
    from automl.targets import Target
    from automl.trials.stage_cache import StageCache

STAGES = ("train", "prune", "export", "quantize", "evaluate", "latency")


@dataclass(frozen=True)
class TrialOutcome:
    """The deployable artifact, every metric, stage timings and the environment fingerprint."""

    artifact: Path
    metrics: dict[str, float]
    timings: dict[str, float]
    latency: dict
    env: dict
    history: dict
    reused: dict[str, bool]
    serving: dict | None = None  # the load runs of a serving study (see measure_serving)
    quantization: dict | None = None  # a quantized trial's gain over fp32 (see measure_gain)


def run_trial(
    candidate: Candidate,
    target: Target,
    data: Dataset,
    workdir: Path | str,
    *,
    seed: int = 0,
    threads: int = 1,
    cache: StageCache | None = None,
    constraints: Sequence[Constraint] = (),
    trained: TrainedModel | OnnxModel | None = None,
    baseline_batch: int = 1,
    serving: Serving | None = None,
    screen: Callable[[dict[str, float]], RateToBeat | None] | None = None,
) -> TrialOutcome:
    """Train, prune, fine-tune, export, quantize, evaluate and measure one candidate.

    With a ``cache``, trained weights, pruned and fine-tuned weights, fp32 graphs and quantized
    graphs are reused when a previous trial produced them from the same inputs; a trial whose
    graph is cached builds no torch model. Evaluation and latency are always run.

    Args:
        candidate: The point of the search space.
        target: Where latency is measured; its hardware must be present.
        data: The split dataset.
        workdir: Folder for the ONNX files of this trial.
        seed: Seed of initialisation, training and fine-tuning.
        threads: Torch threads for training.
        cache: Stage cache, or None to compute everything.
        constraints: The study's constraints; those on latency stop the timing of a candidate
            once its runs prove it infeasible (see :class:`LatencyBudget`), and those on
            ``accuracy_drop`` and ``accuracy`` order the layers a per-layer method keeps.
        trained: The user's trained model, loaded in place of training; the unmodified model
            is then measured beside the candidate (see :mod:`automl.trials.baseline`), and
            ``speedup``, ``speedup_same_batch``, ``accuracy_drop`` and ``size_ratio``
            are recorded.
        baseline_batch: The baseline's serving batch.
        serving: A serving scenario: the graph is then also served under load with the
            candidate's batching settings (see :func:`automl.pipeline.serving.measure_serving`),
            and ``serving_p99_ms`` (and ``max_rate_rps``) recorded.
        screen: Given the metrics so far, the max rate the trial must beat to reach the front
            (see :mod:`automl.trials.screen`), or ``None``. A trial whose isolated latency
            bounds its max rate below it runs no load, and one whose first load run, at that
            rate, breaks the SLO runs no more; the outcome's ``serving`` then holds the reason
            as ``screened``. Load runs measured while the host was too busy (the harness's
            floor above its limit, twice: see :func:`automl.pipeline.serving_floor.busy_host`)
            fail the trial: its figures would be the host's, not the deployment's.

    Returns:
        The quantized artifact and its metrics: ``accuracy`` on the validation split (what the
        search sees) and ``test_accuracy`` on the test split (what the report shows beside it).
        A quantized trial also records ``quantization_gain``, its own fp32 graph timed beside
        it (see :mod:`automl.trials.quant_gain`).

    Raises:
        TargetUnavailable: Before any work, when the target's hardware is absent or the
            runtime cannot start here (see :class:`automl.trials.deployment.Deployment`).
        UnsupportedQuantization: The bit-width does not apply to this model.
        TrialFailed: A stage could not produce a valid candidate, or the host was too busy to
            measure it under load.
    """
    deployment = Deployment.resolve(target, candidate)
    unmodified, target = target, deployment.target
    stages = CachedStages(
        candidate, data, Path(workdir), seed, threads, _torch_device(target), cache, trained,
        target, drop_budget(constraints), accuracy_floor(constraints),
    )  # fmt: skip
    timings = dict.fromkeys(STAGES, 0.0)
    quantized, onnx_diff, built = stages.quantized(timings)
    engines = engine_folder(quantized.path, candidate.batch_size, target, quantized.method, cache)
    with engines as engine_dir:
        (evaluation, test_evaluation), latency = evaluate_and_measure(
            quantized.path, target, data, candidate.batch_size, timings=timings,
            budgets=latency_budgets(constraints, candidate.batch_size), method=quantized.method,
            engine_dir=engine_dir, optimization=candidate.graph_optimization,
        )  # fmt: skip
        precision = _engine_precision(quantized.path, target, quantized.method,
                                      candidate.batch_size, data.input_shape, engine_dir)  # fmt: skip
    metrics = {
        "accuracy": evaluation.accuracy,
        "test_accuracy": test_evaluation.accuracy,
        **latency.metrics,  # every registered latency quantile (see automl.metrics)
        "size_mb": quantized.size_bytes / 1e6,
        "params": float(built["params_after"]),
        "macs": float(built["macs_after"]),
        "params_unpruned": float(built["params_before"]),
        "macs_unpruned": float(built["macs_before"]),
    }
    gain = None
    if quantized.method != "fp32":
        gain = measure_gain(stages, quantized, latency, target, data, timings)
        metrics[QUANTIZATION_GAIN] = gain["gain"]
    baseline = None
    if trained is not None:
        baseline = _baseline(
            stages, unmodified, data, metrics, baseline_batch, timings, quantized
        )  # the user's model as deployed today: on the target's own runtime
        metrics.update(baseline.compare(metrics))
    served = None
    if serving is not None:
        batching = candidate.serving or Batching(max_batch=candidate.batch_size)
        served = serve_screened(
            quantized.path, target, data.x_test, batching, latency.p50_ms, serving,
            batch_size=candidate.batch_size, method=quantized.method,
            to_beat=screen(metrics) if screen and serving.rate_rps == "max" else None,
            optimization=candidate.graph_optimization, seed=seed,
        )  # fmt: skip
        if reason := busy_host(served["record"]):  # never a clean measurement, nor a front point
            raise TrialFailed(reason)
        metrics.update(served["metrics"])
    return TrialOutcome(
        artifact=quantized.path,
        metrics=metrics,
        timings=timings,
        latency={**latency.as_dict(), "method": quantized.method},
        env=latency.env,
        history={
            "train": built["train"],
            "finetune": built["finetune"],
            "confusion": [list(row) for row in evaluation.confusion],
            "test_confusion": [list(row) for row in test_evaluation.confusion],
            "onnx_max_abs_diff": onnx_diff,
            "deployment": deployment.as_dict(),
            **({"layers": built["layers"]} if "layers" in built else {}),
            BUILT: what_was_built(
                stages.method, quantized, _fp32_graph(stages, quantized, timings)
            ),
            **({"baseline": asdict(baseline)} if baseline else {}),
            **(
                {"engine_precision": precision.counts, "engine_layers": precision.layers}
                if precision is not None
                else {}
            ),
        },
        reused=stages.reused,
        serving=served and served["record"],
        quantization=gain,
    )


def evaluate_and_measure(
    model_path: Path,
    target: Target,
    data: Dataset,
    batch_size: int,
    *,
    timings: dict[str, float],
    method: str,
    budgets: Sequence[LatencyBudget] = (),
    engine_dir: Path | None = None,
    optimization: str = "all",
) -> tuple[tuple[Evaluation, Evaluation], Latency]:
    """Accuracy of an ONNX model at the serving batch, then its latency.

    Both run on the backend of ``method`` on the target, so accuracy is the deployed
    runtime's. The validation split's accuracy is what the search optimises; the test split's
    is only reported, so that the front's accuracies are not selected on the figures it shows.
    Evaluation runs both at ``batch_size``, so the session is warm by then: on the CPU the
    latency stage times that session, with one more untimed run (only the last test batch may
    be shorter), or its full warm-up where the test set is smaller than a batch. A GPU backend
    times a session of its own, bound to the device at fixed addresses (a CUDA graph where
    ONNX Runtime can capture one).

    Args:
        model_path: The ONNX file.
        target: Where it runs; its hardware must be present.
        data: The dataset; its validation and test splits are evaluated, and its test inputs
            fed to the timed runs.
        batch_size: The serving batch.
        timings: Seconds of ``evaluate`` and ``latency`` are added here.
        method: The graph's quantization method; it picks the target's backend.
        budgets: Latency budgets that stop the timing early (see :class:`LatencyBudget`).
        engine_dir: Where TensorRT keeps its engines (the stage cache's).
        optimization: ONNX Runtime's graph optimisation level of every session.
    """
    with timed(timings, "evaluate"):
        session = backend_session(
            model_path, target, method, engine_dir, optimization=optimization, batch_size=batch_size
        )
        # At the serving batch: dynamic int8 scales depend on the batch.
        evaluations = tuple(
            evaluate(session, x, y, num_classes=data.num_classes, batch_size=batch_size)
            for x, y in ((data.x_val, data.y_val), (data.x_test, data.y_test))
        )
    on_device = target.backend_for(method).on_device
    warm = {"warmup_runs": 1} if len(data.x_test) >= batch_size and not on_device else {}
    timed_model = model_path if on_device else session
    with timed(timings, "latency"), measurement_lock(target):  # alone on a shared GPU
        latency = measure_latency(
            timed_model, target, data.x_test, batch_size, method=method, cache_dir=engine_dir,
            budgets=budgets, optimization=optimization, **warm,
        )  # fmt: skip
    return evaluations, latency


def _baseline(
    stages: CachedStages,
    target: Target,
    data: Dataset,
    metrics: dict[str, float],
    batch_size: int,
    timings: dict[str, float],
    quantized: QuantizedModel,
) -> BaselineFigures:
    """The baseline's figures, beside the trial's (its own, where it deploys the same model);
    where both time on the host, the speedup's two figures run in turn."""
    own = None
    if is_unmodified(stages.candidate):
        own = (metrics["accuracy"], metrics["size_mb"], metrics["latency_per_sample_ms"])

    def measure(path: Path, batch: int) -> tuple[float, float]:
        (val, _), latency = evaluate_and_measure(
            path, target, data, batch, timings=dict.fromkeys(STAGES, 0.0), method="fp32"
        )  # the baseline is the unquantized graph
        return val.accuracy, latency.per_sample_ms

    candidate = stages.candidate

    def interleave(path: Path) -> list[float] | None:
        return per_sample_in_turn(target, data.x_test, [
            (path, batch_size, "fp32", "all"),  # the baseline, as measured above
            (quantized.path, candidate.batch_size, quantized.method, candidate.graph_optimization),
        ])  # fmt: skip

    return measure_baseline(stages, batch_size, timings, measure, own, interleave)


def latency_budgets(constraints: Sequence[Constraint], batch_size: int) -> list[LatencyBudget]:
    """The latency constraints among ``constraints`` as per-batch budgets at ``batch_size``:
    each bound from above on a registered latency quantile's time (see
    :meth:`automl.metrics.Metric.budget_ms`)."""
    budgets = []
    for c in constraints:
        metric = REGISTRY.get(c.metric)
        ms = metric.budget_ms(c.op, c.bound, batch_size) if metric else None
        if ms is not None:
            budgets.append(LatencyBudget(ms, metric.quantile))
    return budgets


def drop_budget(constraints: Sequence[Constraint]) -> float | None:
    """The tightest bound on ``accuracy_drop`` among ``constraints``, if any."""
    bounds = [c.bound for c in constraints if c.metric == "accuracy_drop" and c.op == "<="]
    return min(bounds, default=None)


def accuracy_floor(constraints: Sequence[Constraint]) -> float | None:
    """The tightest lower bound on ``accuracy`` among ``constraints``, if any."""
    bounds = [c.bound for c in constraints if c.metric == "accuracy" and c.op == ">="]
    return max(bounds, default=None)


def what_was_built(method: Method, quantized: QuantizedModel, fp32_path: Path) -> dict:
    """What a trial deployed (see :class:`automl.candidate.Built`): the method of its graph,
    ``fp32`` where the per-layer ``method`` kept every layer, and the widths of the hidden
    layers of its fp32 graph ``fp32_path``."""
    deployed = quantized.method
    if method.per_layer and quantizes_nothing(SourceGraph(quantized.path)):
        deployed = "fp32"
    return {"method": deployed, "widths": hidden_widths(fp32_path)}


def _fp32_graph(stages: CachedStages, quantized: QuantizedModel, timings: dict) -> Path:
    """The trial's fp32 graph: the deployed one where it is fp32 (no export is then fetched)."""
    return quantized.path if quantized.method == "fp32" else stages.exported(timings)[0].path


def hidden_widths(fp32_path: Path) -> list[int]:
    """The output channels of each layer (Conv, Gemm, MatMul with a weight) of an fp32 graph,
    in graph order, less the last: the output layer, whose width is the number of classes."""
    import onnx

    graph = onnx.load(str(fp32_path), load_external_data=False).graph
    weights = {w.name: list(w.dims) for w in graph.initializer}
    widths = []
    for node in graph.node:
        dims = next((weights[i] for i in node.input[1:2] if i in weights), None)
        if node.op_type not in LAYER_OPS or dims is None or len(dims) < 2:
            continue
        transposed = node.op_type == "Gemm" and any(
            a.name == "transB" and a.i for a in node.attribute
        )
        widths.append(dims[0] if node.op_type == "Conv" or transposed else dims[-1])
    return widths[:-1]


def _torch_device(target: Target) -> str:
    if target.kind == "cuda" and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def _engine_precision(
    path: Path,
    target: Target,
    method: str,
    batch_size: int,
    shape: tuple[int, ...],
    engine_dir: Path | None,
) -> EnginePrecision | None:
    """On TensorRT, what the graph's engine runs its compute layers in (see
    :func:`automl.pipeline.trt_engine.check_engine_precision`); None elsewhere."""
    backend = target.backend_for(method)
    if TRT not in backend.providers:
        return None
    options = backend.provider_options(method).get(TRT, {})
    return check_engine_precision(path, method, options, batch_size, shape, engine_dir)


def engine_folder(
    model_path: Path, batch_size: int, target: Target, method: str, cache: StageCache | None
) -> AbstractContextManager[Path | None]:
    """TensorRT's engine folder for this graph from the stage cache (see
    :meth:`StageCache.engine_folder`); none without a cache or off TensorRT. An engine runs
    only on the GPU model and the runtime versions that built it, with its builder options."""
    backend = target.backend_for(method)
    if cache is None or TRT not in backend.providers:
        return nullcontext()
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()
    gpu = (gpu_identity(target) or {}).get("name")
    load_gpu_libraries()  # the versions are asked of the libraries that will build the engine
    runtimes = {"onnxruntime": ort.__version__, **gpu_runtime_versions()}
    options = backend.provider_options(method)
    return cache.engine_folder(
        content_key(digest, batch_size, gpu, runtimes, options, ENGINE_RECORD)
    )
