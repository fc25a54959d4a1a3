"""The rich consoles the ``automl`` command prints to: tables on stdout, messages on stderr."""

from __future__ import annotations

import sys

from rich.console import Console

# Piped output gets a wide console so that tables are not cut to 80 columns.
console = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
