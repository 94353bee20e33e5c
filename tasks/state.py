"""What the last runs did to each document: version, pipeline fingerprint, failure; and
when each source was last synced (`SourceLog`, what readers list).

A document is unchanged when its listed version and the pipeline fingerprint (the
settings every stage depends on) match what was last indexed AND Qdrant holds its points
of that version: the state file alone never decides that something is indexed. A
document that failed on bad input is not retried until its version or the pipeline
changes (docs/sources.md#bad-input). One JSON file per tenant and source scope under the cache
directory, written atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from config.settings import Settings
from stage_cache.keys import config_hash
from stage_cache.store import write_atomic
from tasks.stages import normalize_config

log = logging.getLogger(__name__)

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
    (`_locked_update`), so concurrent batches never lose each other's entries."""

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
        return _documents(_read_json(self.path))

    def _merge(self, change: Callable[[dict[str, DocumentState]], object]) -> None:
        def merged(raw: dict[str, Any]) -> dict[str, Any]:
            documents = _documents(raw)
            change(documents)
            return {k: asdict(v) for k, v in sorted(documents.items())}

        with self._lock:
            self._documents = _documents(_locked_update(self.path, merged))


def _documents(raw: Mapping[str, Any]) -> dict[str, DocumentState]:
    try:
        return {k: DocumentState(**v) for k, v in raw.items()}
    except TypeError:
        return {}  # unreadable: every document is re-checked, nothing lost


@dataclass(frozen=True)
class SourceSync:
    """A source scope's last sync: when it ended, how, and how many documents it saw."""

    scope: str
    source_type: str
    targets: tuple[str, ...]
    last_sync: str  # ISO 8601, with its offset
    status: str  # the run summary's: ok, documents_failed, listing_incomplete, ...
    documents: int

    def visible_part(self, containers: Mapping[str, int]) -> SourceSync:
        """This sync naming only the targets among `containers` (the spaces a reader
        may see), so a listing never names a space the reader cannot search."""
        targets = tuple(t for t in self.targets if t in containers)
        kind = self.scope.split(":", 1)[0]  # the run's kind, as the scope names it
        return replace(self, targets=targets, scope=f"{kind}:{','.join(targets)}")


class SourceLog:
    """The last sync of each source scope of each tenant, one JSON file under the cache
    directory; every run's summary updates its scope's entry (under a file lock, like
    the document state)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_settings(cls, settings: Settings) -> SourceLog:
        return cls(Path(settings.cache.dir) / "state" / "sources.json")

    def record(self, tenant_id: str, sync: SourceSync) -> None:
        def merged(raw: dict[str, Any]) -> dict[str, Any]:
            raw.setdefault(tenant_id, {})[sync.scope] = asdict(sync)
            return raw

        try:
            _locked_update(self.path, merged)
        except OSError as exc:
            # The log only informs readers: a run whose documents are done does not fail
            # on it (a full disk fails the documents that could not be stored, not this).
            log.warning("could not record the last sync of %s: %s", sync.scope, exc)

    def read(self, tenant_id: str) -> list[SourceSync]:
        entries = _read_json(self.path).get(tenant_id) or {}
        try:
            return [
                SourceSync(**{**entry, "targets": tuple(entry["targets"])})
                for _, entry in sorted(entries.items())
            ]
        except (TypeError, KeyError):
            return []  # unreadable: the next run of each source writes its entry again


def _read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; empty when there is none or it cannot be read."""
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _locked_update(
    path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    """Replace the JSON object in `path` by `change` of it as it is on disk now, under an
    exclusive file lock, so concurrent writers (threads, Dask worker processes) never
    lose each other's entries (a plain rewrite would keep only the last writer's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a+b") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)  # released when the file closes
        updated = change(_read_json(path))
        write_atomic(path, (json.dumps(updated).encode(),), prefix=".state-", fsync=True)
        return updated
