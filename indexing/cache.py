"""The content-addressed stage cache (SPEC §1, §5).

An entry is addressed by `sha256(stage | stage_version | config_hash | input_sha256)`, or
for embeddings by `sha256(model id | embed_text)` (SPEC §4), and lives in one file under
`<dir>/<stage>/<2 hex>/<digest>`. Values are bytes; the caller serializes (JSON helpers
and a compact float32 form for embeddings are here).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, SecretStr

from config.settings import CacheSettings
from indexing.embedders import Embedder, Embedding

_MAGIC = b"ICE1"
_HEADER = struct.Struct(">4sQ32s")  # magic, payload length, payload sha256
_TEMP_PREFIX = ".tmp-"
# A temporary file this old belongs to a writer that died; prune removes it.
_STALE_TEMP_S = 3600.0
# Reads refresh an entry's mtime (for prune's least-recently-used order) at most this often.
_TOUCH_AFTER_S = 3600.0
# Field names that hold secrets even when they are not typed SecretStr.
_SECRET_NAMES = frozenset({"token", "api_key", "password", "secret", "authorization"})


@dataclass(frozen=True)
class CacheKey:
    stage: str
    digest: str


def sha256_hex(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def stage_key(stage: str, stage_version: str, config_hash: str, input_sha256: str) -> CacheKey:
    """Key of a normalize/chunk/... result: `sha256(stage | version | config | input)`."""
    return CacheKey(stage, sha256_hex(f"{stage}|{stage_version}|{config_hash}|{input_sha256}"))


def embed_key(model_id: str, embed_text: str) -> CacheKey:
    """Key of one embedding: `sha256(model id | embed_text)`, whatever the chunk's id."""
    return CacheKey("embed", sha256_hex(f"{model_id}|{embed_text}"))


def config_hash(config: BaseModel | Mapping[str, Any]) -> str:
    """sha256 of a configuration's canonical JSON, secrets left out (SPEC §5)."""
    data = config.model_dump(mode="python") if isinstance(config, BaseModel) else config
    canonical = json.dumps(_without_secrets(data), sort_keys=True, default=str)
    return sha256_hex(canonical)


def _without_secrets(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            str(k): _without_secrets(v)
            for k, v in value.items()
            if not isinstance(v, SecretStr) and str(k).lower() not in _SECRET_NAMES
        }
    if isinstance(value, list | tuple):
        return [_without_secrets(v) for v in value if not isinstance(v, SecretStr)]
    return value


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
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(_HEADER.pack(_MAGIC, len(value), hashlib.sha256(value).digest()))
                handle.write(value)
                if self.fsync:
                    handle.flush()
                    os.fsync(handle.fileno())
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def get_json(self, key: CacheKey) -> Any | None:
        raw = self.get(key)
        return None if raw is None else json.loads(raw)

    def put_json(self, key: CacheKey, value: Any) -> None:
        self.put(key, json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())

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


def _unwrap(raw: bytes) -> bytes | None:
    if len(raw) < _HEADER.size:
        return None
    magic, length, digest = _HEADER.unpack_from(raw)
    payload = raw[_HEADER.size :]
    if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != digest:
        return None
    return payload


# --- embeddings ----------------------------------------------------------------------

_EMBEDDING_HEADER = struct.Struct("<II")  # dense size, sparse entries (or _NO_SPARSE)
_NO_SPARSE = 0xFFFFFFFF


def encode_embedding(embedding: Embedding) -> bytes:
    """float32 dense vector, then uint32 token ids and float32 weights of the sparse part."""
    dense = np.asarray(embedding.dense, dtype="<f4")
    sparse = embedding.sparse
    if sparse is None:
        return _EMBEDDING_HEADER.pack(dense.size, _NO_SPARSE) + dense.tobytes()
    ids = np.fromiter(sparse.keys(), dtype="<u4", count=len(sparse))
    weights = np.fromiter(sparse.values(), dtype="<f4", count=len(sparse))
    header = _EMBEDDING_HEADER.pack(dense.size, len(sparse))
    return header + dense.tobytes() + ids.tobytes() + weights.tobytes()


def decode_embedding(data: bytes) -> Embedding:
    size, entries = _EMBEDDING_HEADER.unpack_from(data)
    offset = _EMBEDDING_HEADER.size
    dense = np.frombuffer(data, dtype="<f4", count=size, offset=offset).tolist()
    if entries == _NO_SPARSE:
        return Embedding(dense=dense)
    offset += 4 * size
    ids = np.frombuffer(data, dtype="<u4", count=entries, offset=offset).tolist()
    weights = np.frombuffer(data, dtype="<f4", count=entries, offset=offset + 4 * entries)
    return Embedding(dense=dense, sparse=dict(zip(ids, weights.tolist(), strict=True)))


class EmbedResult(NamedTuple):
    """Unpacks as `(embeddings, hits, misses)`; hits and misses count distinct texts."""

    embeddings: list[Embedding]
    hits: int
    misses: int


def embed_with_cache(embedder: Embedder, texts: Sequence[str], cache: StageCache) -> EmbedResult:
    """Embeddings of `texts` in order; only texts never embedded by this model are sent
    to the embedder (each distinct text once), and their results are cached."""
    keys = [embed_key(embedder.model_id, text) for text in texts]
    found: dict[str, Embedding] = {}
    hits = 0
    for key in keys:
        if key.digest in found:
            continue
        raw = cache.get(key)
        if raw is not None:
            found[key.digest] = decode_embedding(raw)
            hits += 1
    pending = {key.digest: text for key, text in zip(keys, texts, strict=True)}
    pending = {digest: text for digest, text in pending.items() if digest not in found}
    if pending:
        fresh = embedder.embed(list(pending.values()))
        for (digest, _), embedding in zip(pending.items(), fresh, strict=True):
            found[digest] = embedding
            cache.put(CacheKey("embed", digest), encode_embedding(embedding))
    return EmbedResult(
        embeddings=[found[key.digest] for key in keys], hits=hits, misses=len(pending)
    )
