"""``automl study list|show|trials|pareto|export|compare|report``: read a study and its results.

Heavy imports wait inside commands. :func:`register` adds them to ``automl study``.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from automl.cli.common import (
    ArtifactsOpt,
    JsonOpt,
    StorageOpt,
    cli_settings,
    fail,
    open_cli_storage,
    print_json,
    worker_command,
)
from automl.cli.console import console
from automl.errors import AutomlError

if TYPE_CHECKING:
    from rich.table import Table

    from automl.records import TrialRecord
    from automl.search.spec import StudySpec

_COMMANDS: list[tuple[str, object]] = []


class ExportFormat(StrEnum):
    """What ``automl study export`` writes."""

    onnx = "onnx"
    triton = "triton"


def _command(name: str):
    """Mark a function as the ``automl study NAME`` command."""

    def mark(function):
        _COMMANDS.append((name, function))
        return function

    return mark


def register(app: typer.Typer) -> None:
    """Add the read commands to ``app`` (``automl study``)."""
    for name, function in _COMMANDS:
        app.command(name)(function)


@_command("list")
def list_cmd(storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """List the studies in the storage with their state and progress."""
    from automl.report.tables import studies_table
    from automl.service.read import list_studies

    infos = list_studies(open_cli_storage(storage, create=False))
    if as_json:
        print_json([i.as_dict() for i in infos])
    else:
        console.print(studies_table(infos))


@_command("show")
def show(name: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Spec, progress, and failures with their reasons.

    A queued study (no trial running, work left) comes with the worker command that runs it;
    --json gives it as worker_command (null for the others).
    """
    from automl.report.tables import study_panel
    from automl.service.studies import get_study

    try:
        info = get_study(name, open_cli_storage(storage, create=False))
    except AutomlError as e:
        raise fail(e) from None
    target = info.spec["target"]
    waiting = worker_command(name, target, storage, None) if info.state == "queued" else None
    if as_json:
        print_json({**info.as_dict(), "worker_command": waiting})
        return
    console.print(study_panel(info))
    if waiting is not None:
        console.print(
            f"No worker is running it. A host with {target} runs it with:", highlight=False
        )
        console.print(f"  {waiting}", highlight=False, soft_wrap=True)


@_command("trials")
def trials(name: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Every trial: state, candidate, objectives, and why it failed.

    --json gives the fields of REST's GET /v1/studies/{name}/trials items, with the model's
    artifact_id in place of its model_url.
    """
    from automl.service.read import study_trials

    try:
        spec, records = study_trials(name, open_cli_storage(storage, create=False))
    except AutomlError as e:
        raise fail(e) from None
    if as_json:
        print_json([{k: v for k, v in r.items() if k != "user_attrs"} for r in records])
    else:
        console.print(trials_table(records, spec))


def trials_table(records: list[TrialRecord], spec: StudySpec) -> Table:
    """The trials of a study, one row each, with the study's objectives as the only metrics.

    Args:
        records: The trials, by number.
        spec: Their study's spec.

    Returns:
        The table; a trial on the Pareto front is starred.
    """
    from rich.table import Table

    from automl.records import BASELINE_COLUMNS, FRONT_COLUMNS, SERVING_COLUMNS, Column
    from automl.report.tables import describe

    known = {c.key: c for c in (*BASELINE_COLUMNS, *FRONT_COLUMNS, *SERVING_COLUMNS)}
    columns = [known.get(m, Column(m, m, "{:.4g}")) for m in spec.metric_names]
    table = Table(
        title=f"Trials of {spec.name} on {spec.target} ({len(records)})",
        caption="* on the Pareto front" if any(r.on_front for r in records) else None,
    )
    table.add_column("trial", justify="right", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("candidate", min_width=16, ratio=3)
    for column in columns:
        table.add_column(column.label, justify="right", no_wrap=True)
    table.add_column("reason", min_width=10, ratio=2, overflow="fold")
    for record in records:
        number = f"{record.number}{'*' if record.on_front else ''}"
        candidate = ("baseline: " if record.baseline else "") + describe(record)
        cells = (column.text(record.metrics) or "-" for column in columns)
        table.add_row(number, record.state, candidate, *cells, _reason(record))
    return table


def _reason(record: TrialRecord) -> str:
    """Why a trial failed, was pruned or is infeasible; empty for the others."""
    from automl.records import OVER_BUDGET, SCREENED

    if record.state == "FAIL":
        return record.fail_reason or ""
    if record.state == "PRUNED":
        if record.user_attrs.get(OVER_BUDGET):
            return "over the n_trials budget: never run"
        return record.user_attrs.get(SCREENED) or "pruned"
    return "breaks a constraint" if record.feasible is False else ""


@_command("pareto")
def pareto(name: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """The Pareto front: non-dominated feasible trials."""
    from automl.report.tables import front_table
    from automl.service.read import empty_front_reason, pareto_front
    from automl.service.studies import load

    try:
        store = open_cli_storage(storage, create=False)
        front = pareto_front(name, store)
        _, spec = load(name, store)
    except AutomlError as e:
        raise fail(e) from None
    if as_json:
        print_json([{k: v for k, v in t.items() if k != "user_attrs"} for t in front])
    elif front:
        console.print(front_table(front, spec))
    else:
        console.print(empty_front_reason(name, store), style="yellow", highlight=False)


@_command("export")
def export(
    name: str,
    out: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx.")],
    trial: Annotated[int | None, typer.Option(help="Trial number.")] = None,
    best: Annotated[
        str | None,
        typer.Option(
            help="Best Pareto trial on this metric (speedup includes batching; "
            "speedup_same_batch is the model's own)."
        ),
    ] = None,
    budget: Annotated[
        str | None, typer.Option(help="With --best, e.g. 'latency_p99_ms <= 2'.")
    ] = None,
    measure_seconds: Annotated[
        float, typer.Option(help="Latency --budget: re-measure each front model up to this.")
    ] = 5.0,
    output_format: Annotated[
        ExportFormat,
        typer.Option("--format", help="onnx, or triton: -o is then a model repository."),
    ] = ExportFormat.onnx,
    model_name: Annotated[
        str | None,
        typer.Option(help="--format triton: the model's name for clients; default the study's."),
    ] = None,
    storage: StorageOpt = None,
    artifacts_dir: ArtifactsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a trial's ONNX model and its model.json sidecar.

    A latency --budget is decided on new runs of the front's models here: a trial within noise
    of it is passed over, and said so. --format triton writes a Triton model repository entry
    instead, named --model-name (default: the study's name, whichever trial it holds):
    config.pbtxt (ONNX Runtime backend, the batcher and instances found, the session's threads
    as measured) and 1/model.onnx.
    """
    from automl.fleet.decide import pick_trial
    from automl.service.exports import export_model
    from automl.service.triton import model_name as triton_name
    from automl.storage.factory import open_artifact_store

    if (trial is None) == (best is None):
        raise fail(AutomlError("give exactly one of --trial N or --best METRIC"))
    if model_name is not None and output_format is not ExportFormat.triton:
        raise fail(AutomlError("--model-name names a Triton model: give it with --format triton"))
    pick = None
    try:
        triton = triton_name(model_name, name) if output_format is ExportFormat.triton else None
        store = open_cli_storage(storage, create=False)
        artifacts = open_artifact_store(cli_settings(storage, artifacts_dir), create=False)
        if best is not None:
            pick = pick_trial(
                name, store, best, budget, artifact_store=artifacts, max_seconds=measure_seconds
            )
        number = trial if pick is None else pick.number
        if triton is not None:
            out = out / triton / "1" / "model.onnx"
        sidecar = export_model(name, store, artifacts, number, out)
        if triton is not None:
            _write_triton_config(sidecar, triton, name, store, out.parent.parent)
    except AutomlError as e:
        raise fail(e) from None
    if as_json:
        print_json(sidecar if pick is None else {**sidecar, "pick": pick.as_dict()})
        return
    for note in pick.notes if pick else ():
        console.print(note, highlight=False)
    console.print(f"Wrote trial {number} to {out} and {out.with_suffix('.json')}")
    if triton is not None:
        console.print(f"Triton model {triton!r}: {out.parent.parent / 'config.pbtxt'}")


def _write_triton_config(sidecar: dict, model: str, study: str, store: object, entry: Path) -> None:
    """Write ``entry/config.pbtxt`` for the exported trial, on its study's target's device."""
    from automl.service.studies import load
    from automl.service.triton import triton_config
    from automl.targets import load_target

    device = load_target(load(study, store)[1].target).kind
    (entry / "config.pbtxt").write_text(triton_config(sidecar, model, device))


@_command("compare")
def compare(first: str, second: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Compare two fronts: which candidates win where.

    For example, one spec run on two targets.
    """
    from automl.report.tables import comparison_table
    from automl.service.compare import compare_fronts

    try:
        comparison = compare_fronts(first, second, open_cli_storage(storage, create=False))
    except AutomlError as e:
        raise fail(e) from None
    if as_json:
        print_json(comparison)
    else:
        console.print(comparison_table(comparison))


@_command("report")
def report(
    name: str,
    out: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write.")],
    models: Annotated[bool, typer.Option(help="Export the front's models beside it.")] = True,
    storage: StorageOpt = None,
    artifacts_dir: ArtifactsOpt = None,
) -> None:
    """Write a study's HTML report, and its front's models beside it.

    One self-contained file holds the front, the knobs, their importances, the failures and
    the environment; the models go to a `models/` folder beside it, which the report links
    to (--no-models leaves them out).
    """
    from automl.report.html import write_report
    from automl.storage.factory import open_artifact_store

    try:
        settings = cli_settings(storage, artifacts_dir)
        store = open_artifact_store(settings, create=False) if models else None
        path = write_report(name, open_cli_storage(storage, create=False), out, store)
    except AutomlError as e:
        raise fail(e) from None
    console.print(f"Wrote {path}")
