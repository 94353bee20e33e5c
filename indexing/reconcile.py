"""Bring a tenant's points in line with its documents (docs/qdrant.md#reconcile).

- `sync_documents`: per document, the points that are missing are embedded (through the
  embedding cache) and written FIRST; only then are the document's other points (older
  versions, chunks that no longer exist) deleted. A crash between the two leaves stale
  extra points that the next run removes, never a document without points. Points are
  compared by id (`Chunk.point_id` is derived from tenant, document, version, ordinal and
  text), so an unchanged document costs no embedding and no upsert, and re-chunking the
  same version replaces exactly the chunks that changed.
- `delete_missing_documents`: after a COMPLETE listing of a source, its documents that
  were not listed are deleted, unless that is more than `reconcile.max_delete_share` of the
  source's documents (refused unless forced). An incomplete listing deletes nothing.

Every read and delete is scoped by `tenant_id`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chunking.parts import PartSplitter
from chunking.record import Chunk
from config.errors import ErrorCode, IngestError
from indexing.embed_cache import embed_with_cache, lexical_with_cache, parts_with_cache
from indexing.embedders import Embedder
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantStore
from stage_cache.store import StageCache


@dataclass(frozen=True)
class DocumentChunks:
    """All chunks of one version of one document (possibly none)."""

    document_id: str
    source_version_id: str
    chunks: Sequence[Chunk]


@dataclass(frozen=True)
class SyncResult:
    documents_unchanged: int
    documents_written: int
    points_upserted: int
    points_deleted: int
    embed_cache_hits: int
    embedded: int
    # Texts whose lexical weights were computed (the rest came from the cache).
    lexical_encoded: int = 0
    # Part texts embedded for `dense_parts` (the rest came from the cache).
    parts_embedded: int = 0
    # Chunks embedded this time whose embed_text was longer than the model's window
    # (embedded window by window, not cut): (document_id, ordinal, windows).
    over_window: tuple[tuple[str, int, int], ...] = ()


class MassDeletionRefused(IngestError):
    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.UPSERT_FAILED, message, subject="reconcile.max_delete_share")

    def __reduce__(self) -> tuple[object, ...]:
        return (MassDeletionRefused, (self.message,))


def sync_documents(
    store: QdrantStore,
    embedder: Embedder,
    cache: StageCache,
    tenant_id: str,
    documents: Sequence[DocumentChunks],
    lexical: LexicalEncoder | None = None,
    parts: PartSplitter | None = None,
) -> SyncResult:
    """`lexical` encodes the `lexical` vector and `parts` splits the chunks for the
    `dense_parts` vectors, where the collection holds them."""
    for document in documents:
        for chunk in document.chunks:
            if (chunk.tenant_id, chunk.document_id) != (tenant_id, document.document_id):
                raise ValueError(
                    f"chunk {chunk.chunk_id} belongs to {chunk.tenant_id}/{chunk.document_id}, "
                    f"not {tenant_id}/{document.document_id}"
                )
    existing = store.existing_points(tenant_id, [d.document_id for d in documents])
    pending: list[Chunk] = []
    stale: list[str] = []
    unchanged = 0
    for document in documents:
        current = existing.get(document.document_id, {})
        wanted = {chunk.point_id for chunk in document.chunks}
        missing = [chunk for chunk in document.chunks if chunk.point_id not in current]
        obsolete = [pid for pid in current if pid not in wanted]
        if not missing and not obsolete:
            unchanged += 1
        pending.extend(missing)
        stale.extend(obsolete)
    texts = [chunk.embed_text for chunk in pending]
    embedded = embed_with_cache(embedder, texts, cache)
    weights = None
    if store.holds.lexical:
        if lexical is None:
            raise ValueError(f"collection {store.collection!r} holds lexical vectors: no encoder")
        weights = lexical_with_cache(lexical, texts, cache)
    part_vectors = None
    if store.holds.parts:
        if parts is None:
            raise ValueError(f"collection {store.collection!r} holds part vectors: no splitter")
        part_vectors = parts_with_cache(embedder, parts, pending, cache)
    upserted = (
        store.upsert(
            pending,
            embedded.values,
            weights.values if weights else None,
            part_vectors.values if part_vectors else None,
        )
        if pending
        else 0
    )
    deleted = store.delete_points(tenant_id, stale)
    return SyncResult(
        documents_unchanged=unchanged,
        documents_written=len(documents) - unchanged,
        points_upserted=upserted,
        points_deleted=deleted,
        embed_cache_hits=embedded.hits,
        embedded=embedded.misses,
        lexical_encoded=weights.misses if weights else 0,
        parts_embedded=part_vectors.misses if part_vectors else 0,
        over_window=tuple(
            (chunk.document_id, chunk.ordinal, embedding.windows)
            for chunk, embedding in zip(pending, embedded.values, strict=True)
            if embedding.windows > 1
        ),
    )


def delete_missing_documents(
    store: QdrantStore,
    tenant_id: str,
    listed_document_ids: Sequence[str],
    *,
    listing_complete: bool,
    max_delete_share: float,
    source_type: str | None = None,
    container: str | None = None,
    owned: Callable[[str], bool] | None = None,
    force: bool = False,
    delete: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> list[str]:
    """Delete the source's documents that a complete listing no longer has; returns those
    deleted. `owned` narrows the source further (a files run owns only what its roots can
    list); `delete` deletes documents and returns those it deleted (by default all of
    them, by the store)."""
    if not listing_complete:
        return []
    indexed = store.document_ids(tenant_id, source_type=source_type, container=container)
    if owned is not None:
        indexed = {d for d in indexed if owned(d)}
    missing = sorted(indexed - set(listed_document_ids))
    if not missing:
        return []
    share = len(missing) / len(indexed)
    if share > max_delete_share and not force:
        source = " ".join(
            part for part in (source_type, f"in {container}" if container else None) if part
        )
        raise MassDeletionRefused(
            f"refusing to delete {len(missing)} of {len(indexed)} indexed documents "
            f"({share:.0%}) of tenant {tenant_id!r} {source or 'all sources'}: above "
            f"reconcile.max_delete_share={max_delete_share:.0%}. Check the source listing; "
            "if the deletion is intended, run again with force"
        )
    if delete is not None:
        return list(delete(missing))
    store.delete_documents(tenant_id, missing)
    return missing
