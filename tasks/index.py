"""Index a prepared batch: embed only texts never embedded, upsert only missing points,
drop the documents' other versions (indexing/reconcile.py `sync_documents`); and
re-index a collection from the stage cache."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from chunking import chunk_document
from chunking.record import Chunk, DocumentInfo
from config.errors import ErrorCode, IngestError
from config.settings import Settings
from indexing.embedders import Embedder, Embedding
from indexing.qdrant_store import QdrantStore, StoreSeconds
from indexing.reconcile import DocumentChunks, sync_documents
from indexing.reindex import Gate, ReindexResult, chunk_of_payload, reindex
from stage_cache.keys import CacheKey
from stage_cache.store import StageCache
from tasks.citations import cite_again
from tasks.links import LinkStore
from tasks.outcome import (
    BatchOutcome,
    PreparedDocument,
    StageCount,
    cache_unwritable,
    embedding_progress,
)
from tasks.plan import SourceSpec
from tasks.prepare import normalized_of
from tasks.refetch import Refetch
from tasks.resources import Resources
from tasks.stages import handoff_cache
from tasks.state import DocumentState, SyncState, pipeline_fingerprint


class _TimedEmbedder:
    """The embedder, with the time spent embedding counted (the rest of a sync is
    cache lookups, upserts and deletes) and its progress reported: texts go to the
    model `step` at a time (its own batch size, so no forward pass gets smaller)."""

    def __init__(self, inner: Embedder, step: int) -> None:
        self.inner = inner
        self.step = max(1, step)
        self.model_id = inner.model_id
        self.vector_size = inner.vector_size
        self.has_sparse = inner.has_sparse
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        started = time.perf_counter()
        embedding_progress(more=len(texts))
        try:
            embedded: list[Embedding] = []
            for start in range(0, len(texts), self.step):
                embedded += self.inner.embed(texts[start : start + self.step])
                embedding_progress(done=min(self.step, len(texts) - start))
            return embedded
        except IngestError:
            raise
        except Exception as exc:  # the model broke on this batch: report, keep old points
            raise IngestError(ErrorCode.EMBED_FAILED, f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.seconds += time.perf_counter() - started


def index_batch(
    spec: SourceSpec,
    settings: Settings,
    documents: Sequence[PreparedDocument],
    resources: Resources,
    *,
    force: bool = False,
) -> BatchOutcome:
    """Raises a transient IngestError (Qdrant or the embedder unavailable) for retry."""
    outcome = BatchOutcome()
    if not documents:
        return outcome
    cache = handoff_cache(settings)
    embedder = resources.embedder()
    # The batch's own, carried by its outcome: under Dask it may run in a worker, whose
    # connection the run's report never reads.
    store_seconds = StoreSeconds()
    store = resources.store(embedder, seconds=store_seconds)
    batch: list[DocumentChunks] = []
    for document in documents:
        records = cache.get_json(CacheKey("chunk", document.chunk_key))
        if records is None:
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                "the chunks prepared for this document left the cache before indexing",
                subject=document.document_id,
                transient=True,
            )
        chunks = [Chunk.from_record(r) for r in records]
        batch.append(DocumentChunks(document.document_id, document.version, chunks))
    unsettled = {d.document_id for d in documents if not d.settled}
    try:
        outcome = _sync(spec, settings, resources, store, embedder, batch, unsettled, force=force)
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.EMBED_FAILED) from exc
    outcome.store_seconds = store_seconds.totals()
    return outcome


def _sync(
    spec: SourceSpec,
    settings: Settings,
    resources: Resources,
    store: QdrantStore,
    embedder: Embedder,
    batch: Sequence[DocumentChunks],
    unsettled: set[str],
    *,
    force: bool,
) -> BatchOutcome:
    """`unsettled`: documents to be read again by the next run (their state gets no
    fingerprint, so the plan finds them changed)."""
    outcome = BatchOutcome()
    # links_in is pushed after indexing; until then these documents' points lack it
    LinkStore(settings.cache.dir, settings.tenant_id).mark_unpushed([d.document_id for d in batch])
    started = time.perf_counter()
    embed_cache = StageCache(
        settings.cache.dir, enabled=settings.cache.enabled and not force, fsync=settings.cache.fsync
    )
    timed = _TimedEmbedder(embedder, settings.embedder.batch_size)
    result = sync_documents(
        store,
        timed,
        embed_cache,
        settings.tenant_id,
        batch,
        lexical=resources.lexical(),
        parts=resources.parts(),
    )
    elapsed = time.perf_counter() - started
    outcome.seconds["embed"] += timed.seconds
    outcome.seconds["upsert"] += elapsed - timed.seconds
    outcome.stages["embed"] = StageCount(done=result.embedded, cached=result.embed_cache_hits)
    outcome.stages["upsert"] = StageCount(
        done=result.documents_written, cached=result.documents_unchanged
    )
    chunks = sum(len(d.chunks) for d in batch)
    outcome.chunk_stages["embed"] = StageCount(done=result.embedded, cached=result.embed_cache_hits)
    outcome.chunk_stages["upsert"] = StageCount(
        done=result.points_upserted, cached=chunks - result.points_upserted
    )
    outcome.over_window = list(result.over_window)
    outcome.window = getattr(embedder, "window", None)
    outcome.indexed = [d.document_id for d in batch]
    fingerprint = pipeline_fingerprint(settings)
    SyncState.for_scope(settings, spec.scope).update(
        {
            d.document_id: DocumentState(
                d.source_version_id,
                "" if d.document_id in unsettled else fingerprint,
                None,
                "no chunks" if not d.chunks else None,
            )
            for d in batch
        }
    )
    return outcome


def reindex_collection(
    settings: Settings,
    resources: Resources,
    *,
    target: str | None = None,
    drop_old: bool = False,
    progress: Callable[[int, int], None] | None = None,
    gate: Gate | None = None,
) -> ReindexResult:
    """Build the collection the settings make now from the one behind the alias and move
    the alias to it, if `gate` lets it (docs/qdrant.md#chunking-changes-and-the-gate). The chunks
    are the old points' payloads, or, where the chunking settings changed, made anew from the
    normalized documents of the stage cache (a document it no longer holds is fetched again).
    Nothing to do when the collection already holds what the settings make."""
    embedder = resources.embedder()
    cache = handoff_cache(settings)
    refetch = Refetch(settings, resources)
    try:
        return reindex(
            resources.store(embedder, check=False),
            embedder,
            resources.lexical(),
            cache,
            target=target,
            drop_old=drop_old,
            keep_old_days=settings.qdrant.keep_old_days,
            progress=progress,
            parts=resources.parts(),
            rechunk=lambda payloads: rechunked(settings, cache, payloads, refetch),
            gate=gate,
        )
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.EMBED_FAILED) from exc


def rechunked(
    settings: Settings, cache: StageCache, payloads: list[dict[str, Any]], refetch: Refetch
) -> list[Chunk]:
    """A document's chunks under the current chunking settings, from its normalized text
    in the stage cache and what its old chunks (`payloads`) hold of the document; where
    the cache no longer holds that text, from its source (`refetch`)."""
    old = chunk_of_payload(payloads[0])
    normalized = normalized_of(cache, old.tenant_id, old.document_id)
    if normalized is None:
        return refetch.chunks(old.tenant_id, old.document_id)
    info = DocumentInfo(
        old.document_id,
        old.tenant_id,
        old.source_version_id,
        title=old.document.get("title"),
        metadata=old.document,
    )
    document = chunk_document(
        normalized.markdown, info, settings.chunking, anchors=normalized.anchors, normalized=True
    )
    return cite_again(document.chunks, payloads)
