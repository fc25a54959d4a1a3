"""A rich table that fits the console it prints to: whole cells, secondary columns dropped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

# A wrapped text column narrower than this reads as a list of single words.
_READABLE = 20


@dataclass(frozen=True)
class FitColumn:
    """A column of a :class:`FittedTable`.

    Attributes:
        header: Its heading; it wraps at spaces where the column is narrower.
        cells: Its cells, as rich markup.
        numeric: Right-justified and never wrapped: a number is shown whole or not at all.
        drop: 0 for a column always shown; otherwise a narrow console drops it, the highest
            ``drop`` first.
    """

    header: str
    cells: list[str]
    numeric: bool = False
    drop: int = 0

    def least(self) -> int:
        """The narrowest width that cuts nothing and reads as text: the longest number, or
        the longest word and at least :data:`_READABLE` where the text is longer."""
        texts = self._texts()
        if self.numeric:
            return max(*map(cell_len, texts[1:]), *map(cell_len, self.header.split()), 1)
        longest = max((cell_len(w) for text in texts for w in text.split()), default=1)
        return max(longest, min(self.most(), _READABLE))

    def most(self) -> int:
        """The width at which nothing wraps."""
        return max(map(cell_len, self._texts()), default=1)

    def _texts(self) -> list[str]:
        return [self.header, *(Text.from_markup(cell).plain for cell in self.cells)]


class FittedTable:
    """A table that fits the width of the console that prints it.

    Columns are dropped, the highest :attr:`FitColumn.drop` first, until every column left
    fits whole (numbers unwrapped, words unbroken); what room is left widens the text
    columns, then the numeric ones, toward their width unwrapped. A caption names the columns
    left out. Rich alone would shrink every column evenly, to zero width where the terminal
    is narrow, and cut numbers (``0.044…``).
    """

    def __init__(self, title: str, columns: list[FitColumn], notes: list[str] | None = None):
        """``notes`` are lines of the caption."""
        self.title = title
        self.columns = columns
        self.notes = notes or []

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def table(self, width: int) -> Table:
        """The rich table for a console ``width`` characters wide."""
        shown = self.fitting(width)
        widths = _widths(shown, width - _edges(len(shown)))
        dropped = [c.header for c in self.columns if c not in shown]
        caption = [*self.notes]
        if dropped:
            caption.append(f"left out to fit {width} columns: {', '.join(dropped)}")
        table = Table(title=self.title, caption="\n".join(caption) or None, caption_justify="left")
        for column, size in zip(shown, widths, strict=True):
            table.add_column(
                Text(column.header, no_wrap=False, justify="right" if column.numeric else "left"),
                justify="right" if column.numeric else "left", no_wrap=column.numeric,
                width=size, overflow="fold",
            )  # fmt: skip
        for row in zip(*(c.cells for c in shown), strict=True):
            table.add_row(*row)
        return table

    def fitting(self, width: int) -> list[FitColumn]:
        """The columns shown at ``width``: all that fit whole, less the most droppable."""
        shown = list(self.columns)
        by_drop = sorted((c for c in shown if c.drop), key=lambda c: -c.drop)
        while sum(c.least() for c in shown) + _edges(len(shown)) > width and by_drop:
            shown.remove(by_drop.pop(0))
        return shown


def _edges(columns: int) -> int:
    """Characters of a table that are not cells: a border between columns and at each
    edge, and one space of padding on each side of each cell."""
    return columns + 1 + 2 * columns


def _widths(columns: list[FitColumn], room: int) -> list[int]:
    """Each column's width: its least, then what ``room`` is left, one character at a time to
    the narrowest text column short of its unwrapped width, then to the numeric ones."""
    widths = [c.least() for c in columns]
    for numeric in (False, True):
        growing = [i for i, c in enumerate(columns) if c.numeric == numeric]
        while sum(widths) < room:
            short = [i for i in growing if widths[i] < columns[i].most()]
            if not short:
                break
            widths[min(short, key=lambda i: widths[i])] += 1
    return widths
