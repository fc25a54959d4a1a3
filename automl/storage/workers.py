"""Live workers, as the storage sees them: each worker beats a row with the targets it serves.

The API answers "why does this study wait?" from these rows, not from its own host's hardware:
an API on a CPU box must not call an A100 study's target absent while A100 workers poll.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from automl.hosts import worker_name
from automl.storage.tables import WORKERS, engine_of, ensure_tables

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from optuna.storages import BaseStorage

logger = logging.getLogger("automl.storage.workers")
LIVE_BEATS = 3  # a worker whose last beat is older than this many intervals is gone


class WorkerBeacon:
    """A daemon thread that records, every ``interval_s``, that this worker serves ``targets``."""

    def __init__(self, storage: BaseStorage, targets: Iterable[str], interval_s: float) -> None:
        self._engine = engine_of(storage)
        self._targets = ",".join(sorted(targets))
        self._interval_s = interval_s
        self.worker_id = worker_name()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="automl-beacon", daemon=True)

    def __enter__(self) -> WorkerBeacon:
        if self._engine is not None:
            self._safely(self._beat)
            self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        if self._engine is not None:
            self._safely(self._forget)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self._safely(self._beat)

    def _safely(self, write: Callable[[], None]) -> None:
        """A beacon never stops its worker: a storage outage costs a beat, which comes again."""
        try:
            write()
        except SQLAlchemyError as e:
            logger.warning("worker beacon: %s", type(e).__name__)

    def _forget(self) -> None:
        with self._engine.begin() as connection:
            connection.execute(delete(WORKERS).where(WORKERS.c.worker_id == self.worker_id))

    def _beat(self) -> None:
        ensure_tables(self._engine)
        now = _utcnow()
        row = {"targets": self._targets, "seen_at": now}
        with self._engine.begin() as connection:
            changed = connection.execute(
                update(WORKERS).where(WORKERS.c.worker_id == self.worker_id).values(**row)
            ).rowcount
            if not changed:
                connection.execute(insert(WORKERS).values(worker_id=self.worker_id, **row))


def live_targets(storage: BaseStorage, interval_s: float) -> frozenset[str]:
    """The targets that some worker beating every ``interval_s`` serves now."""
    engine = engine_of(storage)
    if engine is None:
        return frozenset()
    ensure_tables(engine)
    since = _utcnow() - timedelta(seconds=LIVE_BEATS * interval_s)
    with engine.connect() as connection:
        rows = connection.execute(select(WORKERS.c.targets).where(WORKERS.c.seen_at >= since))
        return frozenset(t for (targets,) in rows for t in targets.split(",") if t)


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
