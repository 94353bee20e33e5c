"""Qdrant Edge's side of the translation between qdrant-client's `models`, which the store
speaks to every engine, and `qdrant_edge`'s own types: vectors, collection parameters,
filters, queries and records (indexing/edge.py keeps the collections)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy
import qdrant_edge as edge
from qdrant_client import models

from config.errors import ErrorCode, IngestError
from indexing.store_schema import PayloadIndexSchema

# Qdrant's own HNSW defaults (a collection's `hnsw_config`), for a vector that overrides
# some of them.
_HNSW_DEFAULTS = MappingProxyType({"m": 16, "ef_construct": 100, "full_scan_threshold": 10_000})


def vectors_of(
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


SCHEMA_NAMES = MappingProxyType(
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
_SCHEMA_TYPES = MappingProxyType({name: edge_type for edge_type, name in SCHEMA_NAMES.items()})


def hnsw_in(diff: models.HnswConfigDiff | None) -> edge.HnswIndexConfig | None:
    """A vector's own HNSW settings as Edge takes them: whole, Qdrant's defaults where the
    collection left a field unset."""
    if diff is None:
        return None
    asked = diff.model_dump(include=set(_HNSW_DEFAULTS), exclude_none=True)
    return edge.HnswIndexConfig(**{**_HNSW_DEFAULTS, **asked}, payload_m=diff.payload_m)


def quantization_in(
    config: models.QuantizationConfig | None,
) -> edge.ScalarQuantizationConfig | None:
    """A vector's quantization as Edge takes it; the store asks for scalar int8 only."""
    if config is None:
        return None
    if not isinstance(config, models.ScalarQuantization):
        raise failed(f"this store keeps scalar quantization only, not {type(config).__name__}")
    scalar = config.scalar
    return edge.ScalarQuantizationConfig(
        type=edge.ScalarType.Int8, quantile=scalar.quantile, always_ram=scalar.always_ram
    )


def index_schema_in(
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


def vectors_in(vector: Any) -> dict[str, Any]:
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


def record_out(record: edge.Record) -> models.Record:
    return models.Record(
        id=str(record.id), payload=record.payload, vector=_vectors_out(record.vector)
    )


def ids_in(ids: Iterable[Any]) -> list[Any]:
    """Point ids as Edge matches them: UUIDs (this project's ids) as UUID objects."""
    return [_id(point) for point in ids]


def _id(point: Any) -> Any:
    if isinstance(point, int):
        return point
    return uuid.UUID(str(point))


def payload_fields(fields: bool | Sequence[str]) -> bool | list[str]:
    return fields if isinstance(fields, bool) else list(fields)


def _conditions(found: Any) -> list[Any] | None:
    if found is None:
        return None
    items = found if isinstance(found, list) else [found]
    return [_condition(item) for item in items]


def filter_in(selection: models.Filter | None) -> edge.Filter | None:
    if selection is None:
        return None
    if selection.min_should is not None:
        raise failed("min_should filters are not supported by the embedded store")
    return edge.Filter(
        must=_conditions(selection.must),
        should=_conditions(selection.should),
        must_not=_conditions(selection.must_not),
    )


def required_filter(selection: edge.Filter | None) -> edge.Filter:
    """Edge's filter of a selector: an empty one would select every point."""
    if selection is None:
        raise failed("a selection by filter needs a filter")
    return selection


def _condition(condition: Any) -> Any:
    if isinstance(condition, models.Filter):
        return filter_in(condition)
    if isinstance(condition, models.HasIdCondition):
        return edge.HasIdCondition(set(ids_in(condition.has_id)))
    if isinstance(condition, models.FieldCondition):
        return edge.FieldCondition(
            key=condition.key, match=_match(condition.match), range=_range(condition.range)
        )
    raise failed(f"filter condition {type(condition).__name__} is not supported")


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
    raise failed(f"match {type(match).__name__} is not supported")


def _range(found: Any) -> Any:
    if found is None:
        return None
    if isinstance(found, models.Range):
        return edge.RangeFloat(gte=found.gte, gt=found.gt, lte=found.lte, lt=found.lt)
    raise failed(f"range {type(found).__name__} is not supported")


def query_in(query: Any, using: str | None) -> Any:
    """A query of qdrant-client's Query API as Edge scores it: the nearest points to a
    dense, multi- or sparse vector of the named vector `using` (fusion is the caller's,
    indexing/search.py)."""
    if query is None:
        return None
    if isinstance(query, models.SparseVector):
        return edge.Query.Nearest(sparse_in(query), using=using)
    if isinstance(query, list):
        return edge.Query.Nearest(query, using=using)
    raise failed(f"query {type(query).__name__} is not supported by the embedded store")


def failed(message: str) -> IngestError:
    return IngestError(ErrorCode.UPSERT_FAILED, f"Qdrant Edge: {message}", subject="qdrant")
