"""A chunk's parts and the `dense_parts` multivector: how chunks split into parts, what a
collection with parts holds, that a search prefetches them with the filters inside, that
part vectors are cached like embeddings, and that a re-index adds them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from chunking.parts import PartSplitter, chunk_parts
from chunking.tokens import get_token_counter
from config.settings import LexicalSettings
from indexing.embedders import BgeM3Embedder
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore, SearchFilters
from indexing.reconcile import sync_documents
from indexing.reindex import reindex
from indexing.search import find_points, search
from indexing.store_schema import DENSE, DENSE_PARTS, LEXICAL, CollectionSchema
from stage_cache.store import StageCache
from testkit.index_helpers import (
    CountingEmbedder,
    batch_requests,
    make_document,
    qdrant_settings,
)
from testkit.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["tiny_embedder", "tiny_model_dir"]  # fixtures used below

COUNTER = get_token_counter()
ENCODER = LexicalEncoder(LexicalSettings(avg_len=20.0))  # type: ignore[call-arg]
SPLITTER = PartSplitter(40, COUNTER)  # settings only: one serves every test


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache", fsync=False)


PROSE = (
    "The backup agent copies every volume at night. It keeps seven daily copies and four "
    "weekly ones. Restores are started from the console, never from the agent itself. A "
    "restore of a volume over 2 TB needs the archive tier to be warmed first, which takes "
    "about four hours. Error E4127 means the archive tier was cold when a restore began."
)
TABLE = "| code | meaning |\n|---|---|\n" + "\n".join(
    f"| E{4100 + i} | condition number {i} of the backup agent |" for i in range(12)
)
CODE = (
    "```bash\n"
    + "\n".join(f"backupctl volume add --name vol{i} --tier warm" for i in range(12))
    + "\n```"
)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


@pytest.mark.parametrize("text", [PROSE, TABLE, CODE, f"{PROSE}\n\n{TABLE}\n\n{CODE}"])
def test_parts_hold_every_word_once_within_the_limit_of_whole_units(text: str) -> None:
    parts = chunk_parts(text, 40, COUNTER)
    assert len(parts) > 1
    assert [w for part in parts for w in _words(part)] == _words(text)
    assert all(COUNTER.count(part) <= 40 + 2 for part in parts)  # + the joins' whitespace
    for part in parts:
        lines = part.splitlines()
        # a table row or code line is never cut
        assert all(line == line.strip() or line.startswith("```") for line in lines)
        assert all(line.endswith("|") for line in lines if line.startswith("|"))


def test_prose_parts_are_whole_sentences_and_a_short_text_is_one_part() -> None:
    parts = chunk_parts(PROSE, 40, COUNTER)
    assert all(part.endswith(".") for part in parts)
    assert chunk_parts(PROSE, 400, COUNTER) == [PROSE]
    assert chunk_parts("```\n```", 40, COUNTER) == []  # nothing to embed


def test_a_sentence_over_the_limit_is_cut_into_windows() -> None:
    sentence = " ".join(f"word{i}" for i in range(120)) + "."
    parts = chunk_parts(sentence, 30, COUNTER)
    assert len(parts) > 2 and all(COUNTER.count(p) <= 30 for p in parts)
    assert " ".join(parts) == sentence


def test_parts_carry_the_context_header_and_the_splitter_id_names_its_settings() -> None:
    document = make_document("acme", "doc", "v1", [PROSE])
    chunk = document.chunks[0]
    texts = SPLITTER.texts(chunk)
    header = "Title of doc > Intro\n\n"
    assert texts == [header + part for part in chunk_parts(PROSE, 40, COUNTER)]
    assert SPLITTER.id != PartSplitter(60, COUNTER).id


def _parts_schema(embedder: BgeM3Embedder, splitter: PartSplitter | None) -> CollectionSchema:
    return CollectionSchema(
        vector_size=embedder.vector_size,
        sparse=False,
        lexical=True,
        model_id=embedder.model_id,
        lexical_id=ENCODER.id,
        parts=splitter is not None,
        parts_id=splitter.id if splitter else None,
    )


def test_points_hold_a_vector_per_part_cached_like_embeddings(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    embedder = CountingEmbedder(tiny_embedder)
    document = make_document("acme", "doc", "v1", [PROSE, TABLE])
    with QdrantConnection(qdrant_settings(tmp_path)) as qdrant:
        store = QdrantStore(qdrant, _parts_schema(tiny_embedder, SPLITTER))
        store.ensure_collection()
        assert store.describe().parts and store.describe().parts_id == SPLITTER.id
        result = sync_documents(store, embedder, cache, "acme", [document], ENCODER, SPLITTER)
        part_texts = [t for chunk in document.chunks for t in SPLITTER.texts(chunk)]
        assert result.parts_embedded == len(set(part_texts)) > 2
        records, _ = store.client.scroll(
            store.collection, limit=10, with_vectors=True, with_payload=["ordinal"]
        )
        held: dict[Any, Any] = {r.payload["ordinal"]: r.vector[DENSE_PARTS] for r in records}  # type: ignore[index,call-overload]
        for chunk in document.chunks:
            expected = [e.dense for e in tiny_embedder.embed(SPLITTER.texts(chunk))]
            assert len(held[chunk.ordinal]) == len(expected)
            for got, want in zip(held[chunk.ordinal], expected, strict=True):
                assert got == pytest.approx(want, abs=1e-5)

        # The same texts in a new version: every part vector comes from the cache.
        embedder.texts.clear()
        again = make_document("acme", "doc", "v2", [PROSE, TABLE])
        result = sync_documents(store, embedder, cache, "acme", [again], ENCODER, SPLITTER)
        assert result.points_upserted == 2 and result.parts_embedded == 0
        assert embedder.texts == []


def test_a_chunk_is_found_by_its_best_part_and_hybrid_prefetches_parts_with_filters(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    documents = [
        make_document("acme", f"doc{i}", "v1", [text], extra={"labels": [label]})
        for i, (text, label) in enumerate([(PROSE, "ops"), (TABLE, "ops"), (CODE, "cli")])
    ]
    with QdrantConnection(qdrant_settings(tmp_path)) as qdrant:
        store = QdrantStore(qdrant, _parts_schema(tiny_embedder, SPLITTER))
        store.ensure_collection()
        sync_documents(store, tiny_embedder, cache, "acme", documents, ENCODER, SPLITTER)
        # MaxSim: a query that is one part's own vector scores that chunk 1.0.
        part = SPLITTER.texts(documents[1].chunks[0])[2]
        vector = tiny_embedder.embed([part])[0].dense
        best = find_points(store, {DENSE_PARTS: [vector]}, limit=3)
        assert best[0].payload["document_id"] == "doc1"
        assert best[0].score == pytest.approx(1.0, abs=1e-4)

        with batch_requests(store) as asked:
            filters = SearchFilters(tenant_id="acme", labels=("cli",))
            hits = search(store, tiny_embedder, "backupctl volume add", 3, filters, lexical=ENCODER)
            assert {h.document_id for h in hits} == {"doc2"}
            # Each vector searched once, the filters in every search; the parts (no graph)
            # rank the candidates of the chunk's vector and the lexical one.
            searched, (parts,) = asked[-2:]
            assert [r.using for r in searched] == [DENSE, LEXICAL] and parts.using == DENSE_PARTS
            assert all(r.filter is not None for r in (*searched, parts))
            assert parts.filter is not None and isinstance(parts.filter.must, list)
            (among, _) = parts.filter.must
            assert isinstance(among, models.HasIdCondition) and among.has_id
            search(store, tiny_embedder, "backup", 3, filters, mode="dense")
            (dense,), (parts,) = asked[-2:]
            assert (dense.using, parts.using) == (DENSE, DENSE_PARTS)


def test_parts_rank_the_other_vectors_candidates_never_the_whole_collection(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    """A chunk that only a part of it matches, outside every other vector's candidates, is
    not found: the parts have no graph, and scoring them over the collection would be a
    scan of every part at every search."""
    documents = [
        make_document("acme", f"doc{i}", "v1", [text])
        for i, text in enumerate([PROSE, TABLE, CODE])
    ]
    with QdrantConnection(qdrant_settings(tmp_path)) as qdrant:
        store = QdrantStore(qdrant, _parts_schema(tiny_embedder, SPLITTER))
        store.ensure_collection()
        sync_documents(store, tiny_embedder, cache, "acme", documents, ENCODER, SPLITTER)
        part = tiny_embedder.embed([SPLITTER.texts(documents[1].chunks[0])[2]])[0].dense
        alone = find_points(store, {DENSE_PARTS: [part]}, limit=2)
        assert alone[0].payload["document_id"] == "doc1"
        # Words of doc0 alone: the lexical vector's one candidate.
        terms = ENCODER.encode_query("console archive")
        found = find_points(store, {LEXICAL: terms, DENSE_PARTS: [part]}, limit=2)
        assert [p.payload["document_id"] for p in found] == ["doc0"]


def test_reindex_adds_parts_to_a_collection_without_them(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    settings = qdrant_settings(tmp_path)
    documents = [make_document("acme", f"doc{i}", "v1", [PROSE, TABLE]) for i in range(3)]
    with QdrantConnection(settings) as qdrant:
        old = QdrantStore(qdrant, _parts_schema(tiny_embedder, None))
        old.ensure_collection()
        sync_documents(old, tiny_embedder, cache, "acme", documents, ENCODER)
        live = QdrantStore(qdrant, _parts_schema(tiny_embedder, SPLITTER))
        assert DENSE_PARTS in live.describe().lacks(live.schema)
        embedder = CountingEmbedder(tiny_embedder)
        result = reindex(live, embedder, ENCODER, cache, parts=SPLITTER)
        assert result.moved and result.points == 6
        distinct = {t for d in documents for chunk in d.chunks for t in SPLITTER.texts(chunk)}
        # only part texts were embedded (chunk vectors were copied), each distinct one once
        assert sorted(embedder.texts) == sorted(distinct) and result.embedded == len(distinct)
        assert live.describe().parts and not live.describe().lacks(live.schema)
