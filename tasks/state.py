"""What the last runs did to each document: version, pipeline fingerprint, failure.

A document is unchanged when its listed version and the pipeline fingerprint (the
settings every stage depends on) match what was last indexed AND Qdrant holds its points
of that version: the state file alone never decides that something is indexed. A
document that failed on bad input is not retried until its version or the pipeline
changes (SPEC §2). One JSON file per tenant and source scope under the cache directory,
written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from config.settings import Settings
from indexing.cache import config_hash

# Bump when a stage's output changes for the same input (invalidates caches and state).
NORMALIZE_STAGE_VERSION = "1"
CHUNK_STAGE_VERSION = "1"


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
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._documents: dict[str, DocumentState] = {}
        if path.exists():
            try:
                raw = json.loads(path.read_text("utf-8"))
                self._documents = {k: DocumentState(**v) for k, v in raw.items()}
            except (ValueError, TypeError):
                self._documents = {}  # unreadable: every document is re-checked, nothing lost

    @classmethod
    def for_scope(cls, settings: Settings, scope: str) -> SyncState:
        safe = hashlib.sha256(f"{settings.tenant_id}|{scope}".encode()).hexdigest()[:24]
        return cls(Path(settings.cache.dir) / "state" / f"{safe}.json")

    def get(self, document_id: str) -> DocumentState | None:
        return self._documents.get(document_id)

    def update(self, entries: dict[str, DocumentState]) -> None:
        with self._lock:
            self._documents.update(entries)
            self._save()

    def forget(self, document_ids: list[str]) -> None:
        with self._lock:
            for document_id in document_ids:
                self._documents.pop(document_id, None)
            self._save()

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        payload = json.dumps({k: asdict(v) for k, v in sorted(self._documents.items())})
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
