"""The pieces the ``automl`` command modules share."""

from __future__ import annotations

import shlex
from pathlib import Path

from automl.cli.common import worker_command


def test_the_worker_command_is_quoted_for_a_shell() -> None:
    folder = Path("/data/my models")
    command = worker_command("s-a100", "a100", "sqlite:////data/my db/automl.db", folder)
    assert shlex.split(command) == [
        "automl", "worker", "--target", "a100", "--storage", "sqlite:////data/my db/automl.db",
        "--studies", "s-a100", "--artifacts-dir", "/data/my models",
    ]  # fmt: skip
