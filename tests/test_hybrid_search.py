"""Hybrid retrieval (docs/qdrant.md#lexical-retrieval) on Qdrant local mode (or `QDRANT_URL`):
every point holds a `lexical` vector with Qdrant's IDF, the search modes, IDF after deletes, and
isolation of tenants and readers inside every prefetch of a fused query.

The tiny model's dense vectors are random, so a query's best dense hits are noise: what
a test shows about ranking comes from the lexical side (and BGE-M3's sparse side, whose
weights near 1 count shared tokens)."""

from __future__ import annotations

import dataclasses
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from config.settings import LexicalSettings
from indexing.embedders import BgeM3Embedder
from indexing.lexical import LexicalEncoder, term_id
from indexing.qdrant_store import QdrantConnection, QdrantStore, SearchFilters
from indexing.reconcile import DocumentChunks, sync_documents
from indexing.search import SearchUnavailable, find_points, search
from indexing.store_schema import LEXICAL
from stage_cache.store import StageCache
from testkit.index_helpers import CountingStore, batch_requests, make_document, store_factory
from testkit.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["store_factory", "tiny_embedder", "tiny_model_dir"]  # fixtures used below

ENCODER = LexicalEncoder(LexicalSettings(avg_len=20.0))  # type: ignore[call-arg]
PUBLIC = {"acl": {"public": True, "users": [], "groups": []}}
FINANCE_ONLY = {"acl": {"public": False, "restricted": True, "users": [], "groups": ["finance"]}}
FILLER = (
    "The team reviews the service dashboards every morning and writes down what changed "
    "since the last review in the shared notes."
)


def index(
    store: CountingStore, embedder: BgeM3Embedder, cache: StageCache, docs: list[DocumentChunks]
) -> None:
    for tenant in sorted({d.chunks[0].tenant_id for d in docs}):
        mine = [d for d in docs if d.chunks[0].tenant_id == tenant]
        sync_documents(store, embedder, cache, tenant, mine, lexical=ENCODER)


@pytest.fixture
def hybrid_store(store_factory: Any, tiny_embedder: BgeM3Embedder) -> CountingStore:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True, lexical=True)
    return store


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache", fsync=False)


def lexical_ids(store: QdrantStore, query: str, **filters: Any) -> list[str]:
    hits = search(
        store,
        None,
        query,
        limit=10,
        filters=SearchFilters(**filters),
        mode="lexical",
        lexical=ENCODER,
    )
    return [f"{h.payload['tenant_id']}/{h.document_id}" for h in hits]


def test_every_point_holds_a_lexical_vector_with_idf_even_when_empty(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    document = make_document("acme", "doc", "v1", ["Restart the queue worker.", "x"])
    only_stop_words = dataclasses.replace(document.chunks[1], embed_text="the of and to")
    document = dataclasses.replace(document, chunks=[document.chunks[0], only_stop_words])
    index(hybrid_store, tiny_embedder, cache, [document])

    physical = hybrid_store.resolve() or ""
    info: Any = hybrid_store.client.get_collection(physical)
    assert info.config.params.sparse_vectors[LEXICAL].modifier.value == "idf"
    assert info.config.metadata["ingest"]["state"] == "live"
    records: Any = hybrid_store.client.retrieve(
        physical, ids=[c.point_id for c in document.chunks], with_vectors=True
    )
    by_id = {str(r.id): r.vector[LEXICAL] for r in records}
    first = by_id[document.chunks[0].point_id]
    assert term_id("worker") in first.indices and term_id("the") not in first.indices
    assert by_id[only_stop_words.point_id].indices == []


def test_lexical_search_finds_the_exact_identifier(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    target = "If the sync stops with ERR_CONN_RESET, raise confluence.timeout_s and retry."
    docs = [make_document("acme", f"d{i}", "v1", [FILLER]) for i in range(6)]
    docs.append(make_document("acme", "target", "v1", [target]))
    index(hybrid_store, tiny_embedder, cache, docs)
    assert lexical_ids(hybrid_store, "what does err_conn_reset mean?")[:1] == ["acme/target"]
    assert lexical_ids(hybrid_store, "connection reset error")[:1] == ["acme/target"]
    # auto = hybrid: the lexical side lifts the identifier's chunk to the top
    auto = search(hybrid_store, tiny_embedder, "ERR_CONN_RESET", limit=3, lexical=ENCODER)
    assert auto[0].document_id == "target"


def test_idf_from_qdrant_ranks_a_rare_term_above_a_frequent_one(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    frequent = "server server server cluster"
    rare = "quokka cluster"
    docs = [make_document("acme", "frequent", "v1", [frequent])]
    docs += [make_document("acme", f"other{i}", "v1", [f"server note {i}"]) for i in range(8)]
    docs.append(make_document("acme", "rare", "v1", [rare]))
    index(hybrid_store, tiny_embedder, cache, docs)
    query = ENCODER.encode_query("server quokka")
    # Term frequency alone (no IDF) would rank the frequent document first ...
    plain = {
        name: sum(ENCODER.encode(embed)[t] for t in query if t in ENCODER.encode(embed))
        for name, embed in (
            ("frequent", docs[0].chunks[0].embed_text),
            ("rare", docs[-1].chunks[0].embed_text),
        )
    }
    assert plain["frequent"] > plain["rare"]
    # ... Qdrant's IDF (server in 9 of 10 documents, quokka in 1) turns it round.
    assert lexical_ids(hybrid_store, "server quokka")[0] == "acme/rare"


def test_ranking_after_deleting_half_equals_a_collection_of_the_rest(
    store_factory: Any, tiny_embedder: BgeM3Embedder, cache: StageCache, tmp_path: Path
) -> None:
    """Document frequencies forget deleted points
    (https://github.com/qdrant/qdrant-client/issues/1426 was a local mode where they did not): the
    same order and scores as a fresh collection, in the connection that deleted and after
    reopening."""
    rng = random.Random(7)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    docs = [
        make_document("acme", f"d{i}", "v1", [" ".join(rng.choices(words, k=12))])
        for i in range(20)
    ]
    queries = ["alpha bravo", "charlie", "delta echo foxtrot", "golf hotel alpha"]
    pruned = store_factory(tiny_embedder.vector_size, sparse=True, lexical=True)
    index(pruned, tiny_embedder, cache, docs)
    pruned.delete_documents("acme", [d.document_id for d in docs[::2]])
    fresh = store_factory(
        tiny_embedder.vector_size, sparse=True, lexical=True, path=str(tmp_path / "fresh")
    )
    index(fresh, tiny_embedder, cache, docs[1::2])

    def ranking(store: QdrantStore, query: str) -> list[tuple[str, float]]:
        hits = search(store, tiny_embedder, query, limit=10, mode="lexical", lexical=ENCODER)
        # equal scores may come in either order
        return sorted(
            ((h.document_id, round(h.score, 4)) for h in hits), key=lambda h: (-h[1], h[0])
        )

    expected = {q: ranking(fresh, q) for q in queries}
    assert all(expected.values())
    assert {q: ranking(pruned, q) for q in queries} == expected
    pruned.connection.close()
    with QdrantConnection(pruned.settings) as reopened:
        store = QdrantStore(reopened, pruned.schema)
        assert {q: ranking(store, q) for q in queries} == expected


def test_hybrid_search_never_returns_another_tenants_or_an_unreadable_point(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    text = "Quarterly budget review of the Zanzibar office and its printers."
    docs = [
        make_document("acme", "open", "v1", [text, FILLER], extra=PUBLIC),
        make_document("acme", "ledger", "v1", [text], extra=FINANCE_ONLY),
        make_document("globex", "open", "v1", [text, FILLER], extra=PUBLIC),
        make_document("globex", "ledger", "v1", [text], extra=FINANCE_ONLY),
    ]
    index(hybrid_store, tiny_embedder, cache, docs)
    for mode in ("auto", "hybrid", "lexical", "dense"):
        for tenant in ("acme", "globex"):
            found = search(
                hybrid_store, tiny_embedder, "Zanzibar budget", limit=10,
                filters=SearchFilters(tenant_id=tenant, user="bob"), mode=mode, lexical=ENCODER,
            )  # fmt: skip
            assert {(h.payload["tenant_id"], h.document_id) for h in found} == {(tenant, "open")}
            granted = search(
                hybrid_store, tiny_embedder, "Zanzibar budget", limit=10,
                filters=SearchFilters(tenant_id=tenant, groups=("finance",)), mode=mode,
                lexical=ENCODER,
            )  # fmt: skip
            assert {h.payload["tenant_id"] for h in granted} == {tenant}
            assert {h.document_id for h in granted} == {"open", "ledger"}


def test_auto_fuses_dense_lexical_and_sparse_with_the_filter_in_every_prefetch(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    index(hybrid_store, tiny_embedder, cache, [make_document("acme", "d", "v1", [FILLER])])
    with batch_requests(hybrid_store) as asked:
        search(
            hybrid_store, tiny_embedder, "service dashboards", limit=2,
            filters=SearchFilters(tenant_id="acme"), lexical=ENCODER, prefetch_limit=30,
        )  # fmt: skip
    # one request to the engine, each vector searched once
    (requests,) = asked
    assert sorted(str(r.using) for r in requests) == ["dense", "lexical", "sparse"]
    # the candidates are the prefetch limit's, not a multiple of the limit asked
    assert all(r.filter is not None and r.limit == 30 for r in requests)


def test_a_tie_of_the_fusion_goes_to_the_models_ranking_every_time(store_factory: Any) -> None:
    """Point `a` is first in the dense ranking only, `b` first in the lexical one only:
    their fused scores tie. The model's ranking wins the tie on every engine and in every
    query (Edge and a server would otherwise order ties by a hash that varies)."""
    store: CountingStore = store_factory(4, sparse=False, lexical=True)
    points = [
        models.PointStruct(
            id=f"00000000-0000-0000-0000-00000000000{i}",
            vector={
                "dense": dense,
                LEXICAL: models.SparseVector(indices=terms, values=[1.0] * len(terms)),
            },
            payload={"tenant_id": "t", "name": name},
        )
        for i, (name, dense, terms) in enumerate(
            [("a", [1.0, 0.0, 0.0, 0.0], []), ("b", [0.0, 1.0, 0.0, 0.0], [7])], start=1
        )
    ]
    store.client.upsert(store.collection, points)
    query: dict[str, list[float] | dict[int, float]] = {
        "dense": [1.0, 0.0, 0.0, 0.0],
        LEXICAL: {7: 1.0},
    }
    firsts = {
        find_points(store, query, limit=1, prefetch_limit=1, filters=SearchFilters(tenant_id="t"))[
            0
        ].payload["name"]
        for _ in range(30)
    }
    assert firsts == {"a"}


def test_queries_without_terms_and_hostile_queries_answer_or_say_why(
    hybrid_store: CountingStore, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    index(hybrid_store, tiny_embedder, cache, [make_document("acme", "d", "v1", [FILLER])])
    with pytest.raises(SearchUnavailable, match="only stop words"):
        search(hybrid_store, tiny_embedder, "the of and", mode="lexical", lexical=ENCODER)
    # hybrid goes on with the vectors the query has
    assert search(hybrid_store, tiny_embedder, "the of and", lexical=ENCODER)
    for query in ("x" * 10_000, "\x00\x1b\x7f dashboards", "сервер service 東京", "   "):
        search(hybrid_store, tiny_embedder, query, mode="hybrid", lexical=ENCODER)
    assert hybrid_store.count() == 1


def test_a_collection_without_lexical_is_searched_without_it_saying_how_to_add_it(
    store_factory: Any,
    tiny_embedder: BgeM3Embedder,
    cache: StageCache,
    caplog: pytest.LogCaptureFixture,
) -> None:
    old = store_factory(tiny_embedder.vector_size, sparse=True)
    sync_documents(old, tiny_embedder, cache, "acme", [make_document("acme", "d", "v1", [FILLER])])
    with caplog.at_level(logging.WARNING, logger="indexing.search"):
        hits = search(old, tiny_embedder, "service dashboards", lexical=ENCODER)
        search(old, tiny_embedder, "service dashboards", lexical=ENCODER)
    assert [h.document_id for h in hits] == ["d"]
    warned = [r.getMessage() for r in caplog.records if "lexical" in r.getMessage()]
    assert len(warned) == 1 and "ingest reindex" in warned[0]
    with pytest.raises(SearchUnavailable, match="ingest reindex"):
        search(old, tiny_embedder, "service", mode="lexical", lexical=ENCODER)
