"""The rich consoles the ``automl`` command prints to: tables on stdout, messages on stderr."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from typing import TextIO

# The width of piped output when COLUMNS is not set: a log then holds whole tables.
PIPED_WIDTH = 160


def console_width(stream: TextIO) -> int | None:
    """The width to give a console of ``stream``; ``None`` lets rich size it, from ``COLUMNS``
    where it is set (piped or not: rich reads it), else from the terminal. Piped output without
    ``COLUMNS`` is :data:`PIPED_WIDTH` wide, not rich's 80."""
    if stream.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return None
    return PIPED_WIDTH


console = Console(width=console_width(sys.stdout))
err = Console(stderr=True, width=console_width(sys.stderr))
