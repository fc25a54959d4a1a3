"""Declarative search spaces: YAML → validated schema → Optuna suggestions → ``Candidate``."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from automl.candidate import Candidate
from automl.catalog import FAMILIES, get_method, legacy_bits, per_layer_methods
from automl.errors import SpecError, validation_details
from automl.search.numbers import check_numbers
from automl.search.params import (
    FixedParam,
    FloatParam,
    Param,
    Scalar,
    applies,
    capped,
    check_bounds,
    draw_value,
    param_values,
    suggest_value,
)
from automl.search.spec import MAX_DEPLOYMENTS, Serving, StudySpec, parse_spec

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

    import numpy as np
    import optuna


# The shipped spaces: the top-level search_spaces/ folder, packaged as automl.search_spaces.
SEARCH_SPACES_DIR = resources.files("automl.search_spaces")
KEYS = (
    "arch.family",
    "arch.width",
    "arch.depth",
    "arch.kernel_size",
    "arch.dropout",
    "arch.stages",
    "arch.width_growth",
    "arch.heads",
    "arch.mlp_ratio",
    "pruning_ratio",
    "bits",
    "int8_mode",
    "method",
    "keep_fp32",
    "batch_size",
    "finetune_epochs",
    "finetune_lr",
    "kd_alpha",
    "kd_temperature",
    "graph_optimization",
    "runtime",
    "serving.max_batch",
    "serving.max_queue_delay_ms",
    "serving.instances",
    "train.epochs",
    "train.lr",
    "train.weight_decay",
    "train.batch_size",
)
# A family's own knobs: ``arch.extra.<name>``, declared by a catalog family (``knobs``) or
# passed to a user-written family as ``name=``.
EXTRA_PREFIX = "arch.extra."
# Knobs that change how a model is deployed, not its weights.
DEPLOYMENT_KEYS = (
    "bits", "int8_mode", "method", "keep_fp32", "batch_size", "graph_optimization", "runtime",
    "serving.max_batch", "serving.max_queue_delay_ms", "serving.instances",
)  # fmt: skip
# The serving knobs of :meth:`SearchSpace.capacity_first`: True takes the largest value.
_CAPACITY = {"serving.max_batch": True, "serving.instances": True,
             "serving.max_queue_delay_ms": False}  # fmt: skip
# Knobs of a torch model's weights: an ONNX model has none of them.
_TORCH_ONLY = (
    "pruning_ratio", "finetune_epochs", "finetune_lr", "kd_alpha", "kd_temperature",
)  # fmt: skip


class SearchSpace(BaseModel):
    """A named space: parameters in suggestion order, keyed by Optuna parameter name.

    ``output_layer`` names the output layer of a user-written family, if not ``classifier``.
    ``serving`` is the serving scenario of a study of this space whose spec sets none.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    description: str = ""
    params: dict[str, Param]
    output_layer: str | None = None
    serving: Serving | None = None

    @model_validator(mode="after")
    def _keys(self) -> SearchSpace:
        seen: list[str] = []
        for name, param in self.params.items():
            key = param.sets or name
            if key not in KEYS and not _is_extra(key):
                close = difflib.get_close_matches(key, KEYS, n=1)
                meant = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"parameter {name!r} sets unknown key {key!r}; {meant}allowed: {KEYS}, and "
                    f"{EXTRA_PREFIX}<name> for a user-written family's own knobs"
                )
            for other in param.when or {}:
                if other not in seen:
                    raise ValueError(f"{name!r}: 'when' names {other!r}, not declared before it")
            seen.append(name)
        arch = [k for k in self.candidate_keys() if k.startswith("arch.")]
        if arch and "arch.family" not in arch:
            raise ValueError(
                f"the space sets {arch} but not arch.family (categorical or fixed); a space for "
                "a trained model sets no arch.* key"
            )
        for name, param in self.params.items():
            check_numbers(name, param)
            check_bounds(name, param)
            is_bits = (param.sets or name) == "bits"
            if is_bits and len(param_values(param)) > len(
                legacy_bits()
            ):  # a long int range, never built
                raise ValueError(f"parameter {name!r}: bits must be among {list(legacy_bits())}")
        self._check_keep()
        first: dict[str, Any] = {}  # each param's first value, where its 'when' holds
        for name, param in self.params.items():
            if applies(param, first):
                first[name] = param_values(param)[0]
        values = {self.params[name].sets or name: value for name, value in first.items()}
        candidate_from_values(self._arch_values(values))  # a space that cannot build fails here
        return self

    def _check_keep(self) -> None:
        """Refuse a ``keep_fp32`` that a trial can draw with a method that keeps no layers."""
        per_layer = list(per_layer_methods())
        methods = {n: p for n, p in self.params.items() if (p.sets or n) == "method"}
        for name, param in self.params.items():
            if (param.sets or name) != "keep_fp32" or not any(param_values(param)):
                continue
            when = param.when or {}
            drawn = {str(v) for n, p in methods.items() for v in when.get(n, param_values(p))}
            whole = sorted(m for m in drawn if not get_method(m).per_layer)
            if not methods or whole:
                raise ValueError(
                    f"parameter {name!r}: keep_fp32 applies to per-layer methods only "
                    f"({per_layer}), and a trial can draw it with "
                    f"{whole or 'a bit-width (a whole-graph method)'}: name the method knob, "
                    f"and give keep_fp32 'when: {{method: [{', '.join(per_layer)}]}}' "
                    "(those of them that the space offers)"
                )

    def candidate_keys(self) -> list[str]:
        """The candidate keys the params set, in order."""
        return [p.sets or n for n, p in self.params.items()]

    @property
    def trains_models(self) -> bool:
        """Whether the space builds its models (sets ``arch.family``), or tunes a trained one."""
        return "arch.family" in self.candidate_keys()

    def check_model(self, trained: bool, onnx: bool = False) -> None:
        """Raise ``SpecError`` unless the space fits a study of a trained model (``trained``),
        of an ONNX model (``onnx``: nothing pruned or fine-tuned) or one that trains its own."""
        tuned = [k for k in self.candidate_keys() if k in _TORCH_ONLY and any(self.values_of(k))]
        if onnx and tuned:
            raise SpecError(
                f"search space {self.name!r} sets {tuned}: an ONNX model has no torch weights, "
                "so it is neither pruned nor fine-tuned; its space holds method, batch_size "
                "and graph_optimization, as the shipped 'onnx-model' space does"
            )
        if trained and self.trains_models:
            arch = [k for k in self.candidate_keys() if k.startswith("arch.")]
            raise SpecError(
                f"search space {self.name!r} sets {arch}: a trained model's architecture is "
                "fixed, so its space holds deployment knobs only (pruning_ratio, "
                "finetune_epochs, finetune_lr, kd_alpha, kd_temperature, method, batch_size), "
                "as the shipped 'trained-model' space does"
            )
        if not trained and not self.trains_models:
            raise SpecError(
                f"search space {self.name!r} sets no arch.family: it tunes a trained model; "
                "name one with model: {factory: ..., weights: ...} (CLI: --model, --weights), "
                "or use a space that builds models, e.g. digits-mixed"
            )

    def values_of(self, key: str) -> list[Scalar]:
        """Every value the space gives candidate ``key`` (a float range: its ends)."""
        return [v for n, p in self.params.items() if (p.sets or n) == key for v in param_values(p)]

    def bit_choices(self) -> set[int]:
        """Every bit-width the space can suggest."""
        out: set[int] = set()
        for name, param in self.params.items():
            if (param.sets or name) == "bits":
                if isinstance(param, FloatParam):
                    raise SpecError("bits must be categorical, int or fixed")
                out |= set(param_values(param))
        return out or {32}

    def method_choices(self) -> set[str]:
        """Every quantization method the space names directly (its ``method`` knob)."""
        return set(map(str, self.values_of("method")))

    def runtime_choices(self) -> set[str]:
        """Every runtime the space names (its ``runtime`` knob)."""
        return set(map(str, self.values_of("runtime")))

    def capacity_first(self) -> dict[str, Scalar]:
        """Serving knobs of a max-rate study's first trial: the most ``serving.instances`` and
        the largest ``serving.max_batch`` the space searches, and its middle
        ``serving.max_queue_delay_ms``, by param name.

        These settings have the highest isolated-latency bound on the max rate, so the trials
        after it meet a high rate to beat early (:mod:`automl.trials.screen`); the sampler
        chooses everything else. Knobs under a ``when``, float ranges and fixed knobs are left
        out: empty for a space that searches none of these.
        """
        first: dict[str, Scalar] = {}
        for name, param in self.params.items():
            key = param.sets or name
            if key not in _CAPACITY or param.when or isinstance(param, FloatParam | FixedParam):
                continue
            values = sorted(param_values(param))
            first[name] = values[-1] if _CAPACITY[key] else values[len(values) // 2]
        return first

    def model_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """The trial ``params`` that decide the weights: all but the deployment knobs."""
        return {
            name: value
            for name, value in params.items()
            if (self.params[name].sets or name) not in DEPLOYMENT_KEYS
        }

    def deployments(self, model_params: dict[str, Any]) -> list[dict[str, Any]] | None:
        """Every assignment of the deployment knobs the space allows for a model, by param name.

        Conditional knobs follow their ``when``; fixed ones are left out, as Optuna never sees
        them. ``None`` when a knob is a float or the grid has over ``MAX_DEPLOYMENTS`` entries.
        """
        fixed = self._fixed_values()
        grid: list[dict[str, Any]] = [{}]
        for name, param in self.params.items():
            if (param.sets or name) not in DEPLOYMENT_KEYS or isinstance(param, FixedParam):
                continue
            if (
                isinstance(param, FloatParam)
                or len(grid) * len(param_values(param)) > MAX_DEPLOYMENTS
            ):
                return None
            expanded = []
            for chosen in grid:
                if applies(param, {**fixed, **model_params, **chosen}):
                    expanded += [{**chosen, name: value} for value in param_values(param)]
                else:
                    expanded.append(chosen)
            if len(expanded) > MAX_DEPLOYMENTS:
                return None
            grid = expanded
        return grid

    def for_model(self, layers: int) -> SearchSpace:
        """The space resolved for a trained model of ``layers`` layers (Conv, Gemm, MatMul):
        ``keep_fp32`` capped at ``layers - 1``, so that a per-layer method quantizes a layer
        (keeping them all makes the fp32 graph under another method's name).

        Raises:
            SpecError: Every ``keep_fp32`` the space gives keeps all of the model's layers.
        """
        params = dict(self.params)
        for name, param in self.params.items():
            if (param.sets or name) != "keep_fp32":
                continue
            params[name] = capped(param, layers - 1)
            if params[name] is None:
                raise SpecError(
                    f"search space {self.name!r}: {name} {list(param_values(param))} keeps all "
                    f"{layers} layers of this model in fp32, which is its fp32 graph: give "
                    f"keep_fp32 values below {layers}, or leave out the per-layer methods"
                )
        return self.model_copy(update={"params": params})

    def _fixed_values(self) -> dict[str, Scalar]:
        return {n: p.value for n, p in self.params.items() if isinstance(p, FixedParam)}

    def draw(self, rng: np.random.Generator) -> dict[str, Any]:
        """Params of a trial drawn at random, as Optuna's trial params hold them (no fixed
        knobs; a knob under a ``when`` only where it applies)."""
        fixed = self._fixed_values()
        drawn: dict[str, Any] = {}
        for name, param in self.params.items():
            if not isinstance(param, FixedParam) and applies(param, {**fixed, **drawn}):
                drawn[name] = draw_value(param, rng)
        return drawn

    def suggest(self, trial: optuna.Trial) -> Candidate:
        """Draw one candidate from ``trial``; conditional parameters follow their ``when``."""
        chosen: dict[str, Any] = {}
        values: dict[str, Any] = {}
        for name, param in self.params.items():
            if not applies(param, chosen):
                continue
            chosen[name] = suggest_value(trial, name, param)
            values[param.sets or name] = chosen[name]
        return candidate_from_values(self._arch_values(values))

    def _arch_values(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with the space's ``output_layer`` when they name a user-written family."""
        family = values.get("arch.family")
        if self.output_layer is None or family is None or family in FAMILIES:
            return values
        return {**values, "arch.output_layer": self.output_layer}


def _is_extra(key: str) -> bool:
    """Whether ``key`` is ``arch.extra.<name>``, ``name`` an identifier."""
    return key.startswith(EXTRA_PREFIX) and key.removeprefix(EXTRA_PREFIX).isidentifier()


def with_scenario(spec: StudySpec, space: SearchSpace) -> StudySpec:
    """``spec`` with its space's serving scenario where it sets none (and the defaults that
    follow from one, such as the objectives).

    Raises:
        SpecError: The space searches ``serving.*`` knobs and no scenario is set.
    """
    if spec.serving is None and space.serving is not None:
        given = spec.model_dump(mode="json", exclude_unset=True)
        return parse_spec({**given, "serving": space.serving.model_dump(mode="json")})
    keys = {param.sets or name for name, param in space.params.items()}
    if spec.serving is None and any(k.startswith("serving.") for k in keys):
        raise SpecError(
            f"search space {space.name!r} searches serving settings: set a serving scenario, "
            "e.g. serving: {rate_rps: max, slo_p99_ms: 10}"
        )
    return spec


def candidate_from_values(values: dict[str, Any]) -> Candidate:
    """Build a ``Candidate`` from flat keys such as ``arch.width``, ``arch.extra.x`` and ``bits``."""
    if "serving.max_batch" in values and "batch_size" not in values:  # isolated at that batch
        values = {**values, "batch_size": values["serving.max_batch"]}
    nested: dict[str, Any] = {"arch": {}, "train": {}}
    for key, value in values.items():
        group, _, field = key.partition(".")
        if _is_extra(key):
            nested["arch"].setdefault("extra", {})[key.removeprefix(EXTRA_PREFIX)] = value
        elif field:
            nested.setdefault(group, {})[field] = value
        else:
            nested[key] = value
    try:
        return Candidate.from_dict(nested)
    except TypeError as e:  # e.g. a knob of the wrong type
        raise SpecError(f"cannot build a candidate from {values}: {e}") from e


def load_space(name_or_path: str, *, directory: Traversable = SEARCH_SPACES_DIR) -> SearchSpace:
    """Load a search space by registered name (``search_spaces/<name>.yaml``) or by path.

    Raises:
        SpecError: Unknown name, unreadable YAML, or a schema violation; names the field.
    """
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = directory / f"{name_or_path}.yaml"
        if not path.is_file():
            raise SpecError(
                f"unknown search space {name_or_path!r}; registered: {list_spaces(directory)}"
            )
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise SpecError(f"cannot read search space {str(path)!r}: {e}") from e
    try:
        return SearchSpace.model_validate(raw)
    except ValidationError as e:
        raise SpecError(f"search space {str(path)!r} is invalid:\n{validation_details(e)}") from e


def list_spaces(directory: Traversable = SEARCH_SPACES_DIR) -> list[str]:
    """Names of the registered search spaces."""
    return sorted(
        p.name.removesuffix(".yaml") for p in directory.iterdir() if p.name.endswith(".yaml")
    )


__all__ = [
    "DEPLOYMENT_KEYS",
    "KEYS",
    "SearchSpace",
    "applies",
    "candidate_from_values",
    "list_spaces",
    "load_space",
    "param_values",
]
