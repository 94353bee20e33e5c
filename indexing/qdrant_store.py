"""Every Qdrant call of the project (docs/qdrant.md#the-collection): the store of one collection,
its points written, read, deleted and searched.

Three engines behind one store: Qdrant Edge in-process on disk (the default,
`qdrant.engine: edge`, indexing/edge.py), qdrant-client's local mode on disk
(`qdrant.engine: local`, indexing/local_mode.py), or a server or cluster when
`qdrant.url` (+ `api_key`) is set. The store speaks one protocol to all three
(indexing/engine.py); nothing above this module knows which runs. Opening one is
indexing/connection.py, filters and access indexing/filters.py, collections and aliases
indexing/collections.py; what a collection holds (named vectors, payload indexes,
metadata) is indexing/store_schema.py. The fusion of several vectors' rankings is the
search's (indexing/search.py).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from qdrant_client import models

from chunking.record import CONTAINER_FIELD, Chunk, point_id
from config.errors import ErrorCode, IngestError
from indexing.collections import CollectionStore
from indexing.connection import QdrantConnection, StoreSeconds
from indexing.embedders import Embedding
from indexing.engine import PointMap
from indexing.filters import SearchFilters, match, match_any, search_filter
from indexing.lexical import SparseWeights
from indexing.store_schema import DENSE, DENSE_PARTS, LEXICAL, SPARSE

__all__ = [
    "PartVectors",
    "QdrantConnection",
    "QdrantStore",
    "ScoredPayload",
    "SearchFilters",
    "StoreSeconds",
    "VectorQuery",
    "chunk_payload",
]


# Payload = the chunk record without `embed_text` (header + overlap + md_text, all of
# which the payload already holds), to keep points lean.
_PAYLOAD_EXCLUDED = frozenset({"embed_text"})


def chunk_payload(chunk: Chunk) -> dict[str, Any]:
    """The payload a chunk's point holds: its record without the embed_text."""
    return {k: v for k, v in chunk.to_record().items() if k not in _PAYLOAD_EXCLUDED}


# One chunk's `dense_parts`: a vector per part.
PartVectors = Sequence[Sequence[float]]


@dataclass(frozen=True)
class ScoredPayload:
    point_id: str
    score: float
    payload: dict[str, Any]


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


class QdrantStore(CollectionStore):
    """One collection's points (collections and aliases: `CollectionStore`)."""

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
                local_points = self.client.tenant_points
                if local_points is not None:
                    local_points.written(self._physical(), batch)
        return len(chunks)

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
        limit = page or self.client.scroll_page
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
        tenant = match("tenant_id", tenant_id)
        local_points = self.client.tenant_points
        if local_points is not None:
            with self._lock:
                scan = partial(self._scan_points, models.Filter(must=[tenant]))
                known = local_points.of_tenant(self._physical(), tenant_id, scan)
                return {doc: dict(known[doc]) for doc in document_ids if known.get(doc)}
        return self._scan_points(
            models.Filter(must=[tenant, match_any("document_id", document_ids)])
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
        must: list[models.Condition] = [match("tenant_id", tenant_id)]
        if source_type is not None:
            must.append(match("source_type", source_type))
        if container is not None:
            must.append(match(CONTAINER_FIELD, container))
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
            if self.client.payload_indexes:
                selection = models.Filter(
                    must=[match("tenant_id", tenant_id), match_any("document_id", some)]
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
                must=[match("tenant_id", tenant_id), models.HasIdCondition(has_id=list(point_ids))]
            )
            with self._lock:
                self._delete("delete points", selection)
                local_points = self.client.tenant_points
                if local_points is not None:
                    local_points.deleted(self._physical(), tenant_id, point_ids)
        return len(point_ids)

    def delete_documents(self, tenant_id: str, document_ids: Sequence[str]) -> None:
        if document_ids:
            selection = models.Filter(
                must=[match("tenant_id", tenant_id), match_any("document_id", document_ids)]
            )
            with self._lock:
                self._delete("delete documents", selection)
                local_points = self.client.tenant_points
                if local_points is not None:
                    local_points.forget(self._physical(), tenant_id)

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
                match("tenant_id", tenant_id),
                match("document_id", document_id),
                match("source_version_id", version),
                models.FieldCondition(key="ordinal", range=models.Range(gte=first, lte=last)),
            ]
        )
        return [record.payload or {} for record in self._scroll(selection, True)]

    def section_chunks(self, tenant_id: str, section_id: str) -> list[dict[str, Any]]:
        """Payloads of every chunk of one section (a `section_id` lookup with payload indexes)."""
        selection = models.Filter(
            must=[match("tenant_id", tenant_id), match("section_id", section_id)]
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
            must.append(match("document_id", document_id))
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
        selection = models.Filter(must=[match("tenant_id", tenant_id)]) if tenant_id else None
        result = self._call(
            "count",
            lambda: self.client.count(self.collection, count_filter=selection, exact=True),
        )
        return int(result.count)

    def nearest(
        self,
        queries: Sequence[VectorQuery],
        *,
        filters: SearchFilters | None = None,
        with_payload: bool = False,
    ) -> list[list[ScoredPayload]]:
        """Each query's nearest points by its one named vector (`dense`, `dense_parts`,
        `sparse`, `lexical`) that pass the filters, best first, in one call (one request
        to a server). A query `among` point ids ranks only those: exactly, by a scan of
        them. Payloads are empty unless `with_payload`. Points of one score come in the
        order of their ids: the engine returns them in the order its segments hold them,
        which two builds of the same points do not share."""
        selection = search_filter(filters) if filters else None
        requests = [
            models.QueryRequest(
                query=_query_of(query.vector),
                using=query.using,
                limit=query.limit,
                filter=_among(selection, query.among),
                with_payload=with_payload,
            )
            for query in queries
        ]
        responses = self._call(
            "query", lambda: self.client.query_batch_points(self.collection, requests=requests)
        )
        return [
            sorted(
                (
                    ScoredPayload(point_id=str(p.id), score=float(p.score), payload=p.payload or {})
                    for p in response.points
                ),
                key=lambda point: (-point.score, point.point_id),
            )
            for response in responses
        ]


@dataclass(frozen=True)
class VectorQuery:
    """One named vector's query: its `limit` nearest points, or, given `among`, the
    nearest of those point ids."""

    using: str
    vector: Sequence[float] | SparseWeights | PartVectors
    limit: int
    among: Sequence[str] | None = None


def _among(selection: models.Filter | None, among: Sequence[str] | None) -> models.Filter | None:
    if among is None:
        return selection
    restricted: list[models.Condition] = [models.HasIdCondition(has_id=list(among))]
    return models.Filter(must=[*restricted, *([selection] if selection else [])])
