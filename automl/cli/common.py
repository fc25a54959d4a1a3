"""What the ``automl`` command modules share: option aliases, storage and errors."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from automl.cli.console import err
from automl.errors import TargetUnavailable

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from automl.settings import Settings

StorageOpt = Annotated[
    str | None, typer.Option("--storage", help="SQLAlchemy URL [env AUTOML_STORAGE].")
]
ArtifactsOpt = Annotated[
    Path | None,
    typer.Option(
        "--artifacts-dir",
        help="The trials' models [env AUTOML_ARTIFACTS_DIR; else beside a SQLite storage].",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


def open_cli_storage(url: str | None, *, create: bool = True) -> BaseStorage:
    """The storage at ``url``; read-only commands pass ``create=False`` (no new SQLite file)."""
    from automl.settings import get_settings
    from automl.storage.factory import open_storage

    settings = get_settings()
    return open_storage(url or settings.storage, settings, create=create)


def shown_url(url: str | None) -> str:
    """The storage URL for messages, its password hidden (as ***)."""
    from sqlalchemy.engine import make_url

    from automl.settings import get_settings

    return make_url(url or get_settings().storage).render_as_string(hide_password=True)


def fail(error: Exception) -> typer.Exit:
    """Print ``error`` as one line and return the exit to raise: 3 for an absent target, else 2.

    The line is never wrapped (a terminal folds it as it shows it), and brackets in the message
    are text, not markup.
    """
    err.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)
    return typer.Exit(code=2 if not isinstance(error, TargetUnavailable) else 3)


def print_json(value: object) -> None:
    """Print ``value`` as indented JSON (anything unknown as its ``str``)."""
    typer.echo(json.dumps(value, indent=2, default=str))


def cli_settings(storage: str | None, artifacts_dir: Path | None) -> Settings:
    """The settings of a command given ``--storage`` and ``--artifacts-dir`` (see
    :meth:`automl.settings.Settings.for_command` for where the models are)."""
    from automl.settings import get_settings

    return get_settings().for_command(storage, artifacts_dir)


def require_artifacts_writable(settings: Settings) -> None:
    """Refuse an artifacts folder that trials could not write their models to.

    Raises:
        SpecError: The folder cannot be created or written.
    """
    from automl.storage.artifacts import require_writable

    require_writable(settings.artifacts_dir, "--artifacts-dir (or AUTOML_ARTIFACTS_DIR)")


def worker_command(name: str, target: str, storage: str | None, artifacts_dir: Path | None) -> str:
    """The ``automl worker`` command that runs study ``name`` on a host with ``target``;
    ``storage`` and ``artifacts_dir`` are the options given, if any. Quoted for a shell, as
    :func:`automl.fleet.local.resume_command` is."""
    command = ["automl", "worker", "--target", target, "--storage", shown_url(storage)]
    command += ["--studies", name]
    if artifacts_dir is not None:
        command += ["--artifacts-dir", str(artifacts_dir)]
    return shlex.join(command)
