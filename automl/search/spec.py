"""The study spec: what to search, where to measure, and what to optimise."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from automl.candidate import MAX_LOAD_REQUESTS
from automl.errors import SpecError, validation_details
from automl.plugins import PLUGIN
from automl.records import BASELINE_METRICS, SERVING_METRICS
from automl.search.numbers import number_not_text, numbers_not_text
from automl.search.objectives import Constraint, Objective

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")  # whole name: see fullmatch
# NumPy's legacy RandomState, which Optuna's samplers and scikit-learn's splits use, takes seeds
# in [0, 2**32).
MAX_SEED = 2**32 - 1
# The most trials a study may ask for, and the longest it may run: beyond them a number is a typo.
MAX_N_TRIALS = 1_000_000
MAX_TIMEOUT_S = 366 * 24 * 3600.0
# The most deployments the variant sampler lists for a model: more trials per model find none.
MAX_DEPLOYMENTS = 4096
# The shipped spaces of a trained model's study and of an ONNX model's: deployment knobs only.
TRAINED_SPACE = "trained-model"
ONNX_SPACE = "onnx-model"


class TrainedModel(BaseModel):
    """A model the user trained: ``factory`` builds it, ``weights`` is its state dict; or an
    ONNX graph, ``weights`` ending in ``.onnx`` with no ``factory``, deployed as it is.

    ``batch_size`` is the baseline's serving batch (default: the space's smallest);
    ``output_layer`` the layer giving the logits, which pruning keeps whole (found by running
    the model when it is not given); ``output`` the key or index of the logits in what the
    model returns, for models that return a ``ModelOutput``, a dict or a tuple;
    ``expected_accuracy`` the validation accuracy the user expects of it: a baseline clearly
    below it is warned of.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    factory: str | None = Field(
        default=None, description="package.module:function returning the nn.Module"
    )
    weights: str = Field(
        description="path to the state_dict saved with torch.save, or to an .onnx graph"
    )
    batch_size: int | None = Field(default=None, ge=1)
    output_layer: str | None = Field(
        default=None, description="the layer giving the logits; found when left out"
    )
    output: str | int | None = Field(
        default=None, description="key or index of the logits in the model's output"
    )
    expected_accuracy: float | None = Field(default=None, gt=0, le=1)
    _whole = numbers_not_text("batch_size", whole=True)
    _real = numbers_not_text("expected_accuracy", whole=False)

    @field_validator("batch_size")
    @classmethod
    def _batch(cls, batch: int | None) -> int | None:
        """A serving batch no larger than a space's may be (a huge one would fill the memory)."""
        from automl.settings import get_settings

        high = get_settings().knob_bounds["batch_size"][1]
        if batch is not None and batch > high:
            raise ValueError(
                f"must be at most {high:g}, the largest batch_size (AUTOML_KNOB_BOUNDS)"
            )
        return batch

    @field_validator("factory")
    @classmethod
    def _factory(cls, factory: str | None) -> str | None:
        if factory is not None and not PLUGIN.fullmatch(factory):
            raise ValueError(f"factory {factory!r} must look like 'package.module:function'")
        return factory

    @model_validator(mode="after")
    def _kind(self) -> TrainedModel:
        if self.is_onnx and (self.factory is not None or self.output_layer is not None):
            raise ValueError(
                "an .onnx model is a graph: it takes no factory and no output_layer (nothing "
                "of it is pruned)"
            )
        if not self.is_onnx and self.factory is None:
            raise ValueError(
                "a trained model needs its factory (package.module:function) beside its "
                "weights, unless the weights are an .onnx graph"
            )
        return self

    @property
    def is_onnx(self) -> bool:
        """Whether the model is an ONNX graph rather than a factory and its state dict."""
        return self.weights.lower().endswith(".onnx")

    @property
    def label(self) -> str:
        """How messages name the model: its factory, or its ONNX file."""
        return self.factory or self.weights


class Serving(BaseModel):
    """A serving scenario: requests arrive as a Poisson process and are judged by their p99.

    ``rate_rps`` is the offered rate, or ``max`` to find the highest rate whose p99 stays within
    ``slo_p99_ms`` (see :func:`automl.pipeline.serving.max_rate`). Each load run lasts
    ``duration_s``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    arrival: Literal["poisson"] = "poisson"
    rate_rps: float | Literal["max"] = "max"
    slo_p99_ms: float = Field(gt=0, le=60_000)
    duration_s: float = Field(default=1.0, gt=0, le=60)
    _real = numbers_not_text("slo_p99_ms", "duration_s", whole=False)

    @field_validator("rate_rps", mode="before")
    @classmethod
    def _rate_not_text(cls, rate: object) -> object:
        if isinstance(rate, bool) or (isinstance(rate, str) and rate != "max"):
            raise ValueError(f"{number_not_text(rate)}, or 'max'")
        return rate

    @field_validator("rate_rps")
    @classmethod
    def _positive(cls, rate: float | str) -> float | str:
        if rate != "max" and not 0 < float(rate) <= 1e7:
            raise ValueError("must be a rate in (0, 1e7] requests per second, or 'max'")
        return rate

    @model_validator(mode="after")
    def _one_run_fits(self) -> Serving:
        if self.rate_rps != "max" and float(self.rate_rps) * self.duration_s > MAX_LOAD_REQUESTS:
            raise ValueError(
                f"rate_rps × duration_s is over {MAX_LOAD_REQUESTS:,} requests in one load run: "
                "lower either"
            )
        return self


def _default_objectives() -> list[Objective]:
    return [Objective(metric="accuracy"), Objective(metric="latency_per_sample_ms")]


def _default_constraints() -> list[Constraint]:
    return [Constraint(metric="latency_p99_ms", op="<=", bound=5.0)]


class StudySpec(BaseModel):
    """Everything a study needs; shared by the CLI, the API and the workers.

    ``trials_per_model``: a model (architecture, training, pruning) on the front is deployed by
    up to that many trials in all; see :class:`automl.search.variants.VariantSampler`. 1 makes every
    trial draw a new model. ``variant_startup_trials``: complete trials before variants are
    predicted; until then each new model is redeployed twice, at random.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = None
    target: str = "cpu"
    search_space: str = "digits-mixed"
    dataset: str = "digits"
    n_trials: int | None = Field(default=24, ge=1, le=MAX_N_TRIALS)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    sampler: Literal["default", "tpe", "nsga2", "random", "gp"] = "default"
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    trials_per_model: int = Field(default=6, ge=1, le=MAX_DEPLOYMENTS)
    variant_startup_trials: int = Field(default=10, ge=0, le=MAX_N_TRIALS)
    objectives: list[Objective] = Field(default_factory=_default_objectives, min_length=1)
    constraints: list[Constraint] = Field(default_factory=_default_constraints)
    model: TrainedModel | None = None
    standardize: Literal["auto", "none", "scalar", "per_feature", "per_channel"] | None = Field(
        default=None,
        description="how float inputs are standardised; default auto (per feature for (N, F), "
        "per channel for (N, C, ...)), or none for a trained model",
    )
    dataset_name: str | None = Field(
        default=None, description="how the user named the data, where it is not a path"
    )
    serving: Serving | None = Field(
        default=None, description="a serving scenario: trials are also measured under load"
    )
    _whole = numbers_not_text(
        "n_trials", "seed", "trials_per_model", "variant_startup_trials", whole=True
    )
    _real = numbers_not_text("timeout_s", whole=False)

    @field_validator("name")
    @classmethod
    def _name(cls, name: str | None) -> str | None:
        if name is not None and not _NAME.fullmatch(name):
            raise ValueError(
                "must be 1-100 letters, digits, '_', '.' or '-', starting alphanumeric"
            )
        return name

    @model_validator(mode="after")
    def _checks(self) -> StudySpec:
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"objectives repeat a metric: {metrics}")
        if self.n_trials is None and self.timeout_s is None:
            raise ValueError("set n_trials or timeout_s, or the study never ends")
        if self.model is not None:
            self._trained_defaults()
        if self.serving is not None:
            self._serving_defaults()
        self._check_serving_metrics()
        used = {*metrics, *(c.metric for c in self.constraints)} & set(BASELINE_METRICS)
        if self.model is None and used:
            raise ValueError(
                f"{sorted(used)} compare with the baseline of a trained model: set "
                "model: {factory: ..., weights: ...}, or use accuracy and latency metrics"
            )
        if self.name is None:
            object.__setattr__(self, "name", self._default_name())
        return self

    def _default_name(self) -> str:
        """``<what>-<target>``: ``what`` is the trained model's factory function (or file), else
        the search space, named by its file's stem where it is a path."""
        space = Path(self.search_space)
        what = space.stem if space.suffix in (".yaml", ".yml") else space.name
        if self.model is not None:
            what = (self.model.factory or "").rpartition(":")[2] or Path(self.model.weights).stem
        what = re.sub(r"[^A-Za-z0-9_.-]+", "-", what).lstrip("_.-") or "study"
        return f"{what[:90]}-{self.target}"

    def _serving_defaults(self) -> None:
        """A serving study trades accuracy for its max rate (or its p99 at the offered rate),
        under its SLO rather than an isolated-latency bound."""
        if "objectives" not in self.model_fields_set and self.model is None:
            load = "max_rate_rps" if self.serving.rate_rps == "max" else "serving_p99_ms"
            object.__setattr__(
                self, "objectives", [Objective(metric="accuracy"), Objective(metric=load)]
            )
        if "constraints" not in self.model_fields_set and self.model is None:
            object.__setattr__(self, "constraints", [])

    def _check_serving_metrics(self) -> None:
        used = {o.metric for o in self.objectives} | {c.metric for c in self.constraints}
        if self.serving is None and used & set(SERVING_METRICS):
            raise ValueError(
                f"{sorted(used & set(SERVING_METRICS))} are measured under load: add a serving "
                "scenario, e.g. serving: {rate_rps: max, slo_p99_ms: 10}"
            )

    def _trained_defaults(self) -> None:
        """A trained model's study searches speedup against accuracy drop by default."""
        if "search_space" not in self.model_fields_set:
            space = ONNX_SPACE if self.model.is_onnx else TRAINED_SPACE
            object.__setattr__(self, "search_space", space)
        if "objectives" not in self.model_fields_set:
            objectives = [Objective(metric="accuracy_drop"), Objective(metric="speedup")]
            object.__setattr__(self, "objectives", objectives)
        if "constraints" not in self.model_fields_set:
            drop = [Constraint(metric="accuracy_drop", op="<=", bound=0.01)]
            object.__setattr__(self, "constraints", drop)

    @property
    def standardization(self) -> str:
        """How the study standardises float inputs: by default ``auto``, but ``none`` for a
        trained model, which was trained on its own preprocessing and is fed the data as
        given."""
        if self.standardize is not None:
            return self.standardize
        return "auto" if self.model is None else "none"

    @property
    def data_args(self) -> dict:
        """The keyword arguments of :func:`automl.inputs.data.cached_dataset` for this study."""
        return {
            "source": self.dataset,
            "seed": self.seed,
            "standardize": self.standardization,
            "name": self.dataset_name,
        }

    @property
    def dataset_shown(self) -> str:
        """The data as the user gave it: its name, path or plugin."""
        return self.dataset_name or self.dataset

    @property
    def metric_names(self) -> list[str]:
        """Objective metrics in order, as trials record them (unscaled)."""
        return [o.metric for o in self.objectives]

    @property
    def directions(self) -> list[str]:
        """Objective directions in order."""
        return [o.direction for o in self.objectives]

    def comparable(self) -> dict:
        """The parts that must match when a study is resumed (budget may change)."""
        return self.model_dump(mode="json", exclude={"n_trials", "timeout_s"})


def parse_spec(values: dict) -> StudySpec:
    """Validate a spec from plain values.

    Raises:
        SpecError: Names each bad field and what is allowed.
    """
    try:
        return StudySpec.model_validate(values)
    except ValidationError as e:
        raise SpecError(f"invalid study spec:\n{validation_details(e)}") from e


def load_spec(path: Path | str, **overrides: object) -> StudySpec:
    """Load a spec from a YAML or JSON file, then apply non-None ``overrides``.

    A name that is no file, such as ``digits``, names a spec shipped with the package
    (``studies/<name>.yaml`` in a checkout).
    """
    shipped = resources.files("automl.default_studies") / f"{path}.yaml"
    path = Path(path) if Path(path).exists() or not shipped.is_file() else shipped
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read study spec {str(path)!r}: {e}") from e
    if not isinstance(raw, dict):
        raise SpecError(f"study spec {str(path)!r} must be a mapping of fields")
    return parse_spec({**raw, **{k: v for k, v in overrides.items() if v is not None}})
