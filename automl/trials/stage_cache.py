"""A content-keyed cache of trial stages, safe for concurrent workers and bounded in size.

Entries are files named by a hash of everything that determines them (architecture, training
settings, data fingerprint, seed, pruning ratio, bit-width). Writes go to a temporary file in
the same folder and are renamed into place, so a reader never sees half an entry and two
workers writing the same key both leave a whole one. Least recently used entries are evicted
past ``max_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

logger = logging.getLogger("automl.trials.stage_cache")
_TMP = ".tmp-"
_ORPHAN_AGE_S = 3600  # a temporary file this old belongs to no running writer
_ENGINES = "tensorrt"  # the folder of TensorRT engines and timing caches


def content_key(*parts: object) -> str:
    """A stable hash of JSON-able parts (dataclasses via their ``__dict__``)."""
    text = json.dumps(parts, sort_keys=True, default=lambda o: o.__dict__)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class StageCache:
    """Files under ``root`` keyed by ``<kind>-<key><suffix>``."""

    def __init__(self, root: Path | str, max_bytes: int) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def engine_dir(self) -> Path:
        """Where TensorRT keeps its engines and timing caches; never evicted by size.

        TensorRT names an engine by the graph's node names, not its weights: each graph gets a
        folder of its own under it (see :func:`automl.trials.trial.run_trial`).
        """
        folder = self.root / _ENGINES
        folder.mkdir(exist_ok=True)
        return folder

    def path(self, kind: str, key: str, suffix: str) -> Path:
        """Where the entry lives, whether or not it exists."""
        return self.root / f"{kind}-{key}{suffix}"

    def get(self, kind: str, key: str, suffix: str) -> Path | None:
        """The entry's path if present (and mark it recently used), else None."""
        path = self.path(kind, key, suffix)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def put(self, kind: str, key: str, suffix: str, source: Path) -> Path | None:
        """Copy ``source`` in atomically, then evict old entries past the size bound.

        Returns:
            The entry's path, or None when it could not be written (a full disk, say): that
            is logged, and costs a later trial the reuse, not this trial its result.
        """
        final = self.path(kind, key, suffix)
        tmp = None
        try:
            handle, tmp = tempfile.mkstemp(dir=self.root, prefix=_TMP)
            os.close(handle)
            shutil.copyfile(source, tmp)
            os.replace(tmp, final)
        except OSError as e:
            logger.warning("stage cache: %s not stored: %s", final.name, e)
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            return None
        try:
            self._evict()
        except OSError as e:  # e.g. a file another host holds open on a network share
            logger.warning("stage cache: eviction stopped: %s", e)
        return final

    def _evict(self) -> None:
        entries = []
        for path in self.root.iterdir():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # evicted by another worker meanwhile
            if path.name == _ENGINES:
                continue
            if path.name.startswith(_TMP):
                if time.time() - stat.st_mtime > _ORPHAN_AGE_S:  # its writer was killed
                    path.unlink(missing_ok=True)
                continue
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
