"""Where stage cache entries live (docs/architecture.md#the-stage-cache).

An entry (keyed as `stage_cache.keys` says) lives in one file under
`<dir>/<stage>/<2 hex>/<digest>`. Values are bytes; the caller serializes (JSON helpers
are here, the compact float32 form of embeddings in `indexing/embed_cache.py`).

Crash and concurrency safety: a value is written to a temporary file in the same
directory, fsynced and renamed over the entry (`os.replace` is atomic), so a reader sees
the old entry, the new one or none. Every entry starts with a header holding the payload
length and sha256; an entry that fails the check (truncated, corrupted) is a miss and is
removed. That check is what makes `fsync=False` (`cache.fsync`) safe too: without it a
power loss may leave a torn entry, which is then read as a miss and recomputed; fsync
costs about 4 ms per entry on this machine's disk. Concurrent writers of one key each
write their own temporary file; the last rename wins and, the store being
content-addressed, they wrote the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.settings import CacheSettings
from stage_cache.keys import CacheKey

_MAGIC = b"ICE1"
_HEADER = struct.Struct(">4sQ32s")  # magic, payload length, payload sha256
_TEMP_PREFIX = ".tmp-"
# A temporary file this old belongs to a writer that died; prune removes it.
_STALE_TEMP_S = 3600.0
# Reads refresh an entry's mtime (for prune's least-recently-used order) at most this often.
_TOUCH_AFTER_S = 3600.0


def write_atomic(path: Path, parts: Sequence[bytes], *, prefix: str, fsync: bool) -> None:
    """`parts` as the whole content of `path`, or `path` as it was: written to a temporary
    file beside it whose name starts with `prefix`, then renamed over it (with `fsync`,
    flushed to disk first). A failed write leaves no temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            for part in parts:
                handle.write(part)
            if fsync:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


@dataclass
class StageReport:
    entries: int = 0
    bytes: int = 0


@dataclass
class CacheReport:
    stages: dict[str, StageReport] = field(default_factory=dict)
    temp_files: int = 0

    @property
    def entries(self) -> int:
        return sum(s.entries for s in self.stages.values())

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.stages.values())


@dataclass(frozen=True)
class PruneResult:
    removed: int
    freed_bytes: int


class StageCache:
    def __init__(self, root: Path | str, *, enabled: bool = True, fsync: bool = True) -> None:
        self.root = Path(root)
        self.enabled = enabled
        self.fsync = fsync

    @classmethod
    def from_settings(cls, settings: CacheSettings) -> StageCache:
        return cls(settings.dir, enabled=settings.enabled, fsync=settings.fsync)

    def path(self, key: CacheKey) -> Path:
        if not key.stage.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"stage name {key.stage!r} must be alphanumeric (with - or _)")
        return self.root / key.stage / key.digest[:2] / key.digest

    def get(self, key: CacheKey) -> bytes | None:
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        payload = _unwrap(raw)
        if payload is None:
            path.unlink(missing_ok=True)
            return None
        try:
            if time.time() - path.stat().st_mtime > _TOUCH_AFTER_S:
                os.utime(path)
        except FileNotFoundError:
            pass  # pruned meanwhile; the value read is still good
        return payload

    def put(self, key: CacheKey, value: bytes) -> None:
        if not self.enabled:
            return
        header = _HEADER.pack(_MAGIC, len(value), hashlib.sha256(value).digest())
        write_atomic(self.path(key), (header, value), prefix=_TEMP_PREFIX, fsync=self.fsync)

    def get_json(self, key: CacheKey) -> Any | None:
        raw = self.get(key)
        return None if raw is None else json.loads(raw)

    def put_json(self, key: CacheKey, value: Any) -> None:
        self.put(key, json_bytes(value))

    def entry_keys(self) -> list[CacheKey]:
        """Every entry's key (temporary files of writers excluded)."""
        return [
            CacheKey(stage, path.name)
            for path, stage, _, _ in self._walk()
            if not path.name.startswith(_TEMP_PREFIX)
        ]

    def report(self) -> CacheReport:
        report = CacheReport()
        for path, stage, size, _ in self._walk():
            if path.name.startswith(_TEMP_PREFIX):
                report.temp_files += 1
                continue
            entry = report.stages.setdefault(stage, StageReport())
            entry.entries += 1
            entry.bytes += size
        return report

    def prune(self, *, max_age_s: float | None = None, max_bytes: int | None = None) -> PruneResult:
        """Remove entries unused for `max_age_s`, then the least recently used until the
        cache holds at most `max_bytes`; also abandoned temporary files."""
        now = time.time()
        removed = freed = 0
        kept: list[tuple[float, int, Path]] = []
        for path, _, size, mtime in self._walk():
            age = now - mtime
            stale_temp = path.name.startswith(_TEMP_PREFIX) and age > _STALE_TEMP_S
            if stale_temp or (max_age_s is not None and age > max_age_s):
                path.unlink(missing_ok=True)
                removed, freed = removed + 1, freed + size
            elif not path.name.startswith(_TEMP_PREFIX):
                kept.append((mtime, size, path))
        if max_bytes is not None:
            total = sum(size for _, size, _ in kept)
            for _, size, path in sorted(kept, key=lambda item: item[0]):
                if total <= max_bytes:
                    break
                path.unlink(missing_ok=True)
                total -= size
                removed, freed = removed + 1, freed + size
        return PruneResult(removed=removed, freed_bytes=freed)

    def _walk(self) -> list[tuple[Path, str, int, float]]:
        """Entries (`<stage>/<digest[:2]>/<digest>`) and temporary files of entries. The
        run state, link records and connector state kept beside them in the cache
        directory have other layouts and are never reported or pruned."""
        found: list[tuple[Path, str, int, float]] = []
        if not self.root.is_dir():
            return found
        for stage_dir in self.root.iterdir():
            if not stage_dir.is_dir():
                continue
            for dirpath, _, filenames in os.walk(stage_dir):
                shard = Path(dirpath)
                if shard.parent != stage_dir:
                    continue
                for name in filenames:
                    if not (name.startswith(_TEMP_PREFIX) or name[:2] == shard.name):
                        continue
                    path = shard / name
                    try:
                        stat = path.stat()
                    except FileNotFoundError:
                        continue
                    found.append((path, stage_dir.name, stat.st_size, stat.st_mtime))
        return found


def json_bytes(value: Any) -> bytes:
    """A JSON value as an entry's bytes: compact UTF-8."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def _unwrap(raw: bytes) -> bytes | None:
    if len(raw) < _HEADER.size:
        return None
    magic, length, digest = _HEADER.unpack_from(raw)
    payload = raw[_HEADER.size :]
    if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload
