"""Every Qdrant call of the project (docs/qdrant.md#the-collection).

Three engines behind one store: Qdrant Edge in-process on disk (the default,
`qdrant.engine: edge`, indexing/edge.py), qdrant-client's local mode on disk
(`qdrant.engine: local`), or a server or cluster when `qdrant.url` (+ `api_key`) is set.
The store speaks qdrant-client's API to all three; nothing above this module knows which
runs. The configured `qdrant.collection` name is an ALIAS that readers use; the points
live in a physical collection behind it, so a re-index into another collection can be
switched to by moving the alias.

What a collection holds (named vectors, payload indexes, metadata) is
indexing/store_schema.py; what only local mode needs (its point maps, scroll size,
SQLite tuning) is indexing/local_mode.py, called only when that engine runs.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from threading import Lock, RLock
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import httpx
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from chunking.record import CONTAINER_FIELD, Chunk, point_id
from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import QdrantSettings
from indexing import local_mode, store_lock
from indexing.embedders import Embedding
from indexing.lexical import SparseWeights
from indexing.local_mode import LocalPoints, PointMap
from indexing.store_schema import (
    DENSE,
    DENSE_PARTS,
    LEXICAL,
    METADATA_KEY,
    PAYLOAD_INDEXES,
    QUANTIZATION,
    REINDEX_ADVICE,
    SPARSE,
    CollectionSchema,
    schema_of,
)

if TYPE_CHECKING:
    from indexing.edge import EdgeClient

log = logging.getLogger(__name__)

RRF_K = 2  # Qdrant's and qdrant-client's default
FIRST_PREFETCH_WEIGHT = 1.0001  # see _rrf
_SCROLL_PAGE = 1024

# Payload = the chunk record without `embed_text` (header + overlap + md_text, all of
# which the payload already holds), to keep points lean.
_PAYLOAD_EXCLUDED = frozenset({"embed_text"})


def chunk_payload(chunk: Chunk) -> dict[str, Any]:
    """The payload a chunk's point holds: its record without the embed_text."""
    return {k: v for k, v in chunk.to_record().items() if k not in _PAYLOAD_EXCLUDED}


# One chunk's `dense_parts`: a vector per part.
PartVectors = Sequence[Sequence[float]]

T = TypeVar("T")


# --- connections ---------------------------------------------------------------------

# What a client call does: `writes` change a collection (points, payloads, indexes,
# aliases, metadata, creation), `reads` leave it as it was.
StoreWork = Literal["writes", "reads"]


class StoreSeconds:
    """Seconds spent inside the store client's own calls, by `StoreWork`: what the engine
    took, without the work around it (embedding, payloads built, waits for the lock).
    The embedded engines run one call at a time (the connection's lock), so their sum is
    wall time; a server's calls from several threads overlap, and so may the sum."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._seconds: dict[str, float] = {"writes": 0.0, "reads": 0.0}

    def timed(self, work: StoreWork, operation: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return operation()
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self._seconds[work] += elapsed

    def totals(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)


class QdrantConnection:
    """The client of one Qdrant (a server URL, an Edge directory, or a local-mode
    directory) and what the stores over it share. The embedded engines allow one process
    per directory (a file lock), so a run opens one connection, hands its stores around,
    and closes it at the end; a closed connection opens a new client when next used
    (Qdrant came back)."""

    def __init__(self, settings: QdrantSettings) -> None:
        self.settings = settings
        self.engine = engine_of(settings)
        self._client: QdrantClient | EdgeClient | None = None
        self._opening = Lock()
        # The embedded engines' calls are serialized: local mode's client is not
        # thread-safe, and an Edge shard holds the GIL while it works anyway.
        self.lock: AbstractContextManager[Any] = (
            nullcontext() if self.engine == "server" else RLock()
        )
        self.creating = Lock()  # one collection creation at a time in this process
        # The client's seconds of the stores over this connection (but those given their
        # own, `QdrantStore(seconds=...)`).
        self.seconds = StoreSeconds()
        # Local mode only: each tenant's points, kept beside the collection.
        self.local_points = LocalPoints() if self.local else None
        # What this run was already told about a collection's schema (said once a run).
        self.warned: set[str] = set()

    @property
    def local(self) -> bool:
        """qdrant-client's local mode: no payload indexes, filters scanned in Python."""
        return self.engine == "local"

    def __enter__(self) -> QdrantConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def client(self) -> QdrantClient | EdgeClient:
        """The client, opened on first use; an embedded store's lock is taken first
        (waiting `qdrant.lock_wait_s` for another process to let it go)."""
        with self._opening:
            if self._client is None:
                embedded = self.engine != "server"
                if embedded:
                    store_lock.acquire(Path(self.settings.path), self.settings.lock_wait_s)
                try:
                    self._client = _open_client(self.settings, self.engine)
                except BaseException:
                    if embedded:
                        store_lock.release(Path(self.settings.path))
                    raise
            return self._client

    def close(self) -> None:
        """Close the client; an embedded store's lock goes with it (when no other
        connection of this process holds the store)."""
        with self._opening:
            client, self._client = self._client, None
            if self.local_points is not None:
                self.local_points.clear()
            if client is not None:
                client.close()
                if self.engine != "server":
                    store_lock.release(Path(self.settings.path))


Engine = Literal["server", "edge", "local"]


def engine_of(settings: QdrantSettings) -> Engine:
    """A URL selects the server, whatever `engine` says; else the embedded engine."""
    return "server" if settings.url else settings.engine


def _open_client(settings: QdrantSettings, engine: Engine) -> QdrantClient | EdgeClient:
    if engine == "server":
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        # No version probe at construction: an unreachable server made it warn on every
        # open, and a run that cannot reach the server reports that itself.
        return QdrantClient(
            url=settings.url,
            api_key=api_key,
            timeout=int(settings.timeout_s),
            check_compatibility=False,
        )
    path = Path(settings.path)
    path.mkdir(parents=True, exist_ok=True)
    if engine == "edge":
        from indexing.edge import EdgeClient  # the Rust extension, loaded only when used

        return EdgeClient(path, index_after_vectors=settings.optimize_threshold)
    return local_mode.open_client(path)


# --- results and filters -------------------------------------------------------------


@dataclass(frozen=True)
class SearchFilters:
    """Search restrictions. `user`/`groups` enable the ACL filter: a chunk is visible when
    `acl.public` is true, or when it passes both the read restrictions (`acl.restricted`
    is false, `acl.users` holds the user, or `acl.groups` meets the groups) and the space
    (`acl.space_open` is not false, `acl.space_users` holds the user, or
    `acl.space_groups` meets the groups). A payload without the space fields (files, or
    written before space permissions were read) has no space level. `public_only` (a
    reader without an identity) shows only chunks whose `acl.public` is true; without it,
    user or groups, nothing is filtered by access."""

    tenant_id: str | None = None
    containers: tuple[str, ...] = ()  # spaces, shelves: `SourceDocument.container`
    labels: tuple[str, ...] = ()
    source_types: tuple[str, ...] = ()
    user: str | None = None
    groups: tuple[str, ...] = ()
    # Archived documents (`archived: true`, where a source lists them):
    # None finds it with the rest, False leaves it out, True finds only it.
    archived: bool | None = None
    public_only: bool = False


@dataclass(frozen=True)
class ScoredPayload:
    point_id: str
    score: float
    payload: dict[str, Any]


def _match(key: str, value: str | bool) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def _match_any(key: str, values: Sequence[str]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def search_filter(filters: SearchFilters) -> models.Filter | None:
    must: list[models.Condition] = []
    if filters.tenant_id is not None:
        must.append(_match("tenant_id", filters.tenant_id))
    if filters.containers:
        must.append(_match_any(CONTAINER_FIELD, filters.containers))
    if filters.labels:
        must.append(_match_any("labels", filters.labels))
    if filters.source_types:
        must.append(_match_any("source_type", filters.source_types))
    if filters.archived is not None:
        archived = _match("archived", True)
        must.append(archived if filters.archived else models.Filter(must_not=[archived]))
    if filters.user is not None or filters.groups:
        restrictions = _acl_level(filters, "acl.users", "acl.groups")
        restrictions.append(_match("acl.restricted", False))
        space = _acl_level(filters, "acl.space_users", "acl.space_groups")
        space.append(models.Filter(must_not=[_match("acl.space_open", False)]))
        levels = models.Filter(
            must=[models.Filter(should=restrictions), models.Filter(should=space)]
        )
        must.append(models.Filter(should=[_match("acl.public", True), levels]))
    elif filters.public_only:
        must.append(_match("acl.public", True))
    return models.Filter(must=must) if must else None


def _acl_level(filters: SearchFilters, users: str, groups: str) -> list[models.Condition]:
    """Conditions of which one lets the user pass one ACL level."""
    passes: list[models.Condition] = []
    if filters.user is not None:
        passes.append(_match(users, filters.user))
    if filters.groups:
        passes.append(_match_any(groups, filters.groups))
    return passes


# --- the store -----------------------------------------------------------------------


def _sparse_vector(weights: SparseWeights) -> models.SparseVector:
    """Indices unique (a map's keys) and sorted, as every engine reads them best; Edge
    would store a repeated index and count it twice."""
    ordered = sorted(weights.items())
    return models.SparseVector(
        indices=[index for index, _ in ordered], values=[value for _, value in ordered]
    )


def _query_of(
    vector: Sequence[float] | SparseWeights | PartVectors,
) -> models.SparseVector | list[float] | list[list[float]]:
    """A query vector as the client takes it: sparse, dense, or a multivector (MaxSim)."""
    if isinstance(vector, dict):
        return _sparse_vector(vector)
    if vector and not isinstance(vector[0], float | int):
        return [[float(x) for x in row] for row in vector]  # type: ignore[union-attr]
    return [float(x) for x in vector]  # type: ignore[arg-type]


def _rrf(prefetches: int) -> models.RrfQuery:
    """Reciprocal rank fusion with Qdrant's own k. Its scores tie often (one point first in
    one ranking, another first in the other); Edge and a server order ties by a hash that
    changes from one process to the next, local mode by prefetch. A first prefetch (the
    model's ranking) heavier by 0.01% breaks every tie its way on every engine, the same
    each time, and moves no score by more than that."""
    return models.RrfQuery(
        rrf=models.Rrf(k=RRF_K, weights=[FIRST_PREFETCH_WEIGHT] + [1.0] * (prefetches - 1))
    )


class QdrantStore:
    """One collection (by default the configured alias) of one Qdrant. `schema` is what
    the embedder and settings make; `holds` what the collection has (known once
    `ensure_collection` or `describe` ran), which is what writes and searches use. Its
    client calls' seconds go to `seconds`, by default the connection's."""

    def __init__(
        self,
        connection: QdrantConnection,
        schema: CollectionSchema,
        *,
        collection: str | None = None,
        seconds: StoreSeconds | None = None,
    ) -> None:
        self.connection = connection
        self.seconds = seconds if seconds is not None else connection.seconds
        self.settings = connection.settings
        self.schema = schema
        self.holds = schema
        self.alias = self.settings.collection
        self.collection = collection or self.settings.collection
        self.client = connection.client
        self._lock = connection.lock

    @property
    def vector_size(self) -> int:
        return self.schema.vector_size

    def _call(self, what: str, operation: Callable[[], T], *, writes: bool = False) -> T:
        """Run a client call, its seconds counted as `writes` (it changes a collection) or
        `reads`, timed inside the lock so a wait for another call is not counted; map
        failures to UPSERT_FAILED (transient when retrying may help: connection errors,
        timeouts, 429 and 5xx)."""
        try:
            with self._lock:
                return self.seconds.timed("writes" if writes else "reads", operation)
        except UnexpectedResponse as exc:
            status = exc.status_code or 0
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                f"{what}: Qdrant answered {status}: {exc.content[:300]!r}",
                subject=self.collection,
                transient=status == 429 or status >= 500,
            ) from None
        except (ResponseHandlingException, httpx.TransportError, ConnectionError) as exc:
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                f"{what}: Qdrant unavailable ({type(exc).__name__}: {exc})",
                subject=self.collection,
                transient=True,
            ) from None
        except RuntimeError as exc:
            if not self.connection.local:
                raise
            # local mode: the storage was closed under this call (the process let go of
            # it, another run took it); a later attempt opens it again
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                f"{what}: Qdrant local storage unavailable ({exc})",
                subject=self.collection,
                transient=True,
            ) from None

    # -- collections and aliases --

    def resolve(self, name: str | None = None) -> str | None:
        """The physical collection behind `name` (an alias or a collection), or None."""
        name = name or self.collection
        aliases = self._call("list aliases", self.client.get_aliases).aliases
        for alias in aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return name if self._call("check", lambda: self.client.collection_exists(name)) else None

    def ensure_collection(self) -> str:
        """Make sure the collection (or the alias and a collection behind it) exists with the
        expected vectors and payload indexes; returns the physical collection name.

        Race-free: this process creates under a lock, and other processes (Dask workers, a
        second run) all create the same first name, `<alias>_initial`, at most once, so
        concurrent first batches never write into a collection the alias then leaves."""
        with self.connection.creating:
            physical = self.resolve()
            if physical is None:
                self.refuse_over_local_mode()
                direct = self.collection != self.alias  # a named collection, no alias
                physical = self.collection if direct else f"{self.alias}_initial"
                if not self._exists(physical):
                    try:
                        self._create(physical)
                    except IngestError:
                        if not self._exists(physical):
                            raise  # a real failure, not another process creating it first
                if not direct:
                    self.point_alias_at(physical)
            self._check_vectors(physical)
        self._tune_local_storage(physical)
        return physical

    def refuse_over_local_mode(self) -> None:
        """Edge's first collection is not made beside a local-mode store at the same path:
        the run would index everything again while the old points sit unused."""
        if self.connection.engine != "edge":
            return
        found = local_mode.stored_collections(self.settings.path)
        if found:
            raise ConfigError(
                f"{self.settings.path} holds a qdrant-client local-mode store "
                f"(collections {', '.join(found)}), and the embedded engine is now Qdrant "
                "Edge: run `ingest reindex` to move it into Edge (vectors are copied, "
                "nothing is fetched or chunked again), or set qdrant.engine: local to "
                "keep using local mode",
                setting="qdrant.engine",
            )

    def _exists(self, name: str) -> bool:
        return self._call("exists", lambda: self.client.collection_exists(name))

    def _tune_local_storage(self, physical: str) -> None:
        """Local mode's SQLite made fit for a run's many small writes; nothing to do on
        another engine."""
        if self.connection.local:
            with self._lock:
                local_mode.tune_storage(self.client, physical)

    def _create(self, name: str, state: str = "live", **recorded: str) -> str:
        """A collection for `self.schema`, its metadata saying what made its vectors, its
        `state` and any other `recorded` fields."""
        on_disk = self.settings.on_disk
        sparse: dict[str, models.SparseVectorParams] = {}
        if self.schema.sparse:
            sparse[SPARSE] = models.SparseVectorParams(
                index=models.SparseIndexParams(on_disk=on_disk)
            )
        if self.schema.lexical:
            sparse[LEXICAL] = models.SparseVectorParams(
                index=models.SparseIndexParams(on_disk=on_disk), modifier=models.Modifier.IDF
            )
        metadata = {
            METADATA_KEY: {
                "model_id": self.schema.model_id,
                "lexical_id": self.schema.lexical_id if self.schema.lexical else None,
                **({"parts_id": self.schema.parts_id} if self.schema.parts else {}),
                **({"chunking_id": self.schema.chunking_id} if self.schema.chunking_id else {}),
                "state": state,
                **recorded,
            }
        }
        vectors = {
            DENSE: models.VectorParams(
                size=self.vector_size,
                distance=models.Distance.COSINE,
                on_disk=on_disk,
                quantization_config=QUANTIZATION[self.settings.quantization],
            )
        }
        if self.schema.parts:
            vectors[DENSE_PARTS] = models.VectorParams(
                size=self.vector_size,
                distance=models.Distance.COSINE,
                on_disk=on_disk,
                multivector_config=models.MultiVectorConfig(
                    comparator=models.MultiVectorComparator.MAX_SIM
                ),
                # No graph: the parts only rescore the other vectors' candidates (see
                # `query`), and linking their 3-4 vectors a chunk was most of the build.
                hnsw_config=models.HnswConfigDiff(m=0),
            )
        self._call(
            "create collection",
            lambda: self.client.create_collection(
                name,
                vectors_config=vectors,
                sparse_vectors_config=sparse or None,
                shard_number=self.settings.shard_number,
                replication_factor=self.settings.replication_factor,
                on_disk_payload=on_disk,
                metadata=metadata,
            ),
            writes=True,
        )
        with warnings.catch_warnings():
            # Local mode keeps no payload indexes and warns so; they matter on a server.
            warnings.filterwarnings("ignore", message="Payload indexes have no effect")
            self._create_payload_indexes(name, PAYLOAD_INDEXES)
        return name

    def _create_payload_indexes(self, name: str, indexes: Mapping[str, Any]) -> None:
        for field_name, schema in indexes.items():
            self._call(
                f"index {field_name}",
                partial(
                    self.client.create_payload_index,
                    name,
                    field_name=field_name,
                    field_schema=schema,
                    wait=True,
                ),
                writes=True,
            )

    def _add_missing_payload_indexes(self, physical: str, info: Any) -> None:
        """A collection created before an index was declared gets it now, once. Local
        mode keeps no payload indexes."""
        if self.connection.local:
            return
        missing = {k: v for k, v in PAYLOAD_INDEXES.items() if k not in info.payload_schema}
        self._create_payload_indexes(physical, missing)

    def describe(self, physical: str | None = None) -> CollectionSchema:
        """What a collection (by default this store's) holds, from its configuration and
        metadata."""
        name = physical or self.resolve() or self.collection
        return schema_of(self._call("describe", lambda: self.client.get_collection(name)))

    def _check_vectors(self, physical: str) -> None:
        """Writes go to what the collection holds. Vectors it cannot hold (another size or
        model) stop the run naming the re-index; a vector it lacks (lexical, sparse) is
        left out of writes and searches (the run report says so, tasks.pipeline.plan)."""
        info = self._call("describe", lambda: self.client.get_collection(physical))
        self._add_missing_payload_indexes(physical, info)
        self.holds = schema_of(info)
        self.holds.refuse_conflicts(self.schema, physical)
        lacks = self.holds.lacks(self.schema)
        if lacks and physical not in self.connection.warned:
            self.connection.warned.add(physical)
            log.info(
                "collection %r lacks %s: written and searched without it; %s",
                physical,
                " and ".join(lacks.values()),
                REINDEX_ADVICE,
            )

    def point_alias_at(self, physical: str) -> None:
        """Point the alias at `physical` in one atomic operation."""
        previous = self.resolve(self.alias)
        operations: list[models.AliasOperations] = []
        if previous is not None and previous != self.alias:
            operations.append(
                models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=self.alias))
            )
        operations.append(
            models.CreateAliasOperation(
                create_alias=models.CreateAlias(collection_name=physical, alias_name=self.alias)
            )
        )
        self._call(
            "swap alias", lambda: self.client.update_collection_aliases(operations), writes=True
        )

    def drop_collection(self, name: str) -> None:
        self._call("drop collection", lambda: self.client.delete_collection(name), writes=True)
        if self.connection.local_points is not None:
            self.connection.local_points.forget(name)

    # -- re-index bookkeeping (indexing/reindex.py) --

    def collections(self) -> list[str]:
        listed = self._call("list collections", self.client.get_collections).collections
        return sorted(c.name for c in listed)

    def recorded(self, name: str) -> dict[str, Any]:
        """What this project recorded in a collection's metadata (empty if nothing)."""
        info = self._call("describe", lambda: self.client.get_collection(name))
        return dict((info.config.metadata or {}).get(METADATA_KEY) or {})

    def record(self, name: str, **fields: Any) -> None:
        """Merge `fields` into what the collection's metadata records."""
        recorded = {**self.recorded(name), **fields}
        self._call(
            "record metadata",
            lambda: self.client.update_collection(name, metadata={METADATA_KEY: recorded}),
            writes=True,
        )

    def create_build(self, name: str, source: str) -> None:
        """A collection for this store's schema, recorded as a re-index of `source`."""
        with self.connection.creating:
            self._create(name, state="building", source=source)
        self._tune_local_storage(name)
        self.holds = self.schema

    def pages(self, size: int) -> Iterator[list[models.Record]]:
        """Every point of the collection with payload and vectors, `size` at a time."""
        page: list[models.Record] = []
        for record in self._scroll(None, True, with_vectors=True, page=size):
            page.append(record)
            if len(page) == size:
                yield page
                page = []
        if page:
            yield page

    def document_points(self) -> PointMap:
        """{document id: {point id: version}} of every point (any tenant)."""
        return self._scan_points(models.Filter())

    def point_ids(self) -> set[str]:
        return {str(record.id) for record in self._scroll(None, False)}

    def payloads(self, point_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """Payloads of these points (any tenant), by point id; absent ones left out."""
        records = self._call(
            "retrieve",
            lambda: self.client.retrieve(
                self.collection, ids=list(point_ids), with_payload=True, with_vectors=False
            ),
        )
        return {str(record.id): record.payload or {} for record in records}

    def delete_ids(self, point_ids: Sequence[str]) -> None:
        """Delete points by id, whatever their tenant (a re-index build's strays)."""
        if point_ids:
            self._call(
                "delete points",
                lambda: self.client.delete(
                    self.collection,
                    points_selector=models.PointIdsList(points=list(point_ids)),
                    wait=True,
                ),
                writes=True,
            )

    def payload_schema(self) -> dict[str, str]:
        """Indexed payload fields reported by Qdrant (local mode reports none: it keeps no
        payload indexes; a server and Edge do)."""
        physical = self._physical()
        info = self._call("describe", lambda: self.client.get_collection(physical))
        return {name: str(schema.data_type.value) for name, schema in info.payload_schema.items()}

    # -- points --

    def upsert(
        self,
        chunks: Sequence[Chunk],
        embeddings: Sequence[Embedding],
        lexical: Sequence[SparseWeights] | None = None,
        parts: Sequence[PartVectors] | None = None,
    ) -> int:
        """Write points (id = `Chunk.point_id`, so re-running is idempotent), batched.
        `lexical` (one weights map per chunk) and `parts` (the vectors of each chunk's
        parts) are needed when the collection holds them."""
        if len(chunks) != len(embeddings):
            raise ValueError(f"{len(chunks)} chunks but {len(embeddings)} embeddings")
        if self.holds.lexical and (lexical is None or len(lexical) != len(chunks)):
            raise ValueError("the collection holds lexical vectors: give one per chunk")
        if self.holds.parts and (parts is None or len(parts) != len(chunks)):
            raise ValueError("the collection holds part vectors: give each chunk's")
        weights: Sequence[SparseWeights | None] = (
            lexical if lexical is not None else [None] * len(chunks)
        )
        part_vectors: Sequence[PartVectors | None] = (
            parts if parts is not None else [None] * len(chunks)
        )
        batch_size = self.settings.upsert_batch_size
        for start in range(0, len(chunks), batch_size):
            batch = chunks[start : start + batch_size]
            points = [
                self._point(chunk, embedding, lexical_weights, chunk_parts)
                for chunk, embedding, lexical_weights, chunk_parts in zip(
                    batch,
                    embeddings[start : start + batch_size],
                    weights[start : start + batch_size],
                    part_vectors[start : start + batch_size],
                    strict=True,
                )
            ]
            with self._lock:
                upsert = partial(self.client.upsert, self.collection, points=points)
                self._call("upsert", upsert, writes=True)
                local_points = self.connection.local_points
                if local_points is not None:
                    local_points.written(self._physical(), batch)
        return len(chunks)

    def _physical(self) -> str:
        """The physical collection behind this store's name (the name when none is)."""
        return self.resolve() or self.collection

    def _scan_points(self, selection: models.Filter) -> PointMap:
        found: PointMap = defaultdict(dict)
        for record in self._scroll(selection, ["document_id", "source_version_id"]):
            payload = record.payload or {}
            found[str(payload["document_id"])][str(record.id)] = str(
                payload.get("source_version_id", "")
            )
        return found

    def _point(
        self,
        chunk: Chunk,
        embedding: Embedding,
        lexical: SparseWeights | None,
        parts: PartVectors | None,
    ) -> models.PointStruct:
        if len(embedding.dense) != self.vector_size:
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                f"vector of size {len(embedding.dense)}, collection expects {self.vector_size}",
                subject=chunk.document_id,
            )
        vector: dict[str, Any] = {DENSE: embedding.dense}
        if self.holds.parts:
            # A chunk without a part of words (a rule, a fence) is scored by its own vector.
            vector[DENSE_PARTS] = [list(v) for v in parts] if parts else [embedding.dense]
        if self.holds.sparse:
            vector[SPARSE] = _sparse_vector(embedding.sparse or {})
        if self.holds.lexical:
            vector[LEXICAL] = _sparse_vector(lexical or {})  # empty for a text without terms
        return models.PointStruct(id=chunk.point_id, vector=vector, payload=chunk_payload(chunk))

    def _scroll(
        self,
        scroll_filter: models.Filter | None,
        fields: Sequence[str] | bool,
        *,
        with_vectors: bool = False,
        page: int | None = None,
    ) -> Iterator[models.Record]:
        offset: Any = None
        limit = page or (local_mode.SCROLL_PAGE if self.connection.local else _SCROLL_PAGE)
        while True:
            records, offset = self._call(
                "scroll",
                partial(
                    self.client.scroll,
                    self.collection,
                    scroll_filter=scroll_filter,
                    limit=limit,
                    offset=offset,
                    with_payload=fields if isinstance(fields, bool) else list(fields),
                    with_vectors=with_vectors,
                ),
            )
            yield from records
            if offset is None:
                return

    def existing_points(
        self, tenant_id: str, document_ids: Sequence[str]
    ) -> dict[str, dict[str, str]]:
        """{document_id: {point_id: source_version_id}} for the tenant's given documents."""
        if not document_ids:
            return {}
        tenant = _match("tenant_id", tenant_id)
        local_points = self.connection.local_points
        if local_points is not None:
            with self._lock:
                scan = partial(self._scan_points, models.Filter(must=[tenant]))
                known = local_points.of_tenant(self._physical(), tenant_id, scan)
                return {doc: dict(known[doc]) for doc in document_ids if known.get(doc)}
        return self._scan_points(
            models.Filter(must=[tenant, _match_any("document_id", document_ids)])
        )

    def existing_versions(self, tenant_id: str, document_ids: Sequence[str]) -> dict[str, set[str]]:
        return {
            doc: set(points.values())
            for doc, points in self.existing_points(tenant_id, document_ids).items()
        }

    def document_ids(
        self, tenant_id: str, *, source_type: str | None = None, container: str | None = None
    ) -> set[str]:
        """The tenant's document ids (optionally of one source type, in one container),
        from a payload-only scroll."""
        return set(self.document_field(tenant_id, "document_id", source_type, container))

    def document_field(
        self,
        tenant_id: str,
        field: str,
        source_type: str | None = None,
        container: str | None = None,
    ) -> dict[str, Any]:
        """{document_id: the payload `field` of one of its points} for the tenant's
        documents (optionally of one source), from a payload-only scroll."""
        must: list[models.Condition] = [_match("tenant_id", tenant_id)]
        if source_type is not None:
            must.append(_match("source_type", source_type))
        if container is not None:
            must.append(_match(CONTAINER_FIELD, container))
        found: dict[str, Any] = {}
        for record in self._scroll(models.Filter(must=must), ["document_id", field]):
            payload = record.payload or {}
            found.setdefault(str(payload["document_id"]), payload.get(field))
        return found

    def _delete(self, what: str, selection: models.Filter) -> None:
        self._call(
            what,
            lambda: self.client.delete(
                self.collection, points_selector=models.FilterSelector(filter=selection), wait=True
            ),
            writes=True,
        )

    def set_documents_fields(
        self, tenant_id: str, document_ids: Sequence[str], fields: dict[str, Any]
    ) -> None:
        """Set the same payload fields on every point of the given documents (e.g.
        `links_in`): one update per 1,000 documents, not one per document. A server
        or Edge selects them by filter (payload indexes); local mode, which has none and scans
        every point against the id list (quadratic: 196 s at 12,000 documents), by the
        point ids of its tenant map."""
        for start in range(0, len(document_ids), 1000):
            some = document_ids[start : start + 1000]
            selector: models.FilterSelector | models.PointIdsList
            if not self.connection.local:
                selection = models.Filter(
                    must=[_match("tenant_id", tenant_id), _match_any("document_id", some)]
                )
                selector = models.FilterSelector(filter=selection)
            else:
                ids = [
                    point
                    for points in self.existing_points(tenant_id, some).values()
                    for point in points
                ]
                if not ids:
                    continue
                selector = models.PointIdsList(points=list(ids))
            self._call(
                "set payload",
                partial(
                    self.client.set_payload,
                    self.collection,
                    payload=fields,
                    points=selector,
                    wait=True,
                ),
                writes=True,
            )

    def delete_points(self, tenant_id: str, point_ids: Sequence[str]) -> int:
        if point_ids:
            selection = models.Filter(
                must=[_match("tenant_id", tenant_id), models.HasIdCondition(has_id=list(point_ids))]
            )
            with self._lock:
                self._delete("delete points", selection)
                local_points = self.connection.local_points
                if local_points is not None:
                    local_points.deleted(self._physical(), tenant_id, point_ids)
        return len(point_ids)

    def delete_documents(self, tenant_id: str, document_ids: Sequence[str]) -> None:
        if document_ids:
            selection = models.Filter(
                must=[_match("tenant_id", tenant_id), _match_any("document_id", document_ids)]
            )
            with self._lock:
                self._delete("delete documents", selection)
                local_points = self.connection.local_points
                if local_points is not None:
                    local_points.forget(self._physical(), tenant_id)

    # -- lookups by chunk (search expansion) --

    def chunks_by_id(self, tenant_id: str, chunk_ids: Sequence[str]) -> list[dict[str, Any]]:
        """Payloads of the tenant's chunks with these ids (point ids derive from them): a
        direct lookup, also in local mode."""
        if not chunk_ids:
            return []
        ids = [point_id(chunk_id) for chunk_id in chunk_ids]
        records = self._call(
            "retrieve",
            lambda: self.client.retrieve(
                self.collection, ids=ids, with_payload=True, with_vectors=False
            ),
        )
        payloads = [record.payload or {} for record in records]
        return [payload for payload in payloads if payload.get("tenant_id") == tenant_id]

    def document_chunks(
        self, tenant_id: str, document_id: str, version: str, first: int, last: int
    ) -> list[dict[str, Any]]:
        """Payloads of one document version's chunks with ordinals first..last (a
        `document_id` + `ordinal` range lookup with payload indexes)."""
        selection = models.Filter(
            must=[
                _match("tenant_id", tenant_id),
                _match("document_id", document_id),
                _match("source_version_id", version),
                models.FieldCondition(key="ordinal", range=models.Range(gte=first, lte=last)),
            ]
        )
        return [record.payload or {} for record in self._scroll(selection, True)]

    def section_chunks(self, tenant_id: str, section_id: str) -> list[dict[str, Any]]:
        """Payloads of every chunk of one section (a `section_id` lookup with payload indexes)."""
        selection = models.Filter(
            must=[_match("tenant_id", tenant_id), _match("section_id", section_id)]
        )
        return [record.payload or {} for record in self._scroll(selection, True)]

    def visible_chunks(
        self,
        filters: SearchFilters,
        *,
        chunk_ids: Sequence[str] = (),
        document_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Payloads of the chunks with these ids, or of this document, that pass the
        filters (tenant, access): what a reader may fetch by id."""
        if not chunk_ids and document_id is None:
            raise ValueError("name the chunks or the document to fetch")
        must: list[models.Condition] = []
        if chunk_ids:
            must.append(models.HasIdCondition(has_id=[point_id(c) for c in chunk_ids]))
        if document_id is not None:
            must.append(_match("document_id", document_id))
        selection = search_filter(filters)
        if selection is not None:
            must.append(selection)
        return [record.payload or {} for record in self._scroll(models.Filter(must=must), True)]

    def facet(self, key: str, filters: SearchFilters, limit: int = 1000) -> dict[str, int]:
        """{value: points} of a keyword payload field among the points that pass the
        filters (source types, containers a reader may see)."""
        response = self._call(
            "facet",
            lambda: self.client.facet(
                self.collection, key, facet_filter=search_filter(filters), limit=limit, exact=True
            ),
        )
        return {str(hit.value): int(hit.count) for hit in response.hits}

    def count(self, tenant_id: str | None = None) -> int:
        selection = models.Filter(must=[_match("tenant_id", tenant_id)]) if tenant_id else None
        result = self._call(
            "count",
            lambda: self.client.count(self.collection, count_filter=selection, exact=True),
        )
        return int(result.count)

    def optimize(self) -> float | None:
        """Edge: build the HNSW index of segments past `qdrant.optimize_threshold` vectors
        (and merge, vacuum) now, blocking; the seconds it took, or None when there was
        nothing to do or the engine indexes by itself (a server; local mode has no index).
        Called at the end of a run, never inside a search."""
        if self.connection.engine != "edge":
            return None
        from indexing.edge import EdgeClient

        client = self.client
        assert isinstance(client, EdgeClient)  # the edge engine's client
        physical = self.resolve()
        if physical is None:
            return None
        started = time.perf_counter()
        with self._lock:
            changed = client.optimize(physical)
        return time.perf_counter() - started if changed else None

    def query(
        self,
        vectors: Mapping[str, Sequence[float] | SparseWeights | PartVectors],
        *,
        limit: int,
        filters: SearchFilters | None = None,
        prefetch_limit: int = 40,
    ) -> list[ScoredPayload]:
        """Search by one named vector (`dense`, `dense_parts`, `sparse`, `lexical`), or by
        several fused with reciprocal rank fusion (Query API), each prefetch contributing
        `prefetch_limit` candidates (`limit` when larger): the candidates do not follow the
        limit, which only cuts the fused list, so the first k results are the same for
        every limit from k to `prefetch_limit`. A chunk's own vector and its parts' are two
        views of one model: beside other vectors they are fused first and count as one
        ranking, so the model does not outvote the lexical ranking two to one. The parts
        have no graph of their own: they rank, exactly by MaxSim, the candidates the other
        vectors found, a few dozen points, never the collection. The filters
        go into every prefetch: local mode ignores a fusion query's top-level filter
        (https://github.com/qdrant/qdrant-client/issues/1372)."""
        selection = search_filter(filters) if filters else None
        candidates = max(prefetch_limit, limit)

        def prefetch(using: str) -> models.Prefetch:
            vector = _query_of(vectors[using])
            return models.Prefetch(query=vector, using=using, limit=candidates, filter=selection)

        if not vectors:
            raise ValueError("a query needs at least one vector")
        if len(vectors) == 1:
            (using,) = vectors
            request: dict[str, Any] = {"query": _query_of(vectors[using]), "using": using}
        else:
            ranked = {using: prefetch(using) for using in vectors if using != DENSE_PARTS}
            if DENSE_PARTS in vectors:
                ranked[DENSE_PARTS] = models.Prefetch(
                    prefetch=list(ranked.values()),
                    query=_query_of(vectors[DENSE_PARTS]),
                    using=DENSE_PARTS,
                    limit=candidates,
                    filter=selection,
                )
            views = [ranked[name] for name in (DENSE, DENSE_PARTS) if name in ranked]
            others = [ranked[using] for using in ranked if using not in (DENSE, DENSE_PARTS)]
            if len(views) > 1 and others:
                fused = models.Prefetch(
                    prefetch=views, query=_rrf(len(views)), limit=candidates, filter=selection
                )
                prefetches = [fused, *others]
            else:
                prefetches = list(ranked.values())
            request = {
                "prefetch": prefetches,
                "query": _rrf(len(prefetches)),
            }
        response = self._call(
            "query",
            lambda: self.client.query_points(
                self.collection, query_filter=selection, limit=limit, with_payload=True, **request
            ),
        )
        return [
            ScoredPayload(point_id=str(p.id), score=float(p.score), payload=p.payload or {})
            for p in response.points
        ]
