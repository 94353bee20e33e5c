"""Query the index (SPEC §7 `ingest search`): dense, sparse, or hybrid (RRF fusion)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from indexing.embedders import Embedder
from indexing.qdrant_store import QdrantStore, SearchFilters

__all__ = ["SearchFilters", "SearchHit", "search"]

SearchMode = Literal["auto", "dense", "sparse", "hybrid"]


@dataclass(frozen=True)
class SearchHit:
    score: float
    chunk_id: str
    document_id: str
    title: str | None
    headings_path: list[str]
    source: str | None  # the page URL or the file path
    md_text: str
    payload: dict[str, Any]


def search(
    store: QdrantStore,
    embedder: Embedder,
    query: str,
    limit: int = 10,
    filters: SearchFilters | None = None,
    *,
    mode: SearchMode = "auto",
) -> list[SearchHit]:
    """`auto` is hybrid when both the collection and the embedder have sparse vectors."""
    embedding = embedder.embed([query])[0]
    has_sparse = store.sparse and embedding.sparse is not None
    if mode == "auto":
        mode = "hybrid" if has_sparse else "dense"
    if mode in ("sparse", "hybrid") and not has_sparse:
        raise ValueError(f"{mode} search needs sparse vectors in the embedder and collection")
    dense = embedding.dense if mode in ("dense", "hybrid") else None
    sparse = embedding.sparse if mode in ("sparse", "hybrid") else None
    points = store.query(dense, sparse, limit=limit, filters=filters)
    return [
        SearchHit(
            score=point.score,
            chunk_id=str(point.payload.get("chunk_id", "")),
            document_id=str(point.payload.get("document_id", "")),
            title=point.payload.get("title"),
            headings_path=list(point.payload.get("headings_path") or []),
            source=point.payload.get("source_url") or point.payload.get("file_path"),
            md_text=str(point.payload.get("md_text", "")),
            payload=point.payload,
        )
        for point in points
    ]
