"""A store's collections and aliases: the physical collection behind the configured alias,
created with the schema's vectors and payload indexes (indexing/store_schema.py), its
metadata, the alias moved in one operation, and the client calls' timing and failures
that every store call shares.

The configured `qdrant.collection` name is an ALIAS that readers use; the points live in
a physical collection behind it, so a re-index into another collection can be switched
to by moving the alias.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

import httpx
from qdrant_client import models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from config.errors import ConfigError, ErrorCode, IngestError
from indexing.connection import QdrantConnection, StoreSeconds
from indexing.local_mode import stored_collections
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

log = logging.getLogger(__name__)

T = TypeVar("T")


class CollectionStore:
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
        except self.client.unavailable as exc:
            # the engine's storage was closed under this call (the process let go of it,
            # another run took it); a later attempt opens it again
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                f"{what}: Qdrant local storage unavailable ({exc})",
                subject=self.collection,
                transient=True,
            ) from None

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
        self._tune(physical)
        return physical

    def refuse_over_local_mode(self) -> None:
        """Edge's first collection is not made beside a local-mode store at the same path:
        the run would index everything again while the old points sit unused."""
        if self.connection.earlier_store() is not None:
            found = stored_collections(self.settings.path)
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

    def _tune(self, physical: str) -> None:
        """The collection made fit for a run's many small writes, where its engine needs
        that (local mode's SQLite)."""
        with self._lock:
            self.client.tune(physical)

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
        if not self.client.payload_indexes:
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
        if self.client.tenant_points is not None:
            self.client.tenant_points.forget(name)

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
        self._tune(name)
        self.holds = self.schema

    def payload_schema(self) -> dict[str, str]:
        """Indexed payload fields reported by Qdrant (local mode reports none: it keeps no
        payload indexes; a server and Edge do)."""
        physical = self._physical()
        info = self._call("describe", lambda: self.client.get_collection(physical))
        return {name: str(schema.data_type.value) for name, schema in info.payload_schema.items()}

    def _physical(self) -> str:
        """The physical collection behind this store's name (the name when none is)."""
        return self.resolve() or self.collection

    def optimize(self) -> float | None:
        """Edge: build the HNSW index of segments past `qdrant.optimize_threshold` vectors
        (and merge, vacuum) now, blocking; the seconds it took, or None when there was
        nothing to do or the engine indexes by itself (a server; local mode has no index).
        Called at the end of a run, never inside a search."""
        physical = self.resolve()
        if physical is None:
            return None
        started = time.perf_counter()
        with self._lock:
            changed = self.client.optimize(physical)
        return time.perf_counter() - started if changed else None
