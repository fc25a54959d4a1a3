"""The progress bars of `automl.optimize`: which one is chosen, and what each draws."""

from __future__ import annotations

import io

from automl.progress import choose_bar, in_notebook, open_bar


def test_no_bar_when_disabled_and_log_lines_when_nothing_is_attached() -> None:
    assert choose_bar(False) == "none"
    assert not in_notebook()  # a plain interpreter, not a Jupyter kernel
    assert choose_bar(True) == "log"  # pytest captures stdout: no terminal


def test_the_log_bar_writes_one_line_per_finished_trial() -> None:
    out = io.StringIO()
    bar = open_bar("log", "digits", total=4, file=out)
    for completed, status in ((1, "failed 0"), (1, "failed 0"), (1, "failed 1"), (2, "failed 1")):
        bar.update(completed, status)
    bar.close()
    assert out.getvalue().splitlines() == [
        "digits: 1/4 complete  failed 0",
        "digits: 1/4 complete  failed 1",
        "digits: 2/4 complete  failed 1",
    ]


def test_tqdm_bar_counts_trials_and_shows_the_status() -> None:
    out = io.StringIO()
    bar = open_bar("tqdm", "digits", total=4, completed=1, file=out)
    bar.update(3, "failed 0  front 2")
    bar.close()
    assert "digits" in out.getvalue()
    assert "3/4" in out.getvalue()
    assert "front 2" in out.getvalue()


def test_rich_bar_counts_trials_and_shows_the_status() -> None:
    out = io.StringIO()
    bar = open_bar("rich", "digits", total=4, file=out)
    bar.update(2, "failed 1")
    bar.close()
    assert "digits" in out.getvalue()
    assert "2/4" in out.getvalue()
    assert "failed 1" in out.getvalue()


def test_a_bar_without_a_total_for_a_study_bounded_by_time() -> None:
    out = io.StringIO()
    bar = open_bar("tqdm", "timed", total=None, file=out)
    bar.update(5, "")
    bar.close()
    assert "5" in out.getvalue()


def test_the_none_bar_draws_nothing(capsys) -> None:
    bar = open_bar("none", "digits", total=4)
    bar.update(4, "done")
    bar.close()
    assert capsys.readouterr() == ("", "")


def test_a_narrow_terminal_wraps_the_status_and_keeps_name_and_count_whole() -> None:
    from rich.console import Console

    from automl.progress import rich_progress

    out = io.StringIO()
    progress = rich_progress(Console(file=out, width=80))
    status = "running 1  failed 0  eta 0:00:12  front 4  best acc 0.972 @ 0.0037 ms/sample"
    progress.add_task("digits-mlp-cpu", total=8, completed=3, status=status)
    progress.start()
    progress.stop()
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 80 and "…" not in out.getvalue()
    assert lines[0].startswith("digits-mlp-cpu ") and " 3/8 " in lines[0]
    assert " ".join(" ".join(lines).split()).endswith(status.replace("  ", " "))
