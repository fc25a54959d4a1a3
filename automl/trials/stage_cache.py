"""A content-keyed cache of trial stages, safe for concurrent workers and bounded in size.

Entries are files named by a hash of everything that determines them (architecture, training
settings, data fingerprint, seed, pruning ratio, bit-width). Writes go to a temporary file in
the same folder and are renamed into place, so a reader never sees half an entry and two
workers writing the same key both leave a whole one. TensorRT's engine folders are published
the same way, whole (see :meth:`StageCache.engine_folder`). Least recently used entries, engine
folders among them, are evicted past ``max_bytes``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from automl.settings import Settings

logger = logging.getLogger("automl.trials.stage_cache")
_TMP = ".tmp-"
_ORPHAN_AGE_S = 3600  # a temporary file this old belongs to no running writer
_ENGINES = "tensorrt"  # the kind of a folder of TensorRT engines and timing cache


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

    @contextmanager
    def engine_folder(self, key: str) -> Iterator[Path]:
        """A private folder for TensorRT's engines and timing cache, published whole after.

        TensorRT writes its engines into the folder it is given, and rewrites them there when
        they do not fit (another batch shape, say). So each trial gets a private folder, a
        copy of the published one where there is one, renamed into place when the block ends
        without an error if none is published by then. No worker ever reads a half-written
        engine, and evicting a published folder does not touch the files a trial holds.

        Args:
            key: What makes an engine (see :func:`content_key`): the graph's content, its
                serving batch, the GPU model and the runtime versions. TensorRT names an
                engine by the graph's node names, not its weights or shapes.
        """
        final = self.path(_ENGINES, key, "")
        private = Path(tempfile.mkdtemp(dir=self.root, prefix=_TMP))
        if self.get(_ENGINES, key, "") is not None:
            with suppress(OSError):  # evicted meanwhile: TensorRT builds the engines anew
                shutil.copytree(final, private, dirs_exist_ok=True)
        try:
            yield private
            _publish(private, final)
        finally:
            shutil.rmtree(private, ignore_errors=True)
        self._evict_logged()

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
        self._evict_logged()
        return final

    def _evict_logged(self) -> None:
        try:
            self._evict()
        except OSError as e:  # e.g. a file another host holds open on a network share
            logger.warning("stage cache: eviction stopped: %s", e)

    def _evict(self) -> None:
        entries = []
        for path in self.root.iterdir():
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # evicted by another worker meanwhile
            if path.name.startswith(_TMP):
                if time.time() - stat.st_mtime > _ORPHAN_AGE_S:  # its writer was killed
                    _remove(path)
                continue
            entries.append((stat.st_mtime, _size(path, stat), path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            _remove(path)
            total -= size


def _publish(private: Path, final: Path) -> None:
    """Rename a private engine folder into place, unless one is there already."""
    try:
        private.rename(final)
    except OSError as e:
        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):  # not another worker's folder
            logger.warning("stage cache: %s not stored: %s", final.name, e)


def _size(path: Path, stat: os.stat_result) -> int:
    """Bytes of a file, or of the files in an engine folder (one being removed counts 0)."""
    if not path.is_dir():
        return stat.st_size
    try:
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    except FileNotFoundError:
        return 0


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def stage_cache(settings: Settings) -> StageCache | None:
    """The trial-stage cache under the artifact store, or None when disabled."""
    if not settings.cache_enabled:
        return None
    return StageCache(settings.artifacts_dir / "cache", settings.cache_max_mb * 1024 * 1024)
