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
import os
import shutil
import tempfile
from pathlib import Path


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

    def put(self, kind: str, key: str, suffix: str, source: Path) -> Path:
        """Copy ``source`` in atomically, then evict old entries past the size bound."""
        final = self.path(kind, key, suffix)
        handle, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        os.close(handle)
        shutil.copyfile(source, tmp)
        os.replace(tmp, final)
        self._evict()
        return final

    def _evict(self) -> None:
        entries = []
        for path in self.root.iterdir():
            if path.name.startswith(".tmp-"):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue  # evicted by another worker meanwhile
            entries.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
