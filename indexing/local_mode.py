"""qdrant-client's local mode (`qdrant.engine: local`) as an engine of the store
(indexing/engine.py): its client, and what only it needs.

Local mode keeps a collection's points in memory, persists each in SQLite and has no
payload indexes: a filter is a Python scan over every point. So the store reads a
tenant's points from a map kept beside the collection (`LocalPoints`), scrolls in large
pages (`SCROLL_PAGE`) and tunes the SQLite file for many small writes (`LocalClient.tune`).
Before Edge was the embedded default a store at `qdrant.path` was local mode's, which
`stored_collections` finds.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from qdrant_client import QdrantClient

from chunking.record import Chunk
from config.settings import QdrantSettings
from indexing.engine import EngineName, PointMap, StoreClient, TenantPoints, storage_path
from indexing.store_lock import store_busy

# Local mode sorts every id and filters every point for each scroll page, so a scan
# costs pages x points: fewer, larger pages keep it linear (its records are in memory).
SCROLL_PAGE = 100_000


class LocalPoints:
    """Each tenant's points by physical collection, loaded by one scroll on first use and
    kept up to date by the store's writes. The connection holds the storage's file lock,
    so nothing else writes the collection and the maps are exact; they replace local
    mode's filtered scroll, a Python scan costing points x documents-asked per lookup.
    The store calls it under the connection's lock."""

    def __init__(self) -> None:
        self._collections: dict[str, dict[str, PointMap]] = {}

    def of_tenant(self, physical: str, tenant_id: str, scan: Callable[[], PointMap]) -> PointMap:
        """The tenant's points, read by `scan` (a scroll of them) on first use."""
        tenants = self._collections.setdefault(physical, {})
        if tenant_id not in tenants:
            tenants[tenant_id] = scan()
        return tenants[tenant_id]

    def written(self, physical: str, chunks: Iterable[Chunk]) -> None:
        """Points upserted: added to the tenants' maps loaded so far (one not loaded yet
        reads them with the rest when first asked)."""
        tenants = self._collections.get(physical, {})
        for chunk in chunks:
            known = tenants.get(chunk.tenant_id)
            if known is not None:
                known.setdefault(chunk.document_id, {})[chunk.point_id] = chunk.source_version_id

    def deleted(self, physical: str, tenant_id: str, point_ids: Iterable[str]) -> None:
        """Points deleted by id: gone from the tenant's map, if loaded."""
        gone = set(point_ids)
        for points in self._collections.get(physical, {}).get(tenant_id, {}).values():
            for point in gone & points.keys():
                del points[point]

    def forget(self, physical: str, tenant_id: str | None = None) -> None:
        """The tenant's map (None: every map of the collection) is read again when next
        asked: after a delete by filter, whose points are not known here, or a drop."""
        if tenant_id is None:
            self._collections.pop(physical, None)
        else:
            self._collections.get(physical, {}).pop(tenant_id, None)

    def clear(self) -> None:
        """The storage was let go: another process may write it before it is reopened."""
        self._collections.clear()


class LocalClient(QdrantClient):
    """qdrant-client's local mode on one directory."""

    payload_indexes = False
    scroll_page = SCROLL_PAGE
    # The storage closed under a call (the process let go of it, another run took it):
    # a later attempt opens it again.
    unavailable: tuple[type[Exception], ...] = (RuntimeError,)

    def __init__(self, path: Path) -> None:
        super().__init__(path=str(path))
        self.tenant_points: TenantPoints | None = LocalPoints()

    def tune(self, collection_name: str) -> None:
        """Local mode persists each point in its own SQLite transaction; with the default
        rollback journal every one is an fsync (about 120 points/s on this machine's
        disk). WAL with synchronous=NORMAL stays consistent after a process crash and at
        worst loses the last writes on power loss, which the next run re-upserts (points
        are compared by id). No-op if qdrant-client's layout changes."""
        local = getattr(self, "_client", None)
        collection = getattr(local, "collections", {}).get(collection_name)
        connection = getattr(getattr(collection, "storage", None), "storage", None)
        if isinstance(connection, sqlite3.Connection):
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")

    def optimize(self, collection_name: str) -> bool:
        """Local mode has no index to build."""
        return False


class LocalEngine:
    name: EngineName = "local"
    serialized = True  # the client is not thread-safe
    embedded = True

    def open(self, settings: QdrantSettings) -> StoreClient:
        path = storage_path(settings)
        try:
            return LocalClient(path)
        except RuntimeError:  # a process without the store's lock file holds the storage
            raise store_busy(path, 0) from None

    def earlier_store(self, settings: QdrantSettings) -> QdrantSettings | None:
        return None


def stored_collections(path: str | Path) -> list[str]:
    """Collections qdrant-client's local mode keeps at `path` (its `meta.json`), read
    without opening them: a store from before Edge was the embedded default."""
    try:
        meta = json.loads((Path(path) / "meta.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return []
    return sorted(meta.get("collections") or {})
