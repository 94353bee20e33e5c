"""Helpers for the index-layer tests: chunk records built with the real id formula, a
Qdrant store on a temporary local directory (or the server named by `QDRANT_URL`), and
counting wrappers around the real embedder and store."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from chunking.record import Chunk, compute_chunk_id
from config.settings import LexicalSettings, QdrantSettings
from indexing.embedders import Embedder, Embedding
from indexing.lexical import LexicalEncoder, SparseWeights
from indexing.qdrant_store import PartVectors, QdrantConnection, QdrantStore
from indexing.reconcile import DocumentChunks
from indexing.store_schema import CollectionSchema


def make_chunk(
    tenant_id: str,
    document_id: str,
    version: str,
    ordinal: int,
    text: str,
    **fields: Any,
) -> Chunk:
    title = fields.pop("title", f"Title of {document_id}")
    headings = tuple(fields.pop("headings_path", ("Intro",)))
    chunk_type = fields.pop("chunk_type", "paragraph")
    document: dict[str, Any] = {
        "source_type": "file",
        "source_url": None,
        "file_path": f"/share/{document_id}.docx",
        "labels": [],
        "updated_at": "2026-01-02T03:04:05Z",
        "author": "A. Author",
        "title": title,
        **fields.pop("extra", {}),
    }
    own = {name for name in Chunk.__dataclass_fields__ if name != "document"}
    values = {k: v for k, v in fields.items() if k in own}
    document |= {
        k: list(v) if isinstance(v, tuple) else v for k, v in fields.items() if k not in own
    }
    return Chunk(
        chunk_id=compute_chunk_id(tenant_id, document_id, version, ordinal, text, chunk_type),
        tenant_id=tenant_id,
        document_id=document_id,
        source_version_id=version,
        ordinal=ordinal,
        chunk_type=chunk_type,
        headings_path=headings,
        chunk_path="/" + "/".join(headings),
        md_text=text,
        overlap_prefix="",
        embed_text=f"{title} > {' > '.join(headings)}\n{text}",
        char_start=ordinal * 1000,
        char_end=ordinal * 1000 + len(text),
        block_start_idx=ordinal,
        block_end_idx=ordinal,
        token_count=len(text.split()),
        document=document,
        **values,
    )


def make_document(
    tenant_id: str, document_id: str, version: str, paragraphs: Sequence[str], **fields: Any
) -> DocumentChunks:
    chunks = [
        make_chunk(tenant_id, document_id, version, i, text, **fields)
        for i, text in enumerate(paragraphs)
    ]
    return DocumentChunks(document_id=document_id, source_version_id=version, chunks=chunks)


def qdrant_settings(tmp_path: Path, **overrides: Any) -> QdrantSettings:
    """The embedded store (Edge unless `engine` says) in `tmp_path`, or the server in
    `QDRANT_URL` with a unique collection."""
    values: dict[str, Any] = {"collection": f"t{uuid.uuid4().hex[:12]}", "upsert_batch_size": 16}
    url = os.environ.get("QDRANT_URL")
    if url:
        values.update(url=url, api_key=os.environ.get("QDRANT_API_KEY") or None, timeout_s=10)
    else:
        values["path"] = str(tmp_path / "qdrant")
    values.update(overrides)
    return QdrantSettings(**values)


class CountingEmbedder:
    """The real embedder, counting the texts it is asked to embed."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.has_sparse = inner.has_sparse
        self.texts: list[str] = []

    @property
    def vector_size(self) -> int:
        return self.inner.vector_size

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


class CountingStore(QdrantStore):
    """The real store, counting points written and delete calls."""

    upserted = 0
    deleted = 0

    def upsert(
        self,
        chunks: Sequence[Chunk],
        embeddings: Sequence[Embedding],
        lexical: Sequence[SparseWeights] | None = None,
        parts: Sequence[PartVectors] | None = None,
    ) -> int:
        self.upserted += len(chunks)
        return super().upsert(chunks, embeddings, lexical, parts)

    def delete_points(self, tenant_id: str, point_ids: Sequence[str]) -> int:
        self.deleted += len(point_ids)
        return super().delete_points(tenant_id, point_ids)


def schema(vector_size: int, sparse: bool, lexical: bool = False) -> CollectionSchema:
    return CollectionSchema(vector_size=vector_size, sparse=sparse, lexical=lexical)


ENCODER = LexicalEncoder(LexicalSettings())  # type: ignore[call-arg]


def schema_of(embedder: Embedder, lexical: bool = False) -> CollectionSchema:
    """The schema the embedder makes, without part vectors (and lexical if asked)."""
    return CollectionSchema(
        vector_size=embedder.vector_size,
        sparse=embedder.has_sparse,
        lexical=lexical,
        model_id=embedder.model_id,
        lexical_id=ENCODER.id if lexical else None,
    )


def open_store(
    settings: QdrantSettings, vector_size: int, sparse: bool, lexical: bool = False
) -> CountingStore:
    store = CountingStore(QdrantConnection(settings), schema(vector_size, sparse, lexical))
    store.ensure_collection()
    return store


@pytest.fixture
def store_factory(tmp_path: Path, engine: str) -> Iterator[Any]:
    """Opens stores on a fresh collection, on each engine; drops server collections and
    closes their connections."""
    opened: list[QdrantStore] = []

    def factory(
        vector_size: int, sparse: bool, lexical: bool = False, **overrides: Any
    ) -> CountingStore:
        embedded = {} if engine == "server" else {"engine": engine}
        settings = qdrant_settings(tmp_path, **{**embedded, **overrides})
        store = open_store(settings, vector_size, sparse, lexical)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        if store.settings.url:
            for name in {store.resolve(), store.alias}:
                if name and store.client.collection_exists(name):
                    store.drop_collection(name)
    for store in opened:
        store.connection.close()


@contextmanager
def batch_requests(store: QdrantStore) -> Iterator[list[list[models.QueryRequest]]]:
    """The requests of each `query_batch_points` call the store makes inside the block:
    what a search asks of the engine, whichever engine it is."""
    asked: list[list[models.QueryRequest]] = []
    real = store.client.query_batch_points

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(list(kwargs["requests"]))
        return real(*args, **kwargs)

    store.client.query_batch_points = spy  # type: ignore[method-assign]
    try:
        yield asked
    finally:
        store.client.query_batch_points = real  # type: ignore[method-assign]
