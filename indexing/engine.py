"""The engines behind the store: the client calls indexing/qdrant_store.py makes, named as
one protocol (`StoreClient`), and the three adapters that answer them.

- a server or cluster (`qdrant.url` set): qdrant-client's remote client, here;
- Qdrant Edge in-process on disk (`qdrant.engine: edge`, the default): indexing/edge.py;
- qdrant-client's local mode on disk (`qdrant.engine: local`): indexing/local_mode.py.

Requests and answers are qdrant-client's `models` for all three. What differs between the
engines (whether calls run one at a time, a directory one process opens, payload
indexes, scroll pages, the storage's own failures, the HNSW build, an older store at the
same path) is said by the adapter, as the protocol's attributes and hooks; the store
above tests none of it by engine name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from qdrant_client import QdrantClient, models

from chunking.record import Chunk
from config.settings import QdrantSettings
from indexing.store_schema import PayloadIndexSchema

EngineName = Literal["server", "edge", "local"]

# document -> {point id: version}
PointMap = dict[str, dict[str, str]]

# A server's scroll page: one request each, a server filters by its payload indexes.
_SERVER_SCROLL_PAGE = 1024


class TenantPoints(Protocol):
    """Each tenant's points by physical collection, kept by the store's writes beside an
    engine whose filters scan every point (indexing/local_mode.py)."""

    def of_tenant(
        self, physical: str, tenant_id: str, scan: Callable[[], PointMap]
    ) -> PointMap: ...

    def written(self, physical: str, chunks: Iterable[Chunk]) -> None: ...

    def deleted(self, physical: str, tenant_id: str, point_ids: Iterable[str]) -> None: ...

    def forget(self, physical: str, tenant_id: str | None = None) -> None: ...


class StoreClient(Protocol):
    """The client calls of the store, and what its engine says about itself."""

    # Filters are served by payload indexes (local mode scans every point instead).
    payload_indexes: bool
    # Points a scroll asks for at once.
    scroll_page: int
    # Failures of the storage itself (closed under a call): transient, a retry reopens it.
    unavailable: tuple[type[Exception], ...]
    # Each tenant's points kept beside the collections, where filters scan (local mode).
    tenant_points: TenantPoints | None

    def collection_exists(self, collection_name: str) -> bool: ...

    def get_collections(self) -> models.CollectionsResponse: ...

    def create_collection(
        self,
        collection_name: str,
        *,
        vectors_config: Mapping[str, models.VectorParams],
        sparse_vectors_config: Mapping[str, models.SparseVectorParams] | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        on_disk_payload: bool | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool: ...

    def get_collection(self, collection_name: str) -> models.CollectionInfo: ...

    def update_collection(
        self, collection_name: str, *, metadata: dict[str, Any] | None = None
    ) -> bool: ...

    def delete_collection(self, collection_name: str) -> bool: ...

    def get_aliases(self) -> models.CollectionsAliasesResponse: ...

    def update_collection_aliases(
        self, change_aliases_operations: Sequence[models.AliasOperations]
    ) -> bool: ...

    def create_payload_index(
        self,
        collection_name: str,
        field_name: str,
        field_schema: PayloadIndexSchema,
        *,
        wait: bool = True,
    ) -> Any: ...

    def upsert(
        self, collection_name: str, points: list[models.PointStruct], *, wait: bool = True
    ) -> Any: ...

    def delete(
        self,
        collection_name: str,
        points_selector: models.FilterSelector | models.PointIdsList,
        *,
        wait: bool = True,
    ) -> Any: ...

    def set_payload(
        self,
        collection_name: str,
        payload: dict[str, Any],
        *,
        points: models.FilterSelector | models.PointIdsList,
        wait: bool = True,
    ) -> Any: ...

    def retrieve(
        self,
        collection_name: str,
        ids: list[str],
        with_payload: bool = True,
        with_vectors: bool = False,
    ) -> list[models.Record]: ...

    def scroll(
        self,
        collection_name: str,
        *,
        scroll_filter: models.Filter | None = None,
        limit: int = 10,
        offset: Any = None,
        with_payload: bool | list[str] = True,
        with_vectors: bool = False,
    ) -> tuple[list[models.Record], Any]: ...

    def count(
        self, collection_name: str, count_filter: models.Filter | None = None, exact: bool = True
    ) -> models.CountResult: ...

    def facet(
        self,
        collection_name: str,
        key: str,
        facet_filter: models.Filter | None = None,
        limit: int = 10,
        exact: bool = False,
    ) -> models.FacetResponse: ...

    def query_batch_points(
        self, collection_name: str, requests: Sequence[models.QueryRequest]
    ) -> list[models.QueryResponse]: ...

    def tune(self, collection_name: str) -> None:
        """Made ready for a run's writes (a new collection, or one opened to write)."""

    def optimize(self, collection_name: str) -> bool:
        """Build the collection's index now, blocking, where the engine leaves that to its
        caller; True when anything changed."""

    def close(self) -> None: ...


class Engine(Protocol):
    """How one engine is opened."""

    name: EngineName
    # Its calls run one at a time (the connection's lock).
    serialized: bool
    # A directory one process opens at a time (indexing/store_lock.py).
    embedded: bool

    def open(self, settings: QdrantSettings) -> StoreClient: ...

    def earlier_store(self, settings: QdrantSettings) -> QdrantSettings | None:
        """Settings of a store another engine keeps at the same place, that this one
        would not read (None: there is none)."""


class ServerClient(QdrantClient):
    """qdrant-client's remote client to a server or cluster."""

    payload_indexes = True
    scroll_page = _SERVER_SCROLL_PAGE
    unavailable: tuple[type[Exception], ...] = ()
    tenant_points: TenantPoints | None = None

    def tune(self, collection_name: str) -> None:
        """A server needs no tuning."""

    def optimize(self, collection_name: str) -> bool:
        """A server builds its indexes by itself."""
        return False


class ServerEngine:
    name: EngineName = "server"
    serialized = False  # the client is thread-safe; a server runs calls concurrently
    embedded = False

    def open(self, settings: QdrantSettings) -> StoreClient:
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        # No version probe at construction: an unreachable server made it warn on every
        # open, and a run that cannot reach the server reports that itself.
        return ServerClient(
            url=settings.url,
            api_key=api_key,
            timeout=int(settings.timeout_s),
            check_compatibility=False,
        )

    def earlier_store(self, settings: QdrantSettings) -> QdrantSettings | None:
        return None


def engine_of(settings: QdrantSettings) -> Engine:
    """A URL selects the server, whatever `engine` says; else the embedded engine."""
    if settings.url:
        return ServerEngine()
    # The adapters are loaded when chosen (Edge's is a Rust extension); they import this
    # module for the protocol.
    if settings.engine == "edge":
        from indexing.edge import EdgeEngine

        return EdgeEngine()
    from indexing.local_mode import LocalEngine

    return LocalEngine()


def storage_path(settings: QdrantSettings) -> Path:
    """An embedded engine's directory, made when missing."""
    path = Path(settings.path)
    path.mkdir(parents=True, exist_ok=True)
    return path
