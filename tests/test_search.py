"""Search: dense, sparse and hybrid (RRF) queries and payload filters, on Qdrant local
mode (or `QDRANT_URL`) with the tiny BGE-M3-shaped model.

The tiny model's dense vectors are random, but its sparse head gives every token a weight
near 1 (see tests/tiny_model.py), so a sparse score counts shared tokens: a keyword query
is decided by the sparse side, alone or fused with the dense side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from indexing.cache import StageCache
from indexing.embedders import BgeM3Embedder
from indexing.reconcile import sync_documents
from indexing.search import SearchFilters, search
from tests.index_helpers import CountingStore, make_document, store_factory
from tests.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["store_factory", "tiny_embedder", "tiny_model_dir"]  # fixtures used below

KEYWORD = "Zanzibar"
TARGET = f"The {KEYWORD} office keeps the spare badge printer in room four."
OTHERS = [
    "Invoices are approved by the finance lead before the end of each month.",
    "The staging cluster is rebuilt every Sunday night from the golden image.",
    "New laptops are ordered through the procurement portal with a cost centre.",
    "Holiday requests need two weeks of notice and the manager's approval.",
]


@pytest.fixture
def indexed(store_factory: Any, tiny_embedder: BgeM3Embedder, tmp_path: Path) -> CountingStore:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True)
    cache = StageCache(tmp_path / "cache")
    documents = [
        make_document(
            "acme",
            "handbook",
            "v1",
            [*OTHERS[:2], TARGET],
            title="Office handbook",
            source_type="confluence",
            source_url="https://wiki.example/display/OPS/Handbook",
            space_key="OPS",
            labels=("office", "howto"),
            extra={"acl": {"public": True, "users": [], "groups": []}},
        ),
        make_document(
            "acme",
            "finance",
            "v1",
            OTHERS[2:],
            title="Finance notes",
            space_key="FIN",
            labels=("finance",),
            extra={"acl": {"public": False, "users": ["ann"], "groups": ["finance"]}},
        ),
        make_document("globex", "handbook", "v1", [TARGET], title="Globex handbook"),
    ]
    for tenant in ("acme", "globex"):
        mine = [d for d in documents if d.chunks[0].tenant_id == tenant]
        sync_documents(store, tiny_embedder, cache, tenant, mine)
    return store


def token_set(embedder: BgeM3Embedder, text: str) -> set[int]:
    return set(embedder.token_ids(text))


def test_keyword_query_finds_its_chunk_through_sparse_and_hybrid(indexed, tiny_embedder):
    query = token_set(tiny_embedder, KEYWORD)
    # Precondition: only the target chunk shares tokens with the query.
    assert query <= token_set(tiny_embedder, TARGET)
    assert all(not query & token_set(tiny_embedder, other) for other in OTHERS)
    acme = SearchFilters(tenant_id="acme")

    sparse_hits = search(indexed, tiny_embedder, KEYWORD, limit=5, filters=acme, mode="sparse")
    assert [h.md_text for h in sparse_hits] == [TARGET]  # nothing else shares a token

    hybrid = search(indexed, tiny_embedder, KEYWORD, limit=5, filters=acme)
    assert hybrid[0].md_text == TARGET
    assert len(hybrid) == 5  # fused with the (random) dense candidates
    top = hybrid[0]
    assert top.title == "Office handbook" and top.headings_path == ["Intro"]
    assert top.source == "https://wiki.example/display/OPS/Handbook"
    assert top.document_id == "handbook" and top.payload["tenant_id"] == "acme"


def test_dense_search_returns_records_with_their_source(indexed, tiny_embedder):
    hits = search(indexed, tiny_embedder, "badge printer", limit=10, mode="dense")
    assert len(hits) == 6
    assert all(-1.0 <= h.score <= 1.0 for h in hits)
    finance = next(h for h in hits if h.document_id == "finance")
    assert finance.source == "/share/finance.docx"
    # The same text embedded as a query matches its own chunk best (cosine 1 vs random).
    (exact,) = search(
        indexed, tiny_embedder, "Office handbook > Intro\n" + TARGET, limit=1, mode="dense"
    )
    assert exact.md_text == TARGET


def documents_found(store: CountingStore, embedder: BgeM3Embedder, **filters: Any) -> set[str]:
    # " the" appears in every chunk, so the sparse side matches them all.
    hits = search(store, embedder, "the", limit=20, filters=SearchFilters(**filters), mode="sparse")
    return {f"{h.payload['tenant_id']}/{h.document_id}" for h in hits}


def test_filters_by_tenant_space_labels_and_source_type(indexed, tiny_embedder):
    assert documents_found(indexed, tiny_embedder) == {
        "acme/handbook",
        "acme/finance",
        "globex/handbook",
    }
    assert documents_found(indexed, tiny_embedder, tenant_id="globex") == {"globex/handbook"}
    assert documents_found(indexed, tiny_embedder, tenant_id="acme", space_keys=("FIN",)) == {
        "acme/finance"
    }
    assert documents_found(indexed, tiny_embedder, labels=("howto", "nothing")) == {"acme/handbook"}
    assert documents_found(indexed, tiny_embedder, source_types=("confluence",)) == {
        "acme/handbook"
    }


def test_acl_filter_shows_public_chunks_and_those_granted_to_user_or_group(indexed, tiny_embedder):
    acme = {"tenant_id": "acme"}
    assert documents_found(indexed, tiny_embedder, **acme, user="bob") == {"acme/handbook"}
    assert documents_found(indexed, tiny_embedder, **acme, user="ann") == {
        "acme/handbook",
        "acme/finance",
    }
    assert documents_found(indexed, tiny_embedder, **acme, user="bob", groups=("finance",)) == {
        "acme/handbook",
        "acme/finance",
    }


def test_sparse_search_needs_sparse_vectors(store_factory, tiny_embedder):
    dense_only = store_factory(tiny_embedder.vector_size, sparse=False)
    with pytest.raises(ValueError, match="sparse"):
        search(dense_only, tiny_embedder, "x", mode="sparse")
    assert search(dense_only, tiny_embedder, "x") == []  # auto: dense on an empty collection
