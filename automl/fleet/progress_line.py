"""The progress line of a local run: trial counts, the front and an ETA, refreshed each second."""

from __future__ import annotations

import bisect
import contextlib
import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

import optuna

from automl.fleet.study_loop import storage_unreachable
from automl.records import Column, column_of
from automl.search.budget import seconds_per_complete
from automl.search.objectives import Objective
from automl.service.read import shown_front
from automl.service.studies import state_counts

if TYPE_CHECKING:
    from collections.abc import Iterator

    from rich.progress import Progress


_ENDED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL)


@dataclass
class Status:
    """The progress line: trial counts, read each second, and the front, read after a trial."""

    study: optuna.Study
    n_trials: int | None
    counts: dict[str, int] = field(default_factory=dict)
    front: str = ""
    per_complete_s: float | None = None  # trial time spent per COMPLETE trial
    logged: set[int] = field(default_factory=set)  # trials whose end is in the log already
    objectives: list[Column] = field(default_factory=list)  # the metrics searched, in order
    signs: list[int] = field(default_factory=list)  # 1 where an objective is maximised, else -1
    searched: list[Objective] = field(default_factory=list)  # what decides the shown front

    def __post_init__(self) -> None:
        self.logged = {t.number for t in self.study.get_trials(deepcopy=False, states=_ENDED)}
        # An automl study names its objectives' metrics when it is created.
        metrics, directions = self.study.metric_names, self.study.directions
        self.objectives = [column_of(m) for m in metrics]  # labels and formats: the registry's
        self.signs = [1 if d.name == "MAXIMIZE" else -1 for d in directions]
        self.searched = [
            Objective(metric=m, direction=d.name.lower())
            for m, d in zip(metrics, directions, strict=True)
        ]

    def refresh(self) -> list[str]:
        """Count the trials; read the front and the time per COMPLETE trial again when one has
        ended.

        Returns:
            One line per trial that has ended since the last refresh, for a log.
        """
        counts, _ = state_counts(self.study._storage, self.study._study_id)
        ended = [counts[s] for s in ("COMPLETE", "FAIL")]
        if ended == [self.counts.get(s) for s in ("COMPLETE", "FAIL")]:
            self.counts = counts
            return []
        # The counts are read before the list, so that a trial ending in between is listed at
        # the next refresh; the front after it, so that it includes every trial listed.
        finished = self.study.get_trials(deepcopy=False, states=_ENDED)
        self._read_front()
        self.counts = counts
        new = [t for t in finished if t.number not in self.logged]
        self.logged |= {t.number for t in new}
        completions = sorted(
            t.datetime_complete for t in finished if t.state.name == "COMPLETE"
        )  # fmt: skip
        return [self._line(t, completions) for t in sorted(new, key=lambda t: t.number)]

    def _line(self, trial: optuna.trial.FrozenTrial, completions: list) -> str:
        """The trial's line; its count is of the trials COMPLETE when it ended."""
        total = f"/{self.n_trials}" if self.n_trials is not None else ""
        done = f"{bisect.bisect_right(completions, trial.datetime_complete)}{total} complete"
        if trial.state.name == "FAIL":
            what = f"failed: {trial.user_attrs.get('fail_reason', 'no reason recorded')}"
        else:
            what = ", ".join(self._values(trial))
        return f"{self.study.study_name}: trial {trial.number} {what}  ({done}, {self.text()})"

    def text(self) -> str:
        """The line's text: the counts, the ETA and the front's best, in the objectives."""
        c = self.counts
        return f"running {c['RUNNING']}  failed {c['FAIL']}  eta {self._eta()}  {self.front}"

    def _read_front(self) -> None:
        """The front as ``automl study pareto`` shows it: Optuna's, less its ties within noise."""
        self.per_complete_s = seconds_per_complete(self.study.get_trials(deepcopy=False))
        optunas = self.study.best_trials
        shown = shown_front(optunas, self.searched)
        front = [t for t in optunas if t.number in shown]
        self.front = f"front {len(front)}"
        if front:  # the best in the first objective, ties going to the next ones
            best = max(
                front, key=lambda t: [s * v for s, v in zip(self.signs, t.values, strict=True)]
            )
            first, *others = self._values(best)
            self.front += f"  best {first}" + "".join(f" @ {o}" for o in others)

    def _values(self, trial: optuna.trial.FrozenTrial) -> list[str]:
        """A COMPLETE trial's objective values as the study names them, each with its label:
        the objectives searched, not a fixed pair of metrics."""
        return [_shown(c, v) for c, v in zip(self.objectives, trial.values, strict=True)]

    def _eta(self) -> str:
        if self.n_trials is None or self.per_complete_s is None:
            return "-"
        left = max(self.n_trials - self.counts["COMPLETE"], 0) * self.per_complete_s
        return str(timedelta(seconds=round(left / max(self.counts["RUNNING"], 1))))


def _shown(column: Column, value: float) -> str:
    """``value`` in ``column``'s format, beside its label: after the value where the label
    names a unit (``0.0037 ms/sample``, ``5.36× speedup``), else before it (``val acc 0.97``)."""
    text = column.fmt.format(value)
    return f"{text} {column.label}" if column.unit else f"{column.label} {text}"


@contextlib.contextmanager
def refreshing(
    progress: Progress, task: int, status: Status, every_s: float = 1.0
) -> Iterator[None]:
    """Refresh the progress line every ``every_s`` while the block runs, and once after it.

    Polling shows a trial as running from its start, helpers' trials included; a trial-end
    callback would count only this process's trials, and only once they ended. Without a
    terminal (a log), each trial that ends prints one line instead.
    """

    def show() -> None:
        for line in status.refresh():
            if not progress.console.is_terminal:
                progress.console.print(line, highlight=False)
        progress.update(task, completed=status.counts["COMPLETE"], status=status.text())

    def poll() -> None:
        while not done.wait(every_s):
            try:
                show()
            except Exception as e:  # the loop retries an outage; the line waits for it
                if not storage_unreachable(e):
                    raise

    done = threading.Event()
    show()
    thread = threading.Thread(target=poll, name="progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
    show()
