"""When each source scope was last synced (`SourceLog`: every run's summary writes its
scope's entry, readers list them), and how the run state files under the cache directory
are read and updated: JSON objects, changed under a file lock so concurrent writers
(threads, Dask worker processes) never lose each other's entries.
"""

from __future__ import annotations

import fcntl
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from config.settings import Settings
from stage_cache.store import write_atomic

log = logging.getLogger(__name__)


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
            locked_update(self.path, merged)
        except OSError as exc:
            # The log only informs readers: a run whose documents are done does not fail
            # on it (a full disk fails the documents that could not be stored, not this).
            log.warning("could not record the last sync of %s: %s", sync.scope, exc)

    def read(self, tenant_id: str) -> list[SourceSync]:
        entries = read_json(self.path).get(tenant_id) or {}
        try:
            return [
                SourceSync(**{**entry, "targets": tuple(entry["targets"])})
                for _, entry in sorted(entries.items())
            ]
        except (TypeError, KeyError):
            return []  # unreadable: the next run of each source writes its entry again


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in `path`; empty when there is none or it cannot be read."""
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def locked_update(path: Path, change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
    """Replace the JSON object in `path` by `change` of it as it is on disk now, under an
    exclusive file lock, so concurrent writers (threads, Dask worker processes) never
    lose each other's entries (a plain rewrite would keep only the last writer's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock_path = path.with_name(path.name + ".lock")
    with open(lock_path, "a+b") as lock_file:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)  # released when the file closes
        updated = change(read_json(path))
        write_atomic(path, (json.dumps(updated).encode(),), prefix=".state-", fsync=True)
        return updated
