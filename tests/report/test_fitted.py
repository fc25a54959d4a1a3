"""A table fitted to its console: whole cells at any width, the most droppable columns first out."""

from __future__ import annotations

from rich.console import Console

from automl.report.fitted import FitColumn, FittedTable


def _table() -> FittedTable:
    return FittedTable(
        "Fitted",
        [
            FitColumn("trial", ["7", "12"], numeric=True),
            FitColumn("candidate", ["mlp w8 d1 (w16 prune 0.2) int8-static batch 32", "fp32"]),
            FitColumn("a long heading", ["3,075,701", "0.044218"], numeric=True, drop=1),
            FitColumn("MACs", ["123,456,789", "-"], numeric=True, drop=2),
        ],
        ["a note"],
    )


def test_every_width_shows_whole_cells_and_drops_the_most_droppable_first() -> None:
    seen = set()
    for width in range(30, 121, 5):
        console = Console(width=width, record=True, color_system=None)
        console.print(_table())
        printed = console.export_text()
        assert max(map(len, printed.splitlines())) <= width and "…" not in printed
        kept = {word for word in ("3,075,701", "123,456,789") if word in printed}
        seen.add(frozenset(kept))
        assert "123,456,789" not in printed or "3,075,701" in printed  # MACs go first
        words = " ".join(" ".join(line.split("│")[2] for line in printed.splitlines()
                                  if line.startswith("│")).split())  # fmt: skip
        assert words.startswith("mlp w8 d1 (w16 prune 0.2) int8-static batch 32")
        assert ("left out to fit" in printed) == (len(kept) < 2)
    assert len(seen) == 3  # all, without MACs, and trial and candidate alone
