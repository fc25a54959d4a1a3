"""``automl study ...``: create, run and inspect studies. Heavy imports wait inside commands."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from automl.cli.common import (
    ArtifactsOpt,
    StorageOpt,
    cli_settings,
    fail,
    open_cli_storage,
    require_artifacts_writable,
    worker_command,
)
from automl.cli.console import console
from automl.errors import AutomlError, SpecError

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from automl.search.spec import StudySpec
    from automl.settings import Settings

study_app = typer.Typer(
    help="Create, run and inspect studies.", no_args_is_help=True, rich_markup_mode=None
)


@study_app.command("start")
def start(
    spec_file: Annotated[Path | None, typer.Argument(help="Study spec YAML.")] = None,
    name: Annotated[
        str | None, typer.Option(help="Study name; alone, it resumes that study.")
    ] = None,
    target: Annotated[
        str | None, typer.Option(help="Target, e.g. cpu or a100; 'cpu,a100' makes one study each.")
    ] = None,
    space: Annotated[str | None, typer.Option(help="Search space name or YAML path.")] = None,
    dataset: Annotated[str | None, typer.Option(help="digits, an .npz path or module:fn.")] = None,
    n_trials: Annotated[int | None, typer.Option(help="COMPLETE trials to reach.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds, from the first trial.")] = None,
    sampler: Annotated[str | None, typer.Option(help="default, tpe, nsga2, random or gp.")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed of data, training and sampler.")] = None,
    objective: Annotated[
        list[str] | None,
        typer.Option(help="A metric to optimise, in its natural direction (repeat for more)."),
    ] = None,
    constraint: Annotated[
        list[str] | None,
        typer.Option(help="A budget, e.g. 'latency_p99_ms <= 10' (repeat for more)."),
    ] = None,
    slo_p99_ms: Annotated[
        float | None,
        typer.Option(help="A serving study's p99 bound in ms (its spec's serving.slo_p99_ms)."),
    ] = None,
    rate: Annotated[
        str | None,
        typer.Option(help="A serving study's Poisson rate, requests/s or max (serving.rate_rps)."),
    ] = None,
    storage: StorageOpt = None,
    artifacts_dir: ArtifactsOpt = None,
    jobs: Annotated[int, typer.Option(help="Local worker processes.", min=1)] = 1,
    detach: Annotated[bool, typer.Option(help="Only create the study, for workers.")] = False,
    remeasure_front: Annotated[
        bool,
        typer.Option(help="At the end, measure the front's latency again, to decide budgets."),
    ] = True,
    retry_failed: Annotated[
        bool, typer.Option(help="Resume a study that ended on too many failures.")
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(help="A model to optimize: package.module:function, or an .onnx file."),
    ] = None,
    weights: Annotated[
        Path | None, typer.Option(help="The trained model's state dict (torch.save).")
    ] = None,
    output_layer: Annotated[
        str | None,
        typer.Option(help="The trained model's layer giving the logits; found if left out."),
    ] = None,
    model_output: Annotated[
        str | None,
        typer.Option(help="Key or index of the logits in the model's output, e.g. logits."),
    ] = None,
    standardize: Annotated[
        str | None,
        typer.Option(help="auto, none, scalar, per_feature or per_channel."),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Show Optuna's own log of every trial.")
    ] = False,
    mlflow_uri: Annotated[
        str | None,
        typer.Option(help="Log each trial to this MLflow tracking URI [env AUTOML_MLFLOW_URI]."),
    ] = None,
) -> None:
    """Create or resume a study and run it here, to its Pareto front.

    `--model pkg.mod:fn --weights w.pt` optimizes that trained model (pruning, fine-tune,
    quantization, batch) against its own measured baseline, the study's first trial;
    `--model model.onnx` optimizes an ONNX graph (quantization, batch, graph optimisation).

    `--name N` alone (a budget may come with it) resumes study N with its stored spec.
    Ctrl-C finishes the running trial, prints the front and the command that resumes, and
    exits 130; a second Ctrl-C aborts the trial (it is marked FAIL) and exits 130 at once.
    SIGTERM stops as the first Ctrl-C does, and exits 0.
    """
    signal.signal(signal.SIGINT, _interrupt)
    overrides = {
        "name": name, "search_space": space, "dataset": dataset, "n_trials": n_trials,
        "timeout_s": timeout, "sampler": sampler, "seed": seed, "standardize": standardize,
        "objectives": objective or None,
        "constraints": constraint or None,
        "model": _trained(model, weights, output_layer, model_output),
    }  # fmt: skip
    try:
        tracking = _tracking_uri(mlflow_uri)  # first: a dead server is refused before torch loads
        if not verbose:  # Optuna's INFO lines repeat every parameter; the progress tells the story
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
        load = _given({"slo_p99_ms": slo_p99_ms, "rate_rps": _number_or_max(rate)})
        store = open_cli_storage(storage) if _names_a_study(spec_file, target, overrides) else None
        specs = store and _stored_spec(store, overrides)
        specs = specs or _specs_per_target(spec_file, target, overrides)
        specs = [_with_load(spec, load) for spec in specs]
        store = store or open_cli_storage(storage)
        _check_names(specs, store)  # in a moment: before any data, model or torch loads
        from automl.fleet.preflight import prepare_studies  # after the spec is found valid

        if not detach:  # torch and the study loop: only where trials run
            settings = _artifacts_for_trials(storage, artifacts_dir)
            require_artifacts_writable(settings)  # before any study is created
            from automl.fleet.local import run_here

        runnable = prepare_studies(
            specs, store, detach=detach, forgive_failures=retry_failed, tracking_uri=tracking
        )
    except AutomlError as e:
        raise fail(e) from None
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: see run_here
        console.print("aborted by Ctrl-C before a trial started")
        raise typer.Exit(130) from None
    queued = [spec for spec in specs if detach or spec not in runnable]
    _say_queued(queued, storage, artifacts_dir, detach)
    if detach:
        return
    after = partial(_print_remeasured, settings=settings) if remeasure_front else None
    code = run_here(
        runnable, store, storage_url=storage, jobs=jobs, console=console, after=after,
        verbose=verbose, artifacts_dir=artifacts_dir,
    )  # fmt: skip
    _say_queued(queued, storage, artifacts_dir, detach, again=True)  # the run scrolled it away
    if code:
        raise typer.Exit(code)


def _check_names(specs: list[StudySpec], store: BaseStorage) -> None:
    """Refuse a spec whose study name is taken by another spec, before anything loads."""
    from automl.service.create import check_name

    for spec in specs:
        check_name(spec, store)


def _artifacts_for_trials(storage: str | None, artifacts_dir: Path | None) -> Settings:
    """The settings of this run's trials, whose artifacts folder goes into the environment:
    the study loop and the ``--jobs`` helper processes read their settings from there."""
    import os

    from automl.settings import get_settings

    settings = cli_settings(storage, artifacts_dir)
    os.environ["AUTOML_ARTIFACTS_DIR"] = str(settings.artifacts_dir)
    get_settings.cache_clear()
    return settings


def _say_queued(
    queued: list[StudySpec],
    storage: str | None,
    artifacts_dir: Path | None,
    detach: bool,
    *,
    again: bool = False,
) -> None:
    """Name each study left to workers, why, and the command that runs it."""
    for spec in queued:
        why = "created for workers" if detach else f"this host cannot measure {spec.target}"
        still = "still " if again else ""
        console.print(
            f"Study {spec.name} is {still}queued ({why}); a worker on a host with {spec.target} "
            "runs it:",
            highlight=False,
        )
        command = worker_command(spec.name, spec.target, storage, artifacts_dir)
        console.print(f"  {command}", highlight=False, soft_wrap=True)


def _tracking_uri(mlflow_uri: str | None) -> str | None:
    """The MLflow URI of ``--mlflow-uri`` or the settings, its server probed (in about a
    second, before torch, Optuna and MLflow are imported, which take many).

    A given URI goes into the environment, where the ``--jobs`` helper processes read their
    settings.
    """
    import os

    from automl.fleet.tracking import check_reachable
    from automl.settings import get_settings

    if mlflow_uri is not None:
        os.environ["AUTOML_MLFLOW_URI"] = mlflow_uri
        get_settings.cache_clear()
    uri = get_settings().mlflow_uri
    if uri is not None:
        check_reachable(uri)
    return uri


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C in ``start`` outside its trial loop; not plain, see :class:`automl.errors.Aborted`."""


def _interrupt(_signum: int, _frame: object) -> None:
    raise _Interrupted


def _trained(
    model: str | None, weights: Path | None, output_layer: str | None, output: str | None
) -> dict | None:
    """The spec's ``model`` from ``--model`` and ``--weights``, which come together (but an
    ``.onnx`` model comes alone), and ``--output-layer`` and ``--model-output`` (an index
    where it is a number)."""
    onnx = model is not None and model.lower().endswith(".onnx")
    if onnx and weights is not None:
        raise fail(SpecError("an .onnx --model holds its weights: it comes without --weights"))
    if onnx:
        model, weights = None, Path(str(model))
    elif (model is None) != (weights is None):
        raise fail(SpecError("--model and --weights come together: the factory and its weights"))
    if model is None and not onnx:
        if output_layer is not None or output is not None:
            raise fail(SpecError("--output-layer and --model-output describe a --model"))
        return None
    given = {"output_layer": output_layer, "output": int(output) if output and output.isdigit()
             else output}  # fmt: skip
    return _given({"factory": model, "weights": str(weights), **given})


def _given(values: dict) -> dict:
    return {key: value for key, value in values.items() if value is not None}


def _names_a_study(spec_file: Path | None, target: str | None, overrides: dict) -> bool:
    """Whether ``start`` got a study name and at most a new budget."""
    spec_options = (
        "search_space", "dataset", "sampler", "seed", "model", "standardize", "objectives",
        "constraints",
    )  # fmt: skip
    named = overrides["name"] is not None and spec_file is None and target is None
    return named and all(overrides[key] is None for key in spec_options)


# The options of a serving scenario's fields, as messages name them.
_LOAD_OPTIONS = {"slo_p99_ms": "--slo-p99-ms", "rate_rps": "--rate"}


def _with_load(spec: StudySpec, load: dict) -> StudySpec:
    """``spec`` with the serving scenario (its own, else its space's) that ``--slo-p99-ms`` and
    ``--rate`` (in ``load``) change; the objectives follow the rate, as in a spec file.

    Raises:
        SpecError: ``load`` is given for a space that serves nothing, or a value is refused.
    """
    if not load:
        return spec
    from pydantic import ValidationError

    from automl.errors import validation_message
    from automl.search.space import load_space
    from automl.search.spec import Serving, parse_spec

    space = load_space(spec.search_space)
    scenario = spec.serving or space.serving
    knobs = (param.sets or key for key, param in space.params.items())
    if scenario is None and not any(knob.startswith("serving.") for knob in knobs):
        flags = " and ".join(_LOAD_OPTIONS[key] for key in load)
        raise SpecError(
            f"{flags}: search space {space.name!r} serves nothing, it has no serving "
            "scenario; use a serving space such as --space digits-serving, or a spec file "
            "with serving: {rate_rps: max, slo_p99_ms: 10}"
        )
    given = scenario.model_dump(mode="json") if scenario else {}
    try:
        scenario = Serving.model_validate({**given, **load})
    except ValidationError as e:
        item = e.errors()[0]
        where = _LOAD_OPTIONS.get(str(item["loc"][0]) if item["loc"] else "", "--rate")
        raise SpecError(f"{where}: {validation_message(item)}") from None
    unset = spec.model_dump(mode="json", exclude_unset=True)  # so the objectives follow
    return parse_spec({**unset, "serving": scenario.model_dump(mode="json")})


def _number_or_max(rate: str | None) -> float | str | None:
    """``--rate`` as a number where it reads as one, else as given (``max``, or text that the
    scenario refuses)."""
    try:
        return float(rate) if rate is not None and rate != "max" else rate
    except ValueError:
        return rate


def _stored_spec(store: BaseStorage, overrides: dict) -> list | None:
    """The named study's stored spec with the new budget; None when there is no such study."""
    from automl.search.spec import parse_spec
    from automl.service.studies import StudyNotFound, load

    try:
        _, spec = load(overrides["name"], store)
    except StudyNotFound:
        return None
    budget = {k: overrides[k] for k in ("n_trials", "timeout_s") if overrides[k] is not None}
    return [parse_spec({**spec.model_dump(mode="json"), **budget})]


def _print_remeasured(name: str, store: BaseStorage, *, settings: Settings) -> None:
    from automl.fleet.remeasure import remeasure_front
    from automl.report.tables import remeasured_lines
    from automl.storage.factory import open_artifact_store

    artifacts = open_artifact_store(settings)
    results = remeasure_front(name, store, artifacts, settings=settings)
    for number, latency in sorted(results.items()):
        for line in remeasured_lines(number, latency):
            console.print(line, highlight=False)
        for decision in latency["decisions"]:
            console.print(
                f"  {decision['metric']} {decision['op']} {decision['bound']:g}: "
                f"{decision['verdict']}, {decision['reason']}",
                highlight=False,
            )


def _specs_per_target(spec_file: Path | None, targets: str | None, overrides: dict) -> list:
    """One spec per comma-separated target. Several targets suffix a given name (``--name``
    or the spec file's) with the target; a default name names its target already (see
    :func:`automl.service.create.named_for_inputs`)."""
    from automl.search.spec import load_spec, parse_spec
    from automl.service.create import named_for_inputs

    def one(target: str | None, suffix: bool):
        values = {**overrides, "target": target}
        if suffix and values["name"]:
            values["name"] = f"{values['name']}-{target}"
        if spec_file is None:
            return named_for_inputs(parse_spec(_given(values)))
        spec = load_spec(spec_file, **values)
        if suffix and not values["name"] and "name" in spec.model_fields_set:
            spec = parse_spec({**spec.model_dump(), "name": f"{spec.name}-{target}"})
        return named_for_inputs(spec)

    names = [t.strip() for t in targets.split(",")] if targets else [None]
    return [one(t, len(names) > 1) for t in names]


@study_app.command("stop")
def stop(name: str, storage: StorageOpt = None) -> None:
    """Ask every worker of the study to stop after its running trial."""
    from automl.fleet.local import resume_command
    from automl.service.studies import request_stop
    from automl.targets import is_present, load_target

    try:
        spec = request_stop(name, open_cli_storage(storage, create=False))
    except AutomlError as e:
        raise fail(e) from None
    here = is_present(load_target(spec.target))
    console.print(
        f"Stop requested for {name}: its workers finish their running trial and start no other "
        "of its trials (workers started with --wait stay up for other studies). Resume it with: "
        f"{resume_command(name, storage, detach=not here)}",
        highlight=False,
    )
