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
from automl.search.budget import seconds_per_complete
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

    def __post_init__(self) -> None:
        self.logged = {t.number for t in self.study.get_trials(deepcopy=False, states=_ENDED)}

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
            what = f"accuracy {trial.user_attrs['accuracy']:.3f}, {_speed(trial.user_attrs)}"
        return f"{self.study.study_name}: trial {trial.number} {what}  ({done}, {self.text()})"

    def text(self) -> str:
        """The line's text, latency in ms per sample."""
        c = self.counts
        return f"running {c['RUNNING']}  failed {c['FAIL']}  eta {self._eta()}  {self.front}"

    def _read_front(self) -> None:
        self.per_complete_s = seconds_per_complete(self.study.get_trials(deepcopy=False))
        front = self.study.best_trials
        best = max(front, key=lambda t: t.user_attrs.get("accuracy", 0.0), default=None)
        self.front = f"front {len(front)}"
        if best is not None:
            self.front += (
                f"  best acc {best.user_attrs['accuracy']:.3f} @ {_speed(best.user_attrs, '.4f')}"
            )

    def _eta(self) -> str:
        if self.n_trials is None or self.per_complete_s is None:
            return "-"
        left = max(self.n_trials - self.counts["COMPLETE"], 0) * self.per_complete_s
        return str(timedelta(seconds=round(left / max(self.counts["RUNNING"], 1))))


def _speed(attrs: dict, latency_format: str = ".4g") -> str:
    """A trial's speed as its study searches it: the max rate under load of a serving study,
    else the latency per sample."""
    if "max_rate_rps" in attrs:
        return f"{attrs['max_rate_rps']:,.0f} req/s"
    return f"{attrs['latency_per_sample_ms']:{latency_format}} ms/sample"


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
