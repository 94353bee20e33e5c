"""Qdrant Edge, the embedded store: the part of qdrant-client's API that
indexing/qdrant_store.py calls, answered by Qdrant Edge shards in one directory.

Edge is Qdrant's engine in-process (`qdrant-edge-py`): one shard is one directory with
its segments and write-ahead log, and it has no collections, aliases or collection
metadata. Here, under `<qdrant.path>/edge/`:

- a physical collection is the shard directory `<name>/` plus its record `<name>.json`
  (the vectors it was created with and this project's metadata); the record is written
  last, so a directory without one is a creation that did not finish;
- the aliases are `aliases.json`, replaced atomically (written beside, fsynced, renamed
  over, the directory fsynced): a crash leaves every alias where it was.

Requests and results are qdrant-client's `models`, translated here, so the store above
has one code path for a server, local mode and Edge. A shard holds the GIL while it
works: callers keep each call short (batches), and the HNSW build (`optimize`) runs only
when the store asks for it at the end of a run. One process at a time opens a shard (a
lock on its write-ahead log; indexing/store_lock.py says which).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from threading import RLock
from types import MappingProxyType
from typing import Any

import numpy
import qdrant_edge as edge
from qdrant_client import models
from qdrant_client.http import models as http_models

from config.errors import ErrorCode, IngestError
from indexing.store_lock import store_busy
from indexing.store_schema import PayloadIndexSchema
from stage_cache.store import write_atomic

EDGE_DIR = "edge"
_ALIASES = "aliases.json"
# Bytes of one dense float32 component, to state the indexing threshold in Edge's unit.
_FLOAT_BYTES = 4
# Qdrant's own HNSW defaults (a collection's `hnsw_config`), for a vector that overrides
# some of them.
_HNSW_DEFAULTS = MappingProxyType({"m": 16, "ef_construct": 100, "full_scan_threshold": 10_000})


def edge_root(path: str | Path) -> Path:
    return Path(path) / EDGE_DIR


class EdgeClient:
    """Edge shards under `<path>/edge/`, spoken to like a `QdrantClient`. A segment with
    more than `index_after_vectors` vectors of one name (a multivector counts each of
    its vectors) gets its HNSW index when `optimize` runs: Edge's indexing threshold,
    which it states in kilobytes of the segment's largest vector storage."""

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
                raise _failed(f"collection {collection_name!r} already exists")
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
        dense, sparse_params = _vectors_of(record)
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
                hnsw_config=_hnsw(params.hnsw_config),
                quantization_config=_quantization(params.quantization_config),
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
                    raise _failed(f"cannot open {directory}: {exc}") from None
                self._shards[name] = shard
            return shard

    def get_collection(self, collection_name: str) -> http_models.CollectionInfo:
        record = self._record(collection_name)
        info = self._shard(collection_name).info()
        vectors, sparse = _vectors_of(record)
        schema = {
            field: http_models.PayloadIndexInfo(
                data_type=_SCHEMA_NAMES[index.data_type], points=index.points
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
                    raise _failed(f"alias operation {type(operation).__name__} is not supported")
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
            edge.UpdateOperation.create_field_index(field_name, _index_schema(field_schema)),
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
            edge.Point(str(point.id), _vectors_in(point.vector), point.payload or {})
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
                _required(_filter(points_selector.filter))
            )
        else:
            operation = edge.UpdateOperation.delete_points(_ids(points_selector.points))
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
                _required(_filter(points.filter)), dict(payload)
            )
        else:
            operation = edge.UpdateOperation.set_payload(_ids(points.points), dict(payload))
        self._update(collection_name, operation)

    def delete_payload(
        self, collection_name: str, keys: Sequence[str], points: Sequence[str], wait: bool = True
    ) -> None:
        self._update(collection_name, edge.UpdateOperation.delete_payload(_ids(points), list(keys)))

    def retrieve(
        self,
        collection_name: str,
        ids: Sequence[str],
        with_payload: bool | Sequence[str] = True,
        with_vectors: bool = False,
    ) -> list[models.Record]:
        shard = self._shard(collection_name)
        records = _call(
            collection_name, shard.retrieve, _ids(ids), _with_payload(with_payload), with_vectors
        )
        return [_record_out(record) for record in records]

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
            filter=_filter(scroll_filter),
            with_payload=_with_payload(with_payload),
            with_vector=with_vectors,
        )
        records, next_offset = _call(collection_name, shard.scroll, request)
        return (
            [_record_out(record) for record in records],
            None if next_offset is None else str(next_offset),
        )

    def count(
        self, collection_name: str, count_filter: models.Filter | None = None, exact: bool = True
    ) -> http_models.CountResult:
        shard = self._shard(collection_name)
        found = _call(
            collection_name,
            shard.count,
            edge.CountRequest(filter=_filter(count_filter), exact=exact),
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
        request = edge.FacetRequest(key=key, limit=limit, exact=exact, filter=_filter(facet_filter))
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
            query=_scoring(query, using),
            filter=_filter(query_filter),
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

    def close(self) -> None:
        with self._lock:
            shards, self._shards = self._shards, {}
            self._deleted.clear()
        for shard in shards.values():
            shard.close()


# --- translation ---------------------------------------------------------------------


def _vectors_of(
    record: Mapping[str, Any],
) -> tuple[dict[str, models.VectorParams], dict[str, models.SparseVectorParams]]:
    """The vectors a collection was created with, as its record keeps them."""
    return (
        {
            name: models.VectorParams.model_validate(spec)
            for name, spec in record["vectors"].items()
        },
        {
            name: models.SparseVectorParams.model_validate(spec)
            for name, spec in record["sparse_vectors"].items()
        },
    )


_SCHEMA_NAMES = MappingProxyType(
    {
        edge.PayloadSchemaType.Keyword: models.PayloadSchemaType.KEYWORD,
        edge.PayloadSchemaType.Integer: models.PayloadSchemaType.INTEGER,
        edge.PayloadSchemaType.Float: models.PayloadSchemaType.FLOAT,
        edge.PayloadSchemaType.Geo: models.PayloadSchemaType.GEO,
        edge.PayloadSchemaType.Text: models.PayloadSchemaType.TEXT,
        edge.PayloadSchemaType.Bool: models.PayloadSchemaType.BOOL,
        edge.PayloadSchemaType.Datetime: models.PayloadSchemaType.DATETIME,
        edge.PayloadSchemaType.Uuid: models.PayloadSchemaType.UUID,
    }
)
_SCHEMA_TYPES = MappingProxyType({name: edge_type for edge_type, name in _SCHEMA_NAMES.items()})


def _hnsw(diff: models.HnswConfigDiff | None) -> edge.HnswIndexConfig | None:
    """A vector's own HNSW settings as Edge takes them: whole, Qdrant's defaults where the
    collection left a field unset."""
    if diff is None:
        return None
    asked = diff.model_dump(include=set(_HNSW_DEFAULTS), exclude_none=True)
    return edge.HnswIndexConfig(**{**_HNSW_DEFAULTS, **asked}, payload_m=diff.payload_m)


def _quantization(config: models.QuantizationConfig | None) -> edge.ScalarQuantizationConfig | None:
    """A vector's quantization as Edge takes it; the store asks for scalar int8 only."""
    if config is None:
        return None
    if not isinstance(config, models.ScalarQuantization):
        raise _failed(f"this store keeps scalar quantization only, not {type(config).__name__}")
    scalar = config.scalar
    return edge.ScalarQuantizationConfig(
        type=edge.ScalarType.Int8, quantile=scalar.quantile, always_ram=scalar.always_ram
    )


def _index_schema(
    schema: PayloadIndexSchema,
) -> (
    edge.PayloadSchemaType
    | edge.KeywordIndexParams
    | edge.IntegerIndexParams
    | edge.DatetimeIndexParams
):
    if isinstance(schema, models.KeywordIndexParams):
        return edge.KeywordIndexParams(is_tenant=schema.is_tenant, enable_hnsw=schema.enable_hnsw)
    if isinstance(schema, models.IntegerIndexParams):
        return edge.IntegerIndexParams(
            lookup=schema.lookup, range=schema.range, enable_hnsw=schema.enable_hnsw
        )
    if isinstance(schema, models.DatetimeIndexParams):
        return edge.DatetimeIndexParams(enable_hnsw=schema.enable_hnsw)
    return _SCHEMA_TYPES[models.PayloadSchemaType(schema)]


def sparse_in(vector: models.SparseVector) -> edge.SparseVector:
    """A sparse vector as Edge takes it. Edge stores duplicate indices without complaint
    (a server refuses them) and scores them twice, so they are refused here."""
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    indices = [index for index, _ in pairs]
    if len(set(indices)) != len(indices):
        raise ValueError("a sparse vector repeats an index: each term id must appear once")
    return edge.SparseVector(indices, [float(value) for _, value in pairs])


def _vectors_in(vector: Any) -> dict[str, Any]:
    if not isinstance(vector, Mapping):
        raise ValueError("points carry named vectors")
    return {
        name: sparse_in(value) if isinstance(value, models.SparseVector) else value
        for name, value in vector.items()
    }


def _vectors_out(vector: Any) -> Any:
    if not isinstance(vector, Mapping):
        return vector
    return {
        name: (
            models.SparseVector(indices=list(value.indices), values=list(value.values))
            if isinstance(value, edge.SparseVector)
            else value
        )
        for name, value in vector.items()
    }


def _record_out(record: edge.Record) -> models.Record:
    return models.Record(
        id=str(record.id), payload=record.payload, vector=_vectors_out(record.vector)
    )


def _ids(ids: Iterable[Any]) -> list[Any]:
    """Point ids as Edge matches them: UUIDs (this project's ids) as UUID objects."""
    return [_id(point) for point in ids]


def _id(point: Any) -> Any:
    if isinstance(point, int):
        return point
    return uuid.UUID(str(point))


def _with_payload(fields: bool | Sequence[str]) -> bool | list[str]:
    return fields if isinstance(fields, bool) else list(fields)


def _conditions(found: Any) -> list[Any] | None:
    if found is None:
        return None
    items = found if isinstance(found, list) else [found]
    return [_condition(item) for item in items]


def _filter(selection: models.Filter | None) -> edge.Filter | None:
    if selection is None:
        return None
    if selection.min_should is not None:
        raise _failed("min_should filters are not supported by the embedded store")
    return edge.Filter(
        must=_conditions(selection.must),
        should=_conditions(selection.should),
        must_not=_conditions(selection.must_not),
    )


def _required(selection: edge.Filter | None) -> edge.Filter:
    """Edge's filter of a selector: an empty one would select every point."""
    if selection is None:
        raise _failed("a selection by filter needs a filter")
    return selection


def _condition(condition: Any) -> Any:
    if isinstance(condition, models.Filter):
        return _filter(condition)
    if isinstance(condition, models.HasIdCondition):
        return edge.HasIdCondition(set(_ids(condition.has_id)))
    if isinstance(condition, models.FieldCondition):
        return edge.FieldCondition(
            key=condition.key, match=_match(condition.match), range=_range(condition.range)
        )
    raise _failed(f"filter condition {type(condition).__name__} is not supported")


def _match(match: Any) -> Any:
    if match is None:
        return None
    if isinstance(match, models.MatchValue):
        value = match.value
        # Edge 0.9's binding reads a Python bool as the integer 1 or 0, which matches no
        # boolean payload; numpy's bool it reads as a bool.
        return edge.MatchValue(numpy.bool_(value) if isinstance(value, bool) else value)  # type: ignore[arg-type]
    if isinstance(match, models.MatchAny):
        return edge.MatchAny(list(match.any))  # type: ignore[arg-type]  # str or int, never mixed
    raise _failed(f"match {type(match).__name__} is not supported")


def _range(found: Any) -> Any:
    if found is None:
        return None
    if isinstance(found, models.Range):
        return edge.RangeFloat(gte=found.gte, gt=found.gt, lte=found.lte, lt=found.lt)
    raise _failed(f"range {type(found).__name__} is not supported")


def _scoring(query: Any, using: str | None) -> Any:
    """A query of qdrant-client's Query API as Edge scores it: the nearest points to a
    dense, multi- or sparse vector of the named vector `using` (fusion is the caller's,
    indexing/search.py)."""
    if query is None:
        return None
    if isinstance(query, models.SparseVector):
        return edge.Query.Nearest(sparse_in(query), using=using)
    if isinstance(query, list):
        return edge.Query.Nearest(query, using=using)
    raise _failed(f"query {type(query).__name__} is not supported by the embedded store")


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
        raise _failed(f"{name}: {exc}") from None


def _failed(message: str) -> IngestError:
    return IngestError(ErrorCode.UPSERT_FAILED, f"Qdrant Edge: {message}", subject="qdrant")


def _missing(name: str) -> IngestError:
    return _failed(f"collection {name!r} does not exist")
