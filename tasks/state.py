"""What the last runs did to each document: version, pipeline fingerprint, failure.

A document is unchanged when its listed version and the pipeline fingerprint (the
settings every stage depends on) match what was last indexed AND Qdrant holds its points
of that version: the state file alone never decides that something is indexed. A
document that failed on bad input is not retried until its version or the pipeline
changes (SPEC §2). One JSON file per tenant and source scope under the cache directory,
written atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from config.settings import Settings
from stage_cache.keys import config_hash

# Bump when a stage's output changes for the same input (invalidates caches and state).
NORMALIZE_STAGE_VERSION = "3"
CHUNK_STAGE_VERSION = "10"


def pipeline_fingerprint(settings: Settings) -> str:
    """Changes whenever normalizing, chunking or embedding would give other output."""
    parts = [
        NORMALIZE_STAGE_VERSION,
        CHUNK_STAGE_VERSION,
        config_hash(settings.limits),
        config_hash(settings.chunking),
        config_hash(settings.embedder),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


@dataclass(frozen=True)
class DocumentState:
    version: str
    fingerprint: str
    error_code: str | None = None
    error_message: str | None = None


class SyncState:
    """Read once for planning; every update merges into the file as it is on disk now,
    under an exclusive file lock, so concurrent batches (threads, Dask worker processes)
    never lose each other's entries (a plain rewrite would keep only the last writer's)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._documents = self._read()

    @classmethod
    def for_scope(cls, settings: Settings, scope: str) -> SyncState:
        safe = hashlib.sha256(f"{settings.tenant_id}|{scope}".encode()).hexdigest()[:24]
        return cls(Path(settings.cache.dir) / "state" / f"{safe}.json")

    def get(self, document_id: str) -> DocumentState | None:
        return self._documents.get(document_id)

    def update(self, entries: dict[str, DocumentState]) -> None:
        self._merge(lambda documents: documents.update(entries))

    def forget(self, document_ids: list[str]) -> None:
        self._merge(lambda documents: [documents.pop(d, None) for d in document_ids])

    def _read(self) -> dict[str, DocumentState]:
        try:
            raw = json.loads(self.path.read_text("utf-8"))
            return {k: DocumentState(**v) for k, v in raw.items()}
        except FileNotFoundError:
            return {}
        except (ValueError, TypeError):
            return {}  # unreadable: every document is re-checked, nothing lost

    def _merge(self, change: Callable[[dict[str, DocumentState]], object]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._lock, open(lock_path, "a+b") as lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)  # released when the file closes
            documents = self._read()
            change(documents)
            self._save(documents)
            self._documents = documents

    def _save(self, documents: dict[str, DocumentState]) -> None:
        payload = json.dumps({k: asdict(v) for k, v in sorted(documents.items())})
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
