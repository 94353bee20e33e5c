"""What the last runs did to each document: version, pipeline fingerprint, failure (when
each source was last synced is `stage_cache.sync_log`'s).

A document is unchanged when its listed version and the pipeline fingerprint (the
settings every stage depends on) match what was last indexed AND Qdrant holds its points
of that version: the state file alone never decides that something is indexed. A
document that failed on bad input is not retried until its version or the pipeline
changes (docs/sources.md#bad-input). One JSON file per tenant and source scope under the cache
directory, written atomically.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from config.settings import Settings
from stage_cache.keys import config_hash
from stage_cache.sync_log import locked_update, read_json
from tasks.stages import normalize_config

# Bump when a stage's output changes for the same input (invalidates caches and state).
NORMALIZE_STAGE_VERSION = "5"
CHUNK_STAGE_VERSION = "12"


def pipeline_fingerprint(settings: Settings) -> str:
    """Changes whenever normalizing, chunking or embedding would give other output."""
    parts = [
        NORMALIZE_STAGE_VERSION,
        CHUNK_STAGE_VERSION,
        config_hash(normalize_config(settings)),
        config_hash(settings.chunking),
        config_hash(settings.embedder),
    ]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def chunking_fingerprint(settings: Settings) -> str:
    """Changes whenever the chunker would cut the same normalized text otherwise (a
    collection records it: `ingest reindex` rebuilds for a change of it)."""
    parts = [CHUNK_STAGE_VERSION, config_hash(settings.chunking)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DocumentState:
    version: str
    fingerprint: str
    error_code: str | None = None
    error_message: str | None = None


class SyncState:
    """Read once for planning; every update merges into the file as it is on disk now
    (`locked_update`), so concurrent batches never lose each other's entries."""

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
        return _documents(read_json(self.path))

    def _merge(self, change: Callable[[dict[str, DocumentState]], object]) -> None:
        def merged(raw: dict[str, Any]) -> dict[str, Any]:
            documents = _documents(raw)
            change(documents)
            return {k: asdict(v) for k, v in sorted(documents.items())}

        with self._lock:
            self._documents = _documents(locked_update(self.path, merged))


def _documents(raw: Mapping[str, Any]) -> dict[str, DocumentState]:
    try:
        return {k: DocumentState(**v) for k, v in raw.items()}
    except TypeError:
        return {}  # unreadable: every document is re-checked, nothing lost
