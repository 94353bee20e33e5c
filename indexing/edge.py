"""Qdrant Edge, the embedded store, as an engine of the store (indexing/engine.py): the
client calls the store makes, answered by Qdrant Edge shards in one directory, and the
catalog of their collections and aliases.

Edge is Qdrant's engine in-process (`qdrant-edge-py`): one shard is one directory with
its segments and write-ahead log, and it has no collections, aliases or collection
metadata. Here, under `<qdrant.path>/edge/`:

- a physical collection is the shard directory `<name>/` plus its record `<name>.json`
  (the vectors it was created with and this project's metadata); the record is written
  last, so a directory without one is a creation that did not finish;
- the aliases are `aliases.json`, replaced atomically (written beside, fsynced, renamed
  over, the directory fsynced): a crash leaves every alias where it was.

Requests and results are qdrant-client's `models`, translated by indexing/edge_models.py,
so the store above has one code path for a server, local mode and Edge. A shard holds the
GIL while it works: callers keep each call short (batches), and the HNSW build
(`optimize`) runs only when the store asks for it at the end of a run. One process at a
time opens a shard (a lock on its write-ahead log; indexing/store_lock.py says which).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from threading import RLock
from typing import Any

import qdrant_edge as edge
from qdrant_client import models
from qdrant_client.http import models as http_models

from config.errors import IngestError
from config.settings import QdrantSettings
from indexing.edge_models import (
    SCHEMA_NAMES,
    failed,
    filter_in,
    hnsw_in,
    ids_in,
    index_schema_in,
    payload_fields,
    quantization_in,
    query_in,
    record_out,
    required_filter,
    vectors_in,
    vectors_of,
)
from indexing.engine import EngineName, StoreClient, TenantPoints, storage_path
from indexing.local_mode import stored_collections
from indexing.store_lock import store_busy
from indexing.store_schema import PayloadIndexSchema
from stage_cache.store import write_atomic

EDGE_DIR = "edge"
_ALIASES = "aliases.json"
# Bytes of one dense float32 component, to state the indexing threshold in Edge's unit.
_FLOAT_BYTES = 4
# Points a scroll asks for at once: Edge filters by its payload indexes.
_SCROLL_PAGE = 1024


def edge_root(path: str | Path) -> Path:
    return Path(path) / EDGE_DIR


class EdgeClient:
    """Edge shards under `<path>/edge/`, spoken to like a `QdrantClient`. A segment with
    more than `index_after_vectors` vectors of one name (a multivector counts each of
    its vectors) gets its HNSW index when `optimize` runs: Edge's indexing threshold,
    which it states in kilobytes of the segment's largest vector storage."""

    payload_indexes = True
    scroll_page = _SCROLL_PAGE
    unavailable: tuple[type[Exception], ...] = ()
    tenant_points: TenantPoints | None = None

    def __init__(self, path: str | Path, *, index_after_vectors: int) -> None:
        self.root = edge_root(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self.index_after_vectors = index_after_vectors
        self._shards: dict[str, edge.EdgeShard] = {}
        # Collections with points deleted since their shard was opened: Edge's IDF counts
        # deleted points until the shard is opened again, so a query reopens it first.
        self._deleted: set[str] = set()
        self._lock = RLock()

    # -- collections and aliases --

    def _record_path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def _physical(self, name: str) -> str:
        """The collection `name` names: itself, or the one an alias names (as a server
        answers for an alias)."""
        if self.collection_exists(name):
            return name
        return self._aliases().get(name, name)

    def _record(self, name: str) -> dict[str, Any]:
        physical = self._physical(name)
        try:
            return dict(json.loads(self._record_path(physical).read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise _missing(name) from None

    def _write_record(self, name: str, record: Mapping[str, Any]) -> None:
        _write_json(self._record_path(name), record)

    def collection_exists(self, collection_name: str) -> bool:
        return self._record_path(collection_name).is_file()

    def get_collections(self) -> http_models.CollectionsResponse:
        names = sorted(p.stem for p in self.root.glob("*.json") if p.name != _ALIASES)
        return http_models.CollectionsResponse(
            collections=[http_models.CollectionDescription(name=name) for name in names]
        )

    def create_collection(
        self,
        collection_name: str,
        vectors_config: Mapping[str, models.VectorParams],
        sparse_vectors_config: Mapping[str, models.SparseVectorParams] | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        on_disk_payload: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> bool:
        """A new shard directory and its record. `shard_number` and
        `replication_factor` mean nothing in one process and are not kept."""
        with self._lock:
            if self.collection_exists(collection_name):
                raise failed(f"collection {collection_name!r} already exists")
            directory = self.root / collection_name
            shutil.rmtree(directory, ignore_errors=True)  # a creation that did not finish
            record = {
                "vectors": {
                    name: params.model_dump(mode="json", exclude_none=True)
                    for name, params in vectors_config.items()
                },
                "sparse_vectors": {
                    name: params.model_dump(mode="json", exclude_none=True)
                    for name, params in (sparse_vectors_config or {}).items()
                },
                "on_disk_payload": bool(on_disk_payload),
                "metadata": dict(metadata or {}),
            }
            shard = _call(
                collection_name, edge.EdgeShard.create, str(directory), self._config(record)
            )
            self._shards[collection_name] = shard
            self._write_record(collection_name, record)
        return True

    def _config(self, record: Mapping[str, Any]) -> edge.EdgeConfig:
        dense, sparse_params = vectors_of(record)
        vectors = {
            name: edge.EdgeVectorParams(
                size=params.size,
                distance=getattr(edge.Distance, params.distance.value),
                on_disk=params.on_disk,
                multivector_config=(
                    None
                    if params.multivector_config is None
                    else edge.MultiVectorConfig(comparator=edge.MultiVectorComparator.MaxSim)
                ),
                hnsw_config=hnsw_in(params.hnsw_config),
                quantization_config=quantization_in(params.quantization_config),
            )
            for name, params in dense.items()
        }
        sparse = {
            name: edge.EdgeSparseVectorParams(
                on_disk=bool(params.index and params.index.on_disk),
                modifier=edge.Modifier.Idf if params.modifier == models.Modifier.IDF else None,
            )
            for name, params in sparse_params.items()
        }
        widest = max((params.size for params in dense.values()), default=1)
        threshold_kb = math.ceil(self.index_after_vectors * widest * _FLOAT_BYTES / 1024)
        return edge.EdgeConfig(
            vectors=vectors,
            sparse_vectors=sparse or None,
            on_disk_payload=record["on_disk_payload"],
            optimizers=edge.EdgeOptimizersConfig(indexing_threshold=max(1, threshold_kb)),
            # Without its write-ahead log a shard loses acknowledged writes in a crash and
            # a second process may open it; never turned off.
            wal_enabled=True,
        )

    def _shard(self, name: str) -> edge.EdgeShard:
        """The open shard of collection `name`, opened on first use."""
        with self._lock:
            name = self._physical(name)
            shard = self._shards.get(name)
            if shard is None:
                config = self._config(self._record(name))
                directory = self.root / name
                try:
                    shard = edge.EdgeShard.load(str(directory), config)
                except Exception as exc:  # Edge raises plain Exception
                    if "WouldBlock" in str(exc):  # held by a process without the lock file
                        raise store_busy(self.root.parent, 0) from None
                    raise failed(f"cannot open {directory}: {exc}") from None
                self._shards[name] = shard
            return shard

    def get_collection(self, collection_name: str) -> http_models.CollectionInfo:
        record = self._record(collection_name)
        info = self._shard(collection_name).info()
        vectors, sparse = vectors_of(record)
        schema = {
            field: http_models.PayloadIndexInfo(
                data_type=SCHEMA_NAMES[index.data_type], points=index.points
            )
            for field, index in info.payload_schema.items()
        }
        # Built without validation: the server-only fields (HNSW, WAL, optimizer
        # configuration) have no meaning here and are left out.
        params = http_models.CollectionParams.model_construct(
            vectors=vectors, sparse_vectors=sparse or None
        )
        config = http_models.CollectionConfig.model_construct(
            params=params, metadata=record["metadata"]
        )
        return http_models.CollectionInfo.model_construct(
            status=http_models.CollectionStatus.GREEN,
            points_count=info.points_count,
            indexed_vectors_count=info.indexed_vectors_count,
            segments_count=info.segments_count,
            config=config,
            payload_schema=schema,
        )

    def update_collection(
        self, collection_name: str, metadata: Mapping[str, Any] | None = None
    ) -> bool:
        with self._lock:
            record = self._record(collection_name)
            record["metadata"] = {**record["metadata"], **(metadata or {})}
            self._write_record(self._physical(collection_name), record)
        return True

    def delete_collection(self, collection_name: str) -> bool:
        with self._lock:
            shard = self._shards.pop(collection_name, None)
            if shard is not None:
                shard.close()
            self._deleted.discard(collection_name)
            existed = self.collection_exists(collection_name)
            self._record_path(collection_name).unlink(missing_ok=True)  # not a collection now
            shutil.rmtree(self.root / collection_name, ignore_errors=True)
        return existed

    def _aliases(self) -> dict[str, str]:
        try:
            return dict(json.loads((self.root / _ALIASES).read_text(encoding="utf-8")))
        except FileNotFoundError:
            return {}

    def get_aliases(self) -> http_models.CollectionsAliasesResponse:
        return http_models.CollectionsAliasesResponse(
            aliases=[
                http_models.AliasDescription(alias_name=alias, collection_name=name)
                for alias, name in sorted(self._aliases().items())
            ]
        )

    def update_collection_aliases(
        self, change_aliases_operations: Sequence[models.AliasOperations]
    ) -> bool:
        """All the operations in one replacement of the aliases file."""
        with self._lock:
            aliases = self._aliases()
            for operation in change_aliases_operations:
                if isinstance(operation, models.DeleteAliasOperation):
                    aliases.pop(operation.delete_alias.alias_name, None)
                elif isinstance(operation, models.CreateAliasOperation):
                    created = operation.create_alias
                    if not self.collection_exists(created.collection_name):
                        raise _missing(created.collection_name)
                    aliases[created.alias_name] = created.collection_name
                else:
                    raise failed(f"alias operation {type(operation).__name__} is not supported")
            _write_json(self.root / _ALIASES, aliases)
        return True

    def create_payload_index(
        self,
        collection_name: str,
        field_name: str,
        field_schema: PayloadIndexSchema,
        wait: bool = True,
    ) -> None:
        self._update(
            collection_name,
            edge.UpdateOperation.create_field_index(field_name, index_schema_in(field_schema)),
        )

    def delete_payload_index(
        self, collection_name: str, field_name: str, wait: bool = True
    ) -> None:
        self._update(collection_name, edge.UpdateOperation.delete_field_index(field_name))

    # -- points --

    def _update(self, name: str, operation: edge.UpdateOperation) -> None:
        shard = self._shard(name)
        _call(name, shard.update, operation)

    def upsert(
        self, collection_name: str, points: Sequence[models.PointStruct], wait: bool = True
    ) -> None:
        converted = [
            edge.Point(str(point.id), vectors_in(point.vector), point.payload or {})
            for point in points
        ]
        self._update(collection_name, edge.UpdateOperation.upsert_points(converted))

    def delete(
        self,
        collection_name: str,
        points_selector: models.FilterSelector | models.PointIdsList,
        wait: bool = True,
    ) -> None:
        if isinstance(points_selector, models.FilterSelector):
            operation = edge.UpdateOperation.delete_points_by_filter(
                required_filter(filter_in(points_selector.filter))
            )
        else:
            operation = edge.UpdateOperation.delete_points(ids_in(points_selector.points))
        self._update(collection_name, operation)
        self._deleted.add(self._physical(collection_name))

    def set_payload(
        self,
        collection_name: str,
        payload: Mapping[str, Any],
        points: models.FilterSelector | models.PointIdsList,
        wait: bool = True,
    ) -> None:
        if isinstance(points, models.FilterSelector):
            operation = edge.UpdateOperation.set_payload_by_filter(
                required_filter(filter_in(points.filter)), dict(payload)
            )
        else:
            operation = edge.UpdateOperation.set_payload(ids_in(points.points), dict(payload))
        self._update(collection_name, operation)

    def delete_payload(
        self, collection_name: str, keys: Sequence[str], points: Sequence[str], wait: bool = True
    ) -> None:
        self._update(
            collection_name, edge.UpdateOperation.delete_payload(ids_in(points), list(keys))
        )

    def retrieve(
        self,
        collection_name: str,
        ids: Sequence[str],
        with_payload: bool | Sequence[str] = True,
        with_vectors: bool = False,
    ) -> list[models.Record]:
        shard = self._shard(collection_name)
        records = _call(
            collection_name, shard.retrieve, ids_in(ids), payload_fields(with_payload), with_vectors
        )
        return [record_out(record) for record in records]

    def scroll(
        self,
        collection_name: str,
        scroll_filter: models.Filter | None = None,
        limit: int = 10,
        offset: Any = None,
        with_payload: bool | Sequence[str] = True,
        with_vectors: bool = False,
    ) -> tuple[list[models.Record], str | None]:
        shard = self._shard(collection_name)
        request = edge.ScrollRequest(
            offset=None if offset is None else str(offset),
            limit=limit,
            filter=filter_in(scroll_filter),
            with_payload=payload_fields(with_payload),
            with_vector=with_vectors,
        )
        records, next_offset = _call(collection_name, shard.scroll, request)
        return (
            [record_out(record) for record in records],
            None if next_offset is None else str(next_offset),
        )

    def count(
        self, collection_name: str, count_filter: models.Filter | None = None, exact: bool = True
    ) -> http_models.CountResult:
        shard = self._shard(collection_name)
        found = _call(
            collection_name,
            shard.count,
            edge.CountRequest(filter=filter_in(count_filter), exact=exact),
        )
        return http_models.CountResult(count=found)

    def facet(
        self,
        collection_name: str,
        key: str,
        facet_filter: models.Filter | None = None,
        limit: int = 10,
        exact: bool = False,
    ) -> http_models.FacetResponse:
        shard = self._shard(collection_name)
        request = edge.FacetRequest(
            key=key, limit=limit, exact=exact, filter=filter_in(facet_filter)
        )
        response = _call(collection_name, shard.facet, request)
        return http_models.FacetResponse(
            hits=[http_models.FacetValueHit(value=hit.value, count=hit.count) for hit in response]
        )

    def query_points(
        self,
        collection_name: str,
        query: Any = None,
        using: str | None = None,
        query_filter: models.Filter | None = None,
        limit: int = 10,
        with_payload: bool = True,
    ) -> http_models.QueryResponse:
        with self._lock:
            physical = self._physical(collection_name)
            if physical in self._deleted:
                self._deleted.discard(physical)
                stale = self._shards.pop(physical, None)
                if stale is not None:
                    stale.close()
            shard = self._shard(physical)
        request = edge.QueryRequest(
            limit=limit,
            query=query_in(query, using),
            filter=filter_in(query_filter),
            with_payload=with_payload,
            with_vector=False,
        )
        found = _call(collection_name, shard.query, request)
        return http_models.QueryResponse(
            points=[
                http_models.ScoredPoint(
                    id=str(point.id),
                    version=point.version,
                    score=point.score,
                    payload=point.payload,
                )
                for point in found
            ]
        )

    def query_batch_points(
        self, collection_name: str, requests: Sequence[models.QueryRequest]
    ) -> list[http_models.QueryResponse]:
        """The requests one after another: a shard answers in this process, so a batch
        saves no round trip."""
        return [
            self.query_points(
                collection_name,
                query=request.query,
                using=request.using,
                query_filter=request.filter,
                limit=request.limit or 10,
                with_payload=bool(request.with_payload),
            )
            for request in requests
        ]

    def optimize(self, collection_name: str) -> bool:
        """Let Edge's optimizers run (HNSW for segments past the threshold, merges,
        vacuum); blocks. True when anything changed."""
        shard = self._shard(collection_name)
        return bool(_call(collection_name, shard.optimize))

    def tune(self, collection_name: str) -> None:
        """A shard needs no tuning."""

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
            self._deleted.clear()
        for shard in shards.values():
            shard.close()


class EdgeEngine:
    name: EngineName = "edge"
    serialized = True  # a shard holds the GIL while it works anyway
    embedded = True

    def open(self, settings: QdrantSettings) -> StoreClient:
        return EdgeClient(storage_path(settings), index_after_vectors=settings.optimize_threshold)

    def earlier_store(self, settings: QdrantSettings) -> QdrantSettings | None:
        """A qdrant-client local-mode store at the same path: the embedded store before
        Edge was the default, which `ingest reindex` moves into Edge."""
        if stored_collections(settings.path):
            return settings.model_copy(update={"engine": "local"})
        return None


# --- files and failures ----------------------------------------------------------------


def _write_json(path: Path, value: Mapping[str, Any]) -> None:
    """Replace `path` atomically and durably: the new content is fsynced before the
    rename and the directory after it, so a crash leaves the old file or the new one."""
    write_atomic(path, [json.dumps(value, sort_keys=True).encode()], prefix=".tmp-", fsync=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _call(name: str, operation: Any, *args: Any) -> Any:
    try:
        return operation(*args)
    except IngestError:
        raise
    except Exception as exc:  # Edge raises plain Exception for everything
        raise failed(f"{name}: {exc}") from None


def _missing(name: str) -> IngestError:
    return failed(f"collection {name!r} does not exist")
