"""The ``automl`` command line. Heavy imports wait inside commands so ``--help`` stays light."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click
import typer
from rich.console import Console

from automl.errors import AutomlError, TargetUnavailable
from automl.pipeline.ort_packages import require_single_ort

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

app = typer.Typer(help="Hardware-aware model-optimization search.", no_args_is_help=True)
study_app = typer.Typer(help="Create, run and inspect studies.", no_args_is_help=True)
app.add_typer(study_app, name="study")
# Piped output gets a wide console so that tables are not cut to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="SQLAlchemy URL \\[env AUTOML_STORAGE].")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def _storage(url: str | None, *, create: bool = True) -> BaseStorage:
    """The storage at ``url``; read-only commands pass ``create=False`` (no new SQLite file)."""
    from automl.settings import get_settings
    from automl.storage.factory import open_storage

    settings = get_settings()
    return open_storage(url or settings.storage, settings, create=create)


def _shown_url(url: str | None) -> str:
    """The storage URL for messages, its password hidden (as ***)."""
    from sqlalchemy.engine import make_url

    from automl.settings import get_settings

    return make_url(url or get_settings().storage).render_as_string(hide_password=True)


def main() -> None:
    """The ``automl`` entry point: an error the user can fix is one line, not a traceback.

    Ctrl-C exits 130 without a traceback, wherever it lands.
    """
    try:
        require_single_ort()
        app()
    except AutomlError as e:
        raise SystemExit(_fail(e).exit_code) from None
    except (KeyboardInterrupt, click.exceptions.Abort):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: see runner.run_here
        err.print("aborted by Ctrl-C")
        raise SystemExit(130) from None


def _fail(error: Exception) -> typer.Exit:
    err.print(f"[bold red]error:[/] {error}", highlight=False)
    return typer.Exit(code=2 if not isinstance(error, TargetUnavailable) else 3)


def _print_json(value: object) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


@app.command("targets")
def targets_cmd(as_json: JsonOpt = False) -> None:
    """List the known targets and mark those present on this machine."""
    from automl.report.tables import targets_table
    from automl.targets import is_present, list_targets

    rows = [(t, is_present(t)) for t in list_targets()]
    if as_json:
        _print_json([{"name": t.name, "kind": t.kind, "present": p} for t, p in rows])
    else:
        console.print(targets_table(rows))


@app.command("worker")
def worker(
    storage: StorageOpt = None,
    target: Annotated[str | None, typer.Option(help="Serve studies of this target only.")] = None,
    auto: Annotated[bool, typer.Option(help="Serve every target present here.")] = False,
    studies: Annotated[
        list[str] | None, typer.Option(help="Only these studies (repeat, or comma-separated).")
    ] = None,
    max_trials: Annotated[int | None, typer.Option(help="Run at most N trials.", min=1)] = None,
    wait: Annotated[bool, typer.Option(help="Keep polling when idle instead of exiting.")] = False,
) -> None:
    """Run trials of the studies in the storage whose target this machine has.

    Exits when no study in scope has work left (unless --wait), and on SIGTERM or Ctrl-C after
    finishing its running trial. Failed stale trials of dead workers are re-queued.
    """
    import logging

    from automl.fleet.scheduler import Scope, work
    from automl.fleet.study_loop import GracefulStop
    from automl.settings import get_settings
    from automl.storage.factory import cached, open_artifact_store
    from automl.targets import is_present, list_targets, load_target, require_present

    if target is not None and auto:
        raise _fail(AutomlError("give --target T or --auto, not both"))
    try:
        if target is not None:
            require_present(load_target(target))
        targets = {target} if target else {t.name for t in list_targets() if is_present(t)}
        store = _storage(storage)
        names = {n.strip() for item in studies or [] for n in item.split(",") if n.strip()}
        for name in sorted(names):
            _require_servable(name, store, targets)
    except AutomlError as e:
        raise _fail(e) from None
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("automl").setLevel(logging.INFO)
    err.print(
        f"worker on {_shown_url(storage)} serving targets {sorted(targets)}"
        + (f", studies {sorted(names)}" if names else "")
    )
    ran = work(
        cached(store),
        artifact_store=open_artifact_store(get_settings()),
        settings=get_settings(),
        stop=GracefulStop().install(),
        scope=Scope(targets=frozenset(targets), studies=frozenset(names) if names else None),
        max_trials=max_trials,
        exit_when_idle=not wait,
    )
    err.print(f"worker done: {ran} trial(s) run here")


def _require_servable(name: str, storage: BaseStorage, targets: set[str]) -> None:
    """Refuse a study that does not exist or whose target this worker does not serve."""
    from automl.service.studies import load

    target = load(name, storage)[1].target
    if target not in targets:
        raise TargetUnavailable(
            f"study {name!r} is measured on {target!r}, which this worker does not serve "
            f"(serving {sorted(targets)}); run `automl worker --target {target}` on a host "
            "that has it"
        )


def _add_plugin_commands() -> None:
    """Commands that other packages register under the ``automl.commands`` entry points.

    The REST service's ``automl serve`` comes this way (see ``pyproject.toml``), so that
    nothing in ``automl`` imports ``api``.
    """
    from importlib.metadata import entry_points

    for entry in entry_points(group="automl.commands"):
        app.command(entry.name)(entry.load())


@app.command("dashboard")
def dashboard(
    storage: StorageOpt = None,
    host: Annotated[str, typer.Option(help="Bind address; it has no auth.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8080,
) -> None:
    """Start optuna-dashboard on the study storage and artifact store (warns off loopback)."""
    from automl.report.dashboard import run_dashboard
    from automl.settings import get_settings

    settings = get_settings()
    console.print(f"optuna-dashboard on http://{host}:{port}/ (Ctrl-C to stop)")
    run_dashboard(storage or settings.storage, settings.artifacts_dir, host, port)


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
    storage: StorageOpt = None,
    jobs: Annotated[int, typer.Option(help="Local worker processes.", min=1)] = 1,
    detach: Annotated[bool, typer.Option(help="Only create the study, for workers.")] = False,
    remeasure_front: Annotated[
        bool,
        typer.Option(help="At the end, measure the front's latency again, to decide budgets."),
    ] = True,
    retry_failed: Annotated[
        bool, typer.Option(help="Resume a study that ended on too many failures.")
    ] = False,
) -> None:
    """Create (or resume) a study and run it here, ending with the Pareto front.

    `--name N` alone (a budget may come with it) resumes study N with its stored spec.
    Ctrl-C finishes the running trial, prints the front and the command that resumes, and
    exits 130; a second Ctrl-C aborts the trial (it is marked FAIL) and exits 130 at once.
    SIGTERM stops as the first Ctrl-C does, and exits 0.
    """
    signal.signal(signal.SIGINT, _interrupt)
    overrides = {
        "name": name, "search_space": space, "dataset": dataset, "n_trials": n_trials,
        "timeout_s": timeout, "sampler": sampler, "seed": seed,
    }  # fmt: skip
    try:
        from automl.fleet.local import run_here
        from automl.service.studies import create_study
        from automl.service.studies import retry_failed as forgive_failures
        from automl.targets import is_present, load_target, require_present

        store = _storage(storage) if _names_a_study(spec_file, target, overrides) else None
        specs = store and _stored_spec(store, overrides)
        specs = specs or _specs_per_target(spec_file, target, overrides)
        runnable = [s for s in specs if is_present(load_target(s.target))]
        if not detach and not runnable:
            require_present(load_target(specs[0].target))
        store = store or _storage(storage)
        for spec in specs:
            create_study(spec, store, check_data=not detach)
            if retry_failed:
                forgive_failures(spec.name, store)
    except AutomlError as e:
        raise _fail(e) from None
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: see run_here
        console.print("aborted by Ctrl-C before a trial started")
        raise typer.Exit(130) from None
    url = _shown_url(storage)
    for spec in specs:
        if detach or spec not in runnable:
            console.print(f"Study [bold]{spec.name}[/] is queued for a worker on {spec.target}:")
            console.print(
                f"  automl worker --target {spec.target} --storage {url} --studies {spec.name}"
            )
    if detach:
        return
    after = _print_remeasured if remeasure_front else None
    code = run_here(runnable, store, storage_url=storage, jobs=jobs, console=console, after=after)
    if code:
        raise typer.Exit(code)


class _Interrupted(KeyboardInterrupt):
    """Ctrl-C in ``start`` outside its trial loop; not plain, see :class:`automl.errors.Aborted`."""


def _interrupt(_signum: int, _frame: object) -> None:
    raise _Interrupted


def _names_a_study(spec_file: Path | None, target: str | None, overrides: dict) -> bool:
    """Whether ``start`` got a study name and at most a new budget."""
    spec_options = ("search_space", "dataset", "sampler", "seed")
    named = overrides["name"] is not None and spec_file is None and target is None
    return named and all(overrides[key] is None for key in spec_options)


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


def _print_remeasured(name: str, store: BaseStorage) -> None:
    from automl.settings import get_settings
    from automl.storage.factory import open_artifact_store
    from automl.trials.remeasure import remeasure_front

    results = remeasure_front(name, store, open_artifact_store(get_settings()))
    for number, latency in sorted(results.items()):
        console.print(
            f"trial {number}: p50 {latency['first_p50_ms']:.4f} ms in the study, "
            f"{latency['p50_ms']:.4f} ms re-measured (cv {latency['cv']:.3f}, "
            f"{latency['runs']} runs)",
            highlight=False,
        )
        for decision in latency["decisions"]:
            console.print(
                f"  {decision['metric']} {decision['op']} {decision['bound']:g}: "
                f"{decision['verdict']}, {decision['reason']}",
                highlight=False,
            )


def _specs_per_target(spec_file: Path | None, targets: str | None, overrides: dict) -> list:
    """One spec per comma-separated target; several targets suffix the name with the target."""
    from automl.search.spec import load_spec, parse_spec

    def one(target: str | None, suffix: bool):
        values = {**overrides, "target": target}
        if suffix and values["name"]:
            values["name"] = f"{values['name']}-{target}"
        if spec_file is not None:
            spec = load_spec(spec_file, **values)
            if suffix and not values["name"]:
                spec = parse_spec({**spec.model_dump(), "name": f"{spec.name}-{target}"})
            return spec
        return parse_spec({k: v for k, v in values.items() if v is not None})

    names = [t.strip() for t in targets.split(",")] if targets else [None]
    return [one(t, len(names) > 1) for t in names]


@study_app.command("list")
def list_cmd(storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """List the studies in the storage with their state and progress."""
    from automl.report.tables import studies_table
    from automl.service.read import list_studies

    infos = list_studies(_storage(storage, create=False))
    if as_json:
        _print_json([i.as_dict() for i in infos])
    else:
        console.print(studies_table(infos))


@study_app.command("show")
def show(name: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """Spec, progress, and failures with their reasons."""
    from automl.report.tables import study_panel
    from automl.service.studies import get_study

    try:
        info = get_study(name, _storage(storage, create=False))
    except AutomlError as e:
        raise _fail(e) from None
    if as_json:
        _print_json(info.as_dict())
    else:
        console.print(study_panel(info))


@study_app.command("pareto")
def pareto(name: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """The Pareto front: non-dominated feasible trials."""
    from automl.report.tables import front_table
    from automl.service.read import pareto_front
    from automl.service.studies import load

    try:
        store = _storage(storage, create=False)
        front = pareto_front(name, store)
        _, spec = load(name, store)
    except AutomlError as e:
        raise _fail(e) from None
    if as_json:
        _print_json([{k: v for k, v in t.items() if k != "user_attrs"} for t in front])
    else:
        console.print(front_table(front, spec))


@study_app.command("export")
def export(
    name: str,
    out: Annotated[Path, typer.Option("-o", "--output", help="Where to write the .onnx.")],
    trial: Annotated[int | None, typer.Option(help="Trial number.")] = None,
    best: Annotated[str | None, typer.Option(help="Best Pareto trial on this metric.")] = None,
    budget: Annotated[
        str | None, typer.Option(help="With --best, e.g. 'latency_p99_ms <= 2'.")
    ] = None,
    measure_seconds: Annotated[
        float, typer.Option(help="Latency --budget: re-measure each front model up to this.")
    ] = 5.0,
    storage: StorageOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a trial's ONNX model and its model.json sidecar.

    A latency --budget is decided on new runs of the front's models here: a trial within noise
    of it is passed over, and said so.
    """
    from automl.service.exports import export_model
    from automl.settings import get_settings
    from automl.storage.factory import open_artifact_store
    from automl.trials.decide import pick_trial

    if (trial is None) == (best is None):
        raise _fail(AutomlError("give exactly one of --trial N or --best METRIC"))
    pick = None
    try:
        store, artifacts = _storage(storage), open_artifact_store(get_settings())
        if best is not None:
            pick = pick_trial(
                name, store, best, budget, artifact_store=artifacts, max_seconds=measure_seconds
            )
        number = trial if pick is None else pick.number
        sidecar = export_model(name, store, artifacts, number, out)
    except AutomlError as e:
        raise _fail(e) from None
    if as_json:
        _print_json(sidecar if pick is None else {**sidecar, "pick": pick.as_dict()})
        return
    for note in pick.notes if pick else ():
        console.print(note, highlight=False)
    console.print(f"Wrote trial {number} to {out} and {out.with_suffix('.json')}")


@study_app.command("compare")
def compare(first: str, second: str, storage: StorageOpt = None, as_json: JsonOpt = False) -> None:
    """How two fronts differ (e.g. one spec on two targets): which candidates win where."""
    from automl.report.tables import comparison_table
    from automl.service.compare import compare_fronts

    try:
        comparison = compare_fronts(first, second, _storage(storage, create=False))
    except AutomlError as e:
        raise _fail(e) from None
    if as_json:
        _print_json(comparison)
    else:
        console.print(comparison_table(comparison))


@study_app.command("report")
def report(
    name: str,
    out: Annotated[Path, typer.Option("-o", "--output", help="The HTML file to write.")],
    models: Annotated[bool, typer.Option(help="Export the front's models beside it.")] = True,
    storage: StorageOpt = None,
) -> None:
    """One self-contained HTML report: front, knobs, importances, failures, environment."""
    from automl.report.html import write_report
    from automl.settings import get_settings
    from automl.storage.factory import open_artifact_store

    try:
        store = open_artifact_store(get_settings()) if models else None
        path = write_report(name, _storage(storage, create=False), out, store)
    except AutomlError as e:
        raise _fail(e) from None
    console.print(f"Wrote {path}")


@study_app.command("stop")
def stop(name: str, storage: StorageOpt = None) -> None:
    """Ask every worker of the study to stop after its running trial."""
    from automl.service.studies import request_stop

    try:
        request_stop(name, _storage(storage, create=False))
    except AutomlError as e:
        raise _fail(e) from None
    console.print(f"Stop requested for {name}: workers finish their running trial, then exit.")


_add_plugin_commands()
