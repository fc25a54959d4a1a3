"""``automl study delete``: remove a study with its models. :func:`register` adds it to
``automl study``; heavy imports wait inside the command."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from automl.cli.common import ArtifactsOpt, StorageOpt, cli_settings, fail, open_cli_storage
from automl.cli.console import console
from automl.errors import AutomlError


def register(app: typer.Typer) -> None:
    """Add the commands that change or remove a study to ``app`` (``automl study``)."""
    app.command("delete")(delete)


def delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Delete without asking.")] = False,
    storage: StorageOpt = None,
    artifacts_dir: ArtifactsOpt = None,
) -> None:
    """Delete a study, its trials and the models they uploaded. It cannot be undone.

    Asks first, on a terminal; without one (CI, a pipe), give --yes. A study whose trials
    are running is refused: `automl study stop NAME` first, and delete it once they finish.
    """
    from automl.service.delete import delete_study, plan_deletion
    from automl.storage.factory import open_artifact_store

    try:
        store = open_cli_storage(storage, create=False)
        plan = plan_deletion(name, store)
        if not yes and not sys.stdin.isatty():
            raise AutomlError(
                f"deleting study {name!r} needs a yes: there is no terminal to ask on; "
                "give --yes to delete it"
            )
        what = f"study {name!r}: {plan.trials} trial(s) and {len(plan.artifacts)} model file(s)"
        if not yes and not typer.confirm(f"Delete {what}? This cannot be undone"):
            console.print(f"Kept study {name!r}", highlight=False)
            raise typer.Exit(1)
        artifacts = open_artifact_store(cli_settings(storage, artifacts_dir), create=False)
        done = delete_study(name, store, artifacts)
    except AutomlError as e:
        raise fail(e) from None
    gone = f" ({done.missing} already gone)" if done.missing else ""
    console.print(
        f"Deleted study {name!r}: {done.trials} trial(s) and {len(done.artifacts)} model "
        f"file(s){gone}",
        highlight=False,
    )
