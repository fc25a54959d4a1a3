"""The ``automl`` command line. Heavy imports wait inside commands so ``--help`` stays light."""

from __future__ import annotations

import signal
from typing import TYPE_CHECKING, Annotated

import click
import typer

from automl.catalog.runtimes._ort_packages import require_single_ort
from automl.cli.common import (
    ArtifactsOpt,
    JsonOpt,
    StorageOpt,
    cli_settings,
    fail,
    open_cli_storage,
    print_json,
    require_artifacts_writable,
    shown_url,
)
from automl.cli.console import console, err
from automl.cli.manage import register as register_manage
from automl.cli.results import register as register_results
from automl.cli.study import study_app
from automl.errors import AutomlError, TargetUnavailable

if TYPE_CHECKING:
    from pathlib import Path

    from optuna.storages import BaseStorage

    from automl.fleet.signals import GracefulStop

app = typer.Typer(
    help="Hardware-aware model-optimization search.", no_args_is_help=True, rich_markup_mode=None
)
register_results(study_app)
register_manage(study_app)
app.add_typer(study_app, name="study")


def _print_version(shown: bool) -> None:
    """``--version``: the installed package's version, read from its metadata (no import of
    the libraries that commands load)."""
    if shown:
        from importlib.metadata import version

        typer.echo(f"automl {version('automl')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # Typer takes a callback's docstring as the app's help: the app's own help= stays.
    pass


def main() -> None:
    """The ``automl`` entry point: an error the user can fix is one line, not a traceback.

    Ctrl-C exits 130 without a traceback, wherever it lands.
    """
    try:
        require_single_ort()
        app()
    except AutomlError as e:
        raise SystemExit(fail(e).exit_code) from None
    except (KeyboardInterrupt, click.exceptions.Abort):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # on the way out: see runner.run_here
        err.print("aborted by Ctrl-C")
        raise SystemExit(130) from None


@app.command("targets")
def targets_cmd(as_json: JsonOpt = False) -> None:
    """List the targets, their runtimes, and which are present here."""
    from automl.catalog import BACKENDS
    from automl.report.tables import targets_table
    from automl.targets import is_present, list_targets

    rows = [(t, is_present(t)) for t in list_targets()]
    refusals = {name: runtime.unavailable() for name, runtime in BACKENDS.items()}
    if as_json:
        print_json([
            {"name": t.name, "kind": t.kind, "present": p,
             "runtimes": {r: {"present": not refusals[r], "reason": refusals[r]}
                          for r in t.backends}}
            for t, p in rows
        ])  # fmt: skip
    else:
        console.print(targets_table(rows, refusals))


@app.command("methods")
def methods_cmd(as_json: JsonOpt = False) -> None:
    """List the quantization methods and the targets that run them."""
    from automl.catalog import METHODS
    from automl.report.tables import methods_table
    from automl.targets import list_targets

    offered = {m: [t.name for t in list_targets() if m in t.methods] for m in METHODS}
    if as_json:
        rows = [
            {"name": m.name, "bits": m.bits, "backends": list(m.backends),
             "targets": offered[m.name], "description": m.description}
            for m in METHODS.values()
        ]  # fmt: skip
        print_json(rows)
    else:
        console.print(methods_table(list(METHODS.values()), offered))


@app.command("spaces")
def spaces_cmd(as_json: JsonOpt = False) -> None:
    """List the shipped search spaces, one line each."""
    from automl.report.tables import spaces_table
    from automl.search.space import list_spaces, load_space

    spaces = [load_space(name) for name in list_spaces()]
    if as_json:
        print_json([{"name": s.name, "description": s.description} for s in spaces])
    else:
        console.print(spaces_table(spaces))


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
    artifacts_dir: ArtifactsOpt = None,
) -> None:
    """Run trials of the stored studies whose target this machine has.

    Exits when no study in scope has work left (unless --wait), and on SIGTERM (0) or Ctrl-C
    (130) after finishing its running trial; a second one stops that trial at once (it is
    FAIL). Failed stale trials of dead workers are re-queued.
    """
    import logging

    from automl.errors import Aborted
    from automl.fleet.signals import GracefulStop

    # First of all: a SIGTERM while the libraries load is a requested stop too, not exit 143.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("automl").setLevel(logging.INFO)
    stop = GracefulStop().install(sigterm_aborts=True)
    if target is not None and auto:
        raise fail(AutomlError("give --target T or --auto, not both"))
    try:
        ran = _work(stop, storage, artifacts_dir, target, studies, max_trials, wait)
    except Aborted:
        if stop.interrupted:
            raise  # `main` says so, and exits 130
        err.print("aborted by a second SIGTERM: a trial it interrupted is marked FAIL")
        return
    err.print(f"worker done: {ran} trial(s) run here")
    if stop.interrupted:  # as `automl study start` does; SIGTERM is a requested stop: 0
        raise typer.Exit(130)


def _work(
    stop: GracefulStop,
    storage: str | None,
    artifacts_dir: Path | None,
    target: str | None,
    studies: list[str] | None,
    max_trials: int | None,
    wait: bool,
) -> int:
    """:func:`worker` once its signal handlers are installed; returns the trials it ran."""
    from automl.fleet.scheduler import Scope, work
    from automl.storage.factory import cached, open_artifact_store
    from automl.targets import is_present, list_targets, load_target, require_present

    try:
        settings = cli_settings(storage, artifacts_dir)
        if target is not None:
            require_present(load_target(target))
        targets = {target} if target else {t.name for t in list_targets() if is_present(t)}
        store = open_cli_storage(storage)
        require_artifacts_writable(settings)  # before a trial is taken and fails on it
        names = {n.strip() for item in studies or [] for n in item.split(",") if n.strip()}
        for name in sorted(names):
            _require_servable(name, store, targets)
    except AutomlError as e:
        raise fail(e) from None
    err.print(
        f"worker on {shown_url(storage)} serving targets {sorted(targets)}"
        + (f", studies {sorted(names)}" if names else "")
        + f", models in {str(settings.artifacts_dir)!r}",
        highlight=False,
    )
    return work(
        cached(store),
        artifact_store=open_artifact_store(settings),
        settings=settings,
        stop=stop,
        scope=Scope(targets=frozenset(targets), studies=frozenset(names) if names else None),
        max_trials=max_trials,
        exit_when_idle=not wait,
    )


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
    artifacts_dir: ArtifactsOpt = None,
) -> None:
    """Start optuna-dashboard on the studies (warns off loopback)."""
    from automl.report.dashboard import run_dashboard

    settings = cli_settings(storage, artifacts_dir)
    console.print(f"optuna-dashboard on http://{host}:{port}/ (Ctrl-C to stop)")
    run_dashboard(settings.storage, settings.artifacts_dir, host, port)


_add_plugin_commands()
