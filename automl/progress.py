"""The progress bar of :func:`automl.optimize`: rich in a terminal, tqdm in a notebook.

A bar counts COMPLETE trials towards ``n_trials`` and shows a short status (failures, the
front's size and its best accuracy). Where neither a notebook nor a terminal is attached
(a script piped to a log), each finished trial prints one line to stderr instead.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from typing import TextIO

    from rich.console import Console
    from rich.progress import Progress

BarKind = Literal["rich", "tqdm", "log", "none"]


class Bar(Protocol):
    """A live progress display."""

    def update(self, completed: int, status: str) -> None:
        """Show ``completed`` trials done and a status text."""

    def close(self) -> None:
        """Stop drawing; the last state stays on screen."""


def choose_bar(enabled: bool) -> BarKind:
    """The bar for this process: tqdm in a notebook, rich on a terminal, else a log line per
    finished trial.

    Args:
        enabled: ``False`` always gives ``"none"``.
    """
    if not enabled:
        return "none"
    if in_notebook():
        return "tqdm"
    return "rich" if sys.stdout.isatty() else "log"


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (IPython with a kernel attached)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return getattr(get_ipython(), "kernel", None) is not None


def open_bar(
    kind: BarKind,
    description: str,
    total: int | None,
    completed: int = 0,
    *,
    file: TextIO | None = None,
) -> Bar:
    """Start a bar of ``kind``.

    Args:
        kind: From :func:`choose_bar`.
        description: The bar's label (the study's name).
        total: COMPLETE trials to reach; None for a study bounded by time alone.
        completed: COMPLETE trials already there (a resumed study).
        file: Where to draw; stdout for rich, stderr for tqdm by default.

    Returns:
        The started bar.
    """
    if kind == "rich":
        return _RichBar(description, total, completed, file)
    if kind == "tqdm":
        return _TqdmBar(description, total, completed, file)
    if kind == "log":
        return _LogBar(description, total, file)
    return _NoBar()


class _LogBar:
    """One line per update that changes something: a log's progress."""

    def __init__(self, description: str, total: int | None, file: TextIO | None) -> None:
        self._description, self._total, self._file = description, total, file
        self._last: tuple[int, str] | None = None

    def update(self, completed: int, status: str) -> None:
        if (completed, status) != self._last:
            total = f"/{self._total}" if self._total is not None else ""
            line = f"{self._description}: {completed}{total} complete  {status}"
            print(line, file=self._file or sys.stderr, flush=True)
            self._last = completed, status

    def close(self) -> None:
        pass


class _NoBar:
    def update(self, completed: int, status: str) -> None:
        pass

    def close(self) -> None:
        pass


def rich_progress(console: Console) -> Progress:
    """The progress bar of a running study, as `automl study start` and optimize show it.

    On a narrow terminal the bar shrinks and the status wraps onto more lines; the study's
    name, the count and the time stay whole (rich alone cuts them all to ``digits-…``).
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.table import Column

    return Progress(
        TextColumn("[bold]{task.description}", table_column=Column(no_wrap=True)),
        BarColumn(bar_width=None, table_column=Column(ratio=1, min_width=10, max_width=40)),
        MofNCompleteColumn(table_column=Column(no_wrap=True)),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        TextColumn("{task.fields[status]}", table_column=Column(ratio=4, overflow="fold")),
        console=console,
        expand=True,
    )


class _RichBar:
    def __init__(
        self, description: str, total: int | None, completed: int, file: TextIO | None
    ) -> None:
        from rich.console import Console

        console = Console(file=file, force_terminal=True if file is not None else None)
        self._progress = rich_progress(console)
        self._task = self._progress.add_task(
            description, total=total, completed=completed, status="starting"
        )
        self._progress.start()

    def update(self, completed: int, status: str) -> None:
        self._progress.update(self._task, completed=completed, status=status)

    def close(self) -> None:
        self._progress.stop()


class _TqdmBar:
    def __init__(
        self, description: str, total: int | None, completed: int, file: TextIO | None
    ) -> None:
        from tqdm.auto import tqdm

        self._bar = tqdm(total=total, initial=completed, desc=description, file=file)

    def update(self, completed: int, status: str) -> None:
        self._bar.n = completed
        self._bar.set_postfix_str(status, refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        self._bar.close()
