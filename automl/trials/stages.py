"""The model-building stages of one trial, each looked up in the stage cache first.

Entries are keyed by everything that determines them: trained weights by architecture,
training settings, data fingerprint and seed; pruned and fine-tuned weights by those and the
ratio; the fp32 graph by those and the opset; the quantized graph by those, the bit-width and
the int8 mode. The last stage found cached is where the work starts, so a trial whose graph is
cached builds no torch model at all; each ONNX entry carries the model's summary (its sizes and
histories), so the trial records it all the same.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from automl.candidate import OUTPUT_LAYER, TrainConfig
from automl.errors import SpecError
from automl.inputs.onnx_model import OnnxModel
from automl.models import build_model
from automl.pipeline.export import OPSET, ExportResult, export_onnx
from automl.pipeline.layer_evidence import (
    LayerEvidence,
    graph_accuracy,
    keep_order,
    layer_evidence,
)
from automl.pipeline.prune import PruneResult, prune
from automl.pipeline.quantize import QuantizedModel, quantize_method
from automl.pipeline.train import train
from automl.trials.stage_cache import content_key

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from torch import nn

    from automl.candidate import Candidate
    from automl.inputs.data import Dataset
    from automl.inputs.trained_model import TrainedModel
    from automl.targets import Target
    from automl.trials.stage_cache import StageCache


@dataclass
class CachedStages:
    """The stages of one candidate up to its quantized graph; ``reused`` says what was cached.

    ``cache`` None computes every stage. With ``trained``, the model is the user's trained
    one, loaded instead of trained; an ONNX model's graph is taken as the export. ``target``
    is where a per-layer method's evidence is timed. ``drop_budget`` is the study's bound on
    ``accuracy_drop`` and ``accuracy_floor`` its bound on ``accuracy``: the layers kept first
    are those whose quantization alone would break either (see :func:`keep_order`).
    """

    candidate: Candidate
    data: Dataset
    workdir: Path
    seed: int
    threads: int
    device: str
    cache: StageCache | None
    trained: TrainedModel | OnnxModel | None = None
    target: Target | None = None
    drop_budget: float | None = None
    accuracy_floor: float | None = None

    def __post_init__(self) -> None:
        c = self.candidate
        self.reused = dict.fromkeys(("train", "prune", "export", "quantize"), False)
        self.finetune = TrainConfig(
            epochs=c.finetune_epochs,
            lr=c.finetune_lr or c.train.lr / 3,
            weight_decay=c.train.weight_decay,
            batch_size=c.train.batch_size,
            kd_alpha=c.kd_alpha,
            kd_temperature=c.kd_temperature,
        )
        if self.trained is not None:
            # The output layer decides what pruning keeps: another is another pruned model. The
            # data decides the fine-tune, the calibration and the evidence after it.
            layer = getattr(self.trained, "output_layer", None)
            self.train_key = content_key(
                "trained", self.trained.fingerprint(), layer, self.data.fingerprint
            )
        else:
            self.train_key = content_key(
                "train", c.arch, c.train, self.data.fingerprint, self.seed, self.device
            )  # a GPU trains other weights than the CPU does, from the same seed
        # Without pruning there is no fine-tune: its settings and device change nothing.
        finetune = (self.finetune, self.device) if c.pruning_ratio > 0 else None
        self.round_to = self.target.channel_multiple if self.target else None
        self.prune_key = content_key(
            "prune", self.train_key, c.pruning_ratio, finetune, self.round_to
        )
        self.export_key = content_key("export", self.prune_key, OPSET)
        self.method = c.quant_method
        self.evidence_key = content_key(
            "evidence", self.export_key, self.method.cache_tag, getattr(self.target, "name", None),
            c.batch_size, c.graph_optimization,
        )  # fmt: skip
        bounds = (self.drop_budget, self.accuracy_floor)
        kept = (c.keep_fp32, self.evidence_key, *bounds) if c.keep_fp32 else ()
        self.quant_key = content_key(
            "quantize", self.prune_key, self.method.name, self.method.cache_tag, OPSET, *kept
        )
        self._pruned: tuple[PruneResult, dict] | None = None
        self._exported: tuple[ExportResult, dict] | None = None

    def quantized(self, timings: dict[str, float]) -> tuple[QuantizedModel, float, dict]:
        """The quantized graph, its export's difference from torch, and the model's summary."""
        with timed(timings, "quantize"):
            hit = self._cached_onnx("quantize", self.quant_key, "model.onnx")
        if hit is not None:
            path, meta = hit
            self._reuse("train", "prune", "export", "quantize")
            return (
                QuantizedModel(path=path, **meta["quantized"]),
                meta["max_abs_diff"],
                meta["model"],
            )
        exported, built = self.exported(timings)
        layers = self._layers(exported.path, timings)
        with timed(timings, "quantize"):
            quantized = quantize_method(
                exported.path, self.workdir / "model.onnx", self.method.name,
                calibration=self.data.x_calib, keep=layers.get("kept_fp32", ()),
            )  # fmt: skip
            meta = {k: v for k, v in asdict(quantized).items() if k != "path"}
            built = {**built, **({"layers": layers} if layers else {})}
            self._put_onnx("quantize", self.quant_key, quantized.path,
                           {"quantized": meta, "max_abs_diff": exported.max_abs_diff,
                            "model": built})  # fmt: skip
        return quantized, exported.max_abs_diff, built

    def _layers(self, fp32_path: Path, timings: dict[str, float]) -> dict:
        """For a per-layer method keeping layers: its model's evidence, and the layers kept."""
        keep = self.candidate.keep_fp32
        if not keep:
            return {}
        timings.setdefault("layer_evidence", 0.0)
        with timed(timings, "layer_evidence"):
            evidence = self._evidence(fp32_path)
        budget = self._budget(fp32_path)
        order = keep_order([LayerEvidence(**row) for row in evidence], budget)
        return {"evidence": evidence, "kept_fp32": order[:keep], "drop_budget": budget}

    def _budget(self, fp32_path: Path) -> float | None:
        """The accuracy the kept layers may lose: the ``accuracy_drop`` bound, or this model's
        fp32 accuracy above the ``accuracy`` floor, whichever is tighter."""
        if self.accuracy_floor is None:
            return self.drop_budget
        above = graph_accuracy(fp32_path, self.data) - self.accuracy_floor
        return above if self.drop_budget is None else min(above, self.drop_budget)

    def _evidence(self, fp32_path: Path) -> list[dict]:
        """The evidence of every layer (see :func:`layer_evidence`), from the cache or measured."""
        hit = self.cache.get("evidence", self.evidence_key, ".json") if self.cache else None
        if hit is not None:
            try:
                return json.loads(hit.read_text())
            except (OSError, ValueError):
                pass  # evicted meanwhile or unreadable: measure again
        if self.target is None:
            raise SpecError(f"method {self.method.name!r} keeps layers by their time on a target")
        c = self.candidate
        evidence = [asdict(row) for row in layer_evidence(
            fp32_path, self.target, self.data, c.batch_size, self.method.name,
            optimization=c.graph_optimization,
        )]  # fmt: skip
        if self.cache is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
            path = self.workdir / "evidence.json"
            path.write_text(json.dumps(evidence))
            self.cache.put("evidence", self.evidence_key, ".json", path)
        return evidence

    def exported(self, timings: dict[str, float]) -> tuple[ExportResult, dict]:
        """The fp32 ONNX graph and the model's summary, found once; built from the torch model
        on a miss."""
        if self._exported is None:
            self._exported = self._export(timings)
        return self._exported

    def _export(self, timings: dict[str, float]) -> tuple[ExportResult, dict]:
        with timed(timings, "export"):
            hit = self._cached_onnx("export", self.export_key, "model-fp32.onnx")
        if hit is not None:
            self._reuse("train", "prune", "export")
            return ExportResult(hit[0], hit[1]["max_abs_diff"]), hit[1]["model"]
        if isinstance(self.trained, OnnxModel):  # the graph as given: nothing to export
            with timed(timings, "export"):
                return self._given_graph()
        pruned, built = self.pruned(timings)
        with timed(timings, "export"):
            exported = export_onnx(
                pruned.model, self.data.x_test[:64], self.workdir / "model-fp32.onnx"
            )
            self._put_onnx("export", self.export_key, exported.path,
                           {"max_abs_diff": exported.max_abs_diff, "model": built})  # fmt: skip
        return exported, built

    def _given_graph(self) -> tuple[ExportResult, dict]:
        """The ONNX model's graph, prepared (see :meth:`OnnxModel.prepare`), and its summary."""
        assert isinstance(self.trained, OnnxModel)
        if self.candidate.pruning_ratio > 0:
            raise SpecError("an ONNX model cannot be pruned: it has no torch weights")
        path = self.workdir / "model-fp32.onnx"
        built = self.trained.prepare(path)
        self._put_onnx("export", self.export_key, path, {"max_abs_diff": 0.0, "model": built})
        return ExportResult(path, 0.0), built

    def pruned(self, timings: dict[str, float]) -> tuple[PruneResult, dict]:
        """The pruned, fine-tuned torch model and its summary, built once."""
        if self._pruned is None:
            with timed(timings, "train"):
                trained, history = self._train()
            with timed(timings, "prune"):
                pruned = self._prune(trained)
            self._pruned = pruned, _summary(pruned, history)
        return self._pruned

    def _train(self) -> tuple[nn.Module, tuple[dict, ...]]:
        if self.trained is not None:
            return self.trained.build(), ()
        model = build_model(
            self.candidate.arch, self.data.input_shape, self.data.num_classes, seed=self.seed,
            vocab_size=self.data.vocab_size,
        )  # fmt: skip
        cached = self._load("train", self.train_key)
        if cached is not None:
            model.load_state_dict(cached["state_dict"])
            return model.eval(), tuple(cached["history"])
        result = train(
            model, self.data, self.candidate.train,
            seed=self.seed, device=self.device, threads=self.threads,
        )  # fmt: skip
        self._save("train", self.train_key, {"state_dict": result.model.state_dict(),
                                             "history": list(result.history)})  # fmt: skip
        return result.model, result.history

    def _prune(self, trained: nn.Module) -> PruneResult:
        arch = self.candidate.arch
        layer = arch.output_layer if arch is not None else OUTPUT_LAYER  # kept whole
        if self.trained is not None:
            layer = self.trained.pruning_layer
        cached = self._load("prune", self.prune_key)
        if cached is not None:
            # Pruning is deterministic and cheap: redo it to get the shapes, skip the fine-tune.
            shell = prune(
                trained, self.data, self.candidate.pruning_ratio, TrainConfig(epochs=0),
                output_layer=layer, round_to=self.round_to,
            )  # fmt: skip
            shell.model.load_state_dict(cached["state_dict"])
            return PruneResult(**{**_fields(shell), "history": tuple(cached["history"])})
        result = prune(
            trained, self.data, self.candidate.pruning_ratio, self.finetune,
            seed=self.seed, device=self.device, threads=self.threads, output_layer=layer,
            round_to=self.round_to,
        )  # fmt: skip
        self._save("prune", self.prune_key, {"state_dict": result.model.state_dict(),
                                             "history": list(result.history)})  # fmt: skip
        return result

    def _reuse(self, *kinds: str) -> None:
        self.reused.update(dict.fromkeys(kinds, True))

    def _cached_onnx(self, kind: str, key: str, name: str) -> tuple[Path, dict] | None:
        """A cached graph, copied into the workdir as ``name``, and its metadata."""
        if self.cache is None:
            return None
        onnx_path = self.cache.get(kind, key, ".onnx")
        meta_path = self.cache.get(kind, key, ".json")
        if onnx_path is None or meta_path is None:
            return None
        try:
            meta = json.loads(meta_path.read_text())
            if not {"max_abs_diff", "model"} <= meta.keys():
                return None  # written by an older version: recompute
            self.workdir.mkdir(parents=True, exist_ok=True)
            return shutil.copyfile(onnx_path, self.workdir / name), meta
        except (OSError, ValueError, AttributeError):
            return None  # evicted meanwhile or unreadable: recompute

    def _put_onnx(self, kind: str, key: str, onnx_path: Path, meta: dict) -> None:
        if self.cache is None:
            return
        meta_file = self.workdir / f"{kind}.json"
        meta_file.write_text(json.dumps(meta))
        # The graph first: a reader that finds the metadata finds the graph.
        self.cache.put(kind, key, ".onnx", onnx_path)
        self.cache.put(kind, key, ".json", meta_file)

    def _load(self, kind: str, key: str) -> dict | None:
        path = self.cache.get(kind, key, ".pt") if self.cache is not None else None
        if path is None:
            return None
        try:
            entry = torch.load(path, weights_only=True)
        except (OSError, RuntimeError, EOFError):
            return None  # evicted or unreadable: recompute
        self.reused[kind] = True
        return entry

    def _save(self, kind: str, key: str, entry: dict) -> None:
        if self.cache is None:
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.workdir / f"{kind}.pt"
        torch.save(entry, tmp)
        self.cache.put(kind, key, ".pt", tmp)


def _summary(pruned: PruneResult, train_history: tuple[dict, ...]) -> dict:
    """What a trial records of its torch model: sizes before and after pruning, histories."""
    return {
        "macs_before": pruned.macs_before,
        "params_before": pruned.params_before,
        "macs_after": pruned.macs_after,
        "params_after": pruned.params_after,
        "train": list(train_history),
        "finetune": list(pruned.history),
    }


def _fields(result: PruneResult) -> dict:
    """Field values of a frozen dataclass without deep-copying the model."""
    return {name: getattr(result, name) for name in result.__dataclass_fields__}


@contextmanager
def timed(timings: dict[str, float], stage: str) -> Iterator[None]:
    """Add the time the block takes to ``timings[stage]``."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] += time.perf_counter() - start
