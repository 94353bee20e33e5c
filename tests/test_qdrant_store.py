"""The Qdrant store and reconcile against Qdrant local mode (or `QDRANT_URL`), driven by
the tiny BGE-M3-shaped model through the embedding cache."""

from __future__ import annotations

import socket
import threading
import warnings
from pathlib import Path
from typing import Any

import pytest
from qdrant_client import models

from config.errors import ConfigError, ErrorCode, IngestError
from indexing.embedders import BgeM3Embedder
from indexing.qdrant_store import QdrantConnection, QdrantStore, StoreSeconds
from indexing.reconcile import (
    DocumentChunks,
    MassDeletionRefused,
    delete_missing_documents,
    sync_documents,
)
from indexing.search import find_points
from indexing.store_schema import DENSE, PAYLOAD_INDEXES
from stage_cache.store import StageCache
from testkit.index_helpers import (
    CountingEmbedder,
    CountingStore,
    make_document,
    qdrant_settings,
    schema,
    store_factory,
)
from testkit.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["store_factory", "tiny_embedder", "tiny_model_dir"]  # fixtures used below

PARAGRAPHS = [
    "Backups run nightly at two o'clock and are kept for thirty days.",
    "Restores are requested through the service desk with the ticket template.",
    "Encryption keys rotate every quarter; the vault holds the previous key.",
]


@pytest.fixture
def embedder(tiny_embedder: BgeM3Embedder) -> CountingEmbedder:
    return CountingEmbedder(tiny_embedder)


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache")


@pytest.fixture
def store(store_factory: Any, tiny_embedder: BgeM3Embedder) -> CountingStore:
    store: CountingStore = store_factory(tiny_embedder.vector_size, sparse=True)
    return store


def docs(tenant: str, version: str = "v1", count: int = 2) -> list[DocumentChunks]:
    return [make_document(tenant, f"doc-{i}", version, PARAGRAPHS) for i in range(count)]


def test_first_load_writes_every_chunk_with_a_lean_payload(store, embedder, cache):
    result = sync_documents(store, embedder, cache, "acme", docs("acme"))

    assert store.count("acme") == 6
    # embed_text carries the document title, so the two documents' chunks all differ.
    assert (result.points_upserted, result.embedded, result.documents_written) == (6, 6, 2)
    assert store.upserted == 6 and len(embedder.texts) == 6
    hit = find_points(store, {DENSE: embedder.embed(["backups"])[0].dense}, limit=1)[0]
    assert "embed_text" not in hit.payload
    assert hit.payload["tenant_id"] == "acme"
    assert hit.payload["md_text"] in PARAGRAPHS
    assert store.existing_versions("acme", ["doc-0", "doc-1"]) == {
        "doc-0": {"v1"},
        "doc-1": {"v1"},
    }
    assert store.document_ids("acme") == {"doc-0", "doc-1"}


def test_the_client_calls_are_timed_as_writes_or_reads(store, embedder, cache):
    """A call that changes the collection counts as `writes`, any other as `reads`, on the
    connection's `StoreSeconds` unless the store was given its own."""
    before = store.seconds.totals()
    assert store.seconds is store.connection.seconds
    sync_documents(store, embedder, cache, "acme", docs("acme"))
    written = store.seconds.totals()
    assert written["writes"] > before["writes"]

    store.count("acme")
    counted = store.seconds.totals()
    assert counted["writes"] == written["writes"] and counted["reads"] > written["reads"]

    own = StoreSeconds()
    QdrantStore(store.connection, store.schema, seconds=own).count("acme")
    assert own.totals()["reads"] > 0 and own.totals()["writes"] == 0
    assert store.seconds.totals() == counted


def test_unchanged_rerun_embeds_nothing_and_upserts_nothing(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme"))
    embedder.texts.clear()
    store.upserted = store.deleted = 0

    result = sync_documents(store, embedder, cache, "acme", docs("acme"))

    assert embedder.texts == [] and store.upserted == 0 and store.deleted == 0
    assert (result.documents_unchanged, result.documents_written) == (2, 0)
    assert store.count("acme") == 6


def test_edited_paragraph_reembeds_only_that_chunk(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme"))
    embedder.texts.clear()
    edited = [PARAGRAPHS[0], "Restores now go through the self-service portal.", PARAGRAPHS[2]]

    result = sync_documents(
        store, embedder, cache, "acme", [make_document("acme", "doc-0", "v2", edited)]
    )

    assert len(embedder.texts) == 1 and "self-service portal" in embedder.texts[0]
    assert (result.embed_cache_hits, result.embedded) == (2, 1)
    # A new version has new chunk ids: all its points are written, the old ones removed.
    assert (result.points_upserted, result.points_deleted) == (3, 3)
    assert store.existing_versions("acme", ["doc-0", "doc-1"]) == {
        "doc-0": {"v2"},
        "doc-1": {"v1"},
    }
    assert store.count("acme") == 6


def test_shrinking_a_document_removes_its_extra_points(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme", count=1))
    result = sync_documents(
        store, embedder, cache, "acme", [make_document("acme", "doc-0", "v2", PARAGRAPHS[:1])]
    )
    assert store.count("acme") == 1
    assert result.points_deleted == 3
    assert store.existing_versions("acme", ["doc-0"]) == {"doc-0": {"v2"}}


def test_rechunking_the_same_version_replaces_only_changed_chunks(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme", count=1))
    store.upserted = 0
    merged = [PARAGRAPHS[0], PARAGRAPHS[1] + " " + PARAGRAPHS[2]]
    result = sync_documents(
        store, embedder, cache, "acme", [make_document("acme", "doc-0", "v1", merged)]
    )
    assert (store.upserted, result.points_deleted) == (1, 2)
    assert store.count("acme") == 2


class CrashingDeleteStore(CountingStore):
    def delete_points(self, tenant_id, point_ids):
        raise IngestError(ErrorCode.UPSERT_FAILED, "simulated crash", transient=True)


def test_crash_between_upsert_and_delete_leaves_extras_the_next_run_removes(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme", count=1))
    crashing = CrashingDeleteStore(store.connection, store.schema)
    crashing.ensure_collection()
    v2 = [make_document("acme", "doc-0", "v2", PARAGRAPHS[:2])]

    with pytest.raises(IngestError, match="simulated crash"):
        sync_documents(crashing, embedder, cache, "acme", v2)
    assert store.existing_versions("acme", ["doc-0"]) == {"doc-0": {"v1", "v2"}}

    result = sync_documents(store, embedder, cache, "acme", v2)
    assert (result.points_upserted, result.points_deleted) == (0, 3)
    assert store.existing_versions("acme", ["doc-0"]) == {"doc-0": {"v2"}}


def test_tenants_with_the_same_document_ids_never_touch_each_other(store, embedder, cache):
    sync_documents(store, embedder, cache, "acme", docs("acme"))
    sync_documents(store, embedder, cache, "globex", docs("globex"))
    globex_points = store.existing_points("globex", ["doc-0", "doc-1"])

    sync_documents(
        store, embedder, cache, "acme", [make_document("acme", "doc-0", "v9", PARAGRAPHS[:1])]
    )
    store.delete_documents("acme", ["doc-1"])
    deleted = delete_missing_documents(
        store, "acme", [], listing_complete=True, max_delete_share=0.2, force=True
    )

    assert deleted == ["doc-0"]  # doc-1 was deleted just above
    assert store.count("acme") == 0
    assert store.existing_points("globex", ["doc-0", "doc-1"]) == globex_points
    assert store.count("globex") == 6


def test_document_fields_are_set_on_exactly_the_tenants_documents(store, embedder, cache):
    """`set_documents_fields` (how `links_in` reaches payloads): every point of the named
    documents of that tenant, nothing of its other documents or of another tenant."""
    sync_documents(store, embedder, cache, "acme", docs("acme", count=3))
    sync_documents(store, embedder, cache, "globex", docs("globex", count=3))

    store.set_documents_fields("acme", ["doc-0", "doc-2", "doc-missing"], {"links_in": 7})

    def links_in(tenant: str) -> dict[str, set[Any]]:
        records, _ = store.client.scroll(
            store.collection,
            scroll_filter=models.Filter(
                must=[models.FieldCondition(key="tenant_id", match=models.MatchValue(value=tenant))]
            ),
            limit=100,
        )
        found: dict[str, set[Any]] = {}
        for record in records:
            payload = record.payload or {}
            found.setdefault(payload["document_id"], set()).add(payload.get("links_in"))
        return found

    assert links_in("acme") == {"doc-0": {7}, "doc-1": {None}, "doc-2": {7}}
    assert links_in("globex") == {"doc-0": {None}, "doc-1": {None}, "doc-2": {None}}


def test_first_batches_creating_the_collection_at_once_lose_no_points(tmp_path, tiny_embedder):
    """Index batches start together on a fresh Qdrant and each finds no collection: one
    collection must be created behind the alias, holding every batch's points."""
    import threading

    qdrant = QdrantConnection(qdrant_settings(tmp_path / "race"))
    embedder = CountingEmbedder(tiny_embedder)
    start = threading.Barrier(6)
    errors: list[BaseException] = []

    def first_batch(i: int) -> None:
        try:
            store = QdrantStore(qdrant, schema(tiny_embedder.vector_size, tiny_embedder.has_sparse))
            start.wait()
            store.ensure_collection()
            document = make_document("acme", f"doc-{i}", "v1", PARAGRAPHS)
            sync_documents(store, embedder, StageCache(tmp_path / f"c{i}"), "acme", [document])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=first_batch, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []
    store = QdrantStore(qdrant, schema(tiny_embedder.vector_size, tiny_embedder.has_sparse))
    try:
        found = store.existing_points("acme", [f"doc-{i}" for i in range(6)])
        assert sorted(found) == [f"doc-{i}" for i in range(6)]
        assert store.count("acme") == 6 * len(PARAGRAPHS)
    finally:
        qdrant.close()


def test_mass_deletion_is_refused_unless_forced(store, embedder, cache):
    documents = [make_document("acme", f"doc-{i}", "v1", PARAGRAPHS[:1]) for i in range(5)]
    sync_documents(store, embedder, cache, "acme", documents)
    all_ids = {f"doc-{i}" for i in range(5)}

    with pytest.raises(MassDeletionRefused, match=r"reconcile\.max_delete_share") as refused:
        delete_missing_documents(
            store, "acme", ["doc-0", "doc-1", "doc-2"], listing_complete=True, max_delete_share=0.2
        )
    assert "2 of 5" in str(refused.value) and refused.value.code is ErrorCode.UPSERT_FAILED
    assert store.document_ids("acme") == all_ids

    # An incomplete listing deletes nothing, whatever it lacks.
    incomplete = delete_missing_documents(
        store, "acme", [], listing_complete=False, max_delete_share=0
    )
    assert incomplete == []
    assert store.document_ids("acme") == all_ids

    # One of five (20%) is within the share; the rest only when forced.
    within = delete_missing_documents(
        store, "acme", sorted(all_ids - {"doc-4"}), listing_complete=True, max_delete_share=0.2
    )
    assert within == ["doc-4"]
    forced = delete_missing_documents(
        store, "acme", ["doc-0"], listing_complete=True, max_delete_share=0.2, force=True
    )
    assert forced == ["doc-1", "doc-2", "doc-3"]
    assert store.document_ids("acme") == {"doc-0"}


def test_missing_documents_are_scoped_to_their_source(store, embedder, cache):
    pages = make_document("acme", "page-1", "v1", PARAGRAPHS[:1], source_type="confluence")
    files = make_document("acme", "file-1", "v1", PARAGRAPHS[:1])
    sync_documents(store, embedder, cache, "acme", [pages, files])

    deleted = delete_missing_documents(
        store, "acme", [], listing_complete=True, max_delete_share=1.0, source_type="file"
    )
    assert deleted == ["file-1"]
    assert store.document_ids("acme") == {"page-1"}


class RecordingClient:
    """Forwards to the real client, recording payload-index requests."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.indexes: dict[str, Any] = {}

    def create_payload_index(self, collection_name, field_name, field_schema, **kw):
        self.indexes[field_name] = field_schema
        return self.inner.create_payload_index(collection_name, field_name, field_schema, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_collection_has_named_vectors_and_payload_indexes(tmp_path, tiny_embedder):
    settings = qdrant_settings(tmp_path)
    store = QdrantStore(QdrantConnection(settings), schema(tiny_embedder.vector_size, True))
    recording = RecordingClient(store.client)
    store.client = recording
    try:
        physical = store.ensure_collection()
        info = recording.inner.get_collection(physical)
        assert info.config.params.vectors["dense"].size == tiny_embedder.vector_size
        assert info.config.params.vectors["dense"].distance.value == "Cosine"
        assert info.config.params.sparse_vectors["sparse"].modifier is None
        assert recording.indexes == PAYLOAD_INDEXES
        assert recording.indexes["tenant_id"].is_tenant is True
        # search's expansion: a section lookup, and an ordinal range within a document
        assert recording.indexes["section_id"].type == "keyword"
        # looked up, never searched by: no HNSW links of their own to build
        assert recording.indexes["section_id"].enable_hnsw is False
        assert recording.indexes["ordinal"].type == "integer"
        assert recording.indexes["ordinal"].range is True
        if store.client.payload_indexes:  # Edge and a server report indexes; local mode keeps none
            indexed = store.payload_schema()
            assert set(PAYLOAD_INDEXES) <= set(indexed)
            assert indexed["updated_at"] == "datetime"
            assert indexed["ordinal"] == "integer"
            # A collection made before an index was declared gets it when next opened.
            store.client.delete_payload_index(physical, "section_id", wait=True)
            assert "section_id" not in store.payload_schema()
            store.ensure_collection()
            assert "section_id" in store.payload_schema()
    finally:
        if settings.url:
            store.drop_collection(store.resolve() or "")
        store.connection.close()


def test_existing_collection_with_another_vector_size_is_refused(store_factory, tiny_embedder):
    store = store_factory(tiny_embedder.vector_size, sparse=True)
    other = QdrantStore(store.connection, schema(tiny_embedder.vector_size * 2, True))
    with pytest.raises(ConfigError, match=r"size 64 \(it has 32\): run `ingest reindex`"):
        other.ensure_collection()


def test_stores_of_one_connection_share_its_client(store_factory):
    first = store_factory(8, sparse=False)
    second = QdrantStore(first.connection, schema(8, False))
    assert second.client is first.client


def test_unreachable_server_is_a_transient_upsert_failure(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = qdrant_settings(tmp_path, url=f"http://127.0.0.1:{port}", timeout_s=2)
    before = set(threading.enumerate())
    # The failure is the report: no qdrant-client warning (its version probe, in a thread
    # of its own) beside it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = QdrantStore(QdrantConnection(settings), schema(8, False))
        try:
            with pytest.raises(IngestError) as failure:
                store.ensure_collection()
        finally:
            store.connection.close()
        for thread in set(threading.enumerate()) - before:
            thread.join(timeout=10)
    assert failure.value.code is ErrorCode.UPSERT_FAILED and failure.value.transient
    assert not [str(w.message) for w in caught], [str(w.message) for w in caught]


def test_point_lookups_agree_with_a_fresh_read_after_every_kind_of_write(store, embedder, cache):
    """Local mode answers point lookups from a map kept beside the collection; after
    upserts, deletes by id and deletes by filter it must equal what a reopened client
    reads from disk (on a server both sides are plain reads)."""
    ids = ["doc-0", "doc-1", "doc-2"]
    sync_documents(store, embedder, cache, "acme", docs("acme", count=3))
    sync_documents(store, embedder, cache, "globex", docs("globex", count=1))
    store.existing_points("acme", ids)  # the map is loaded from here on
    sync_documents(
        store, embedder, cache, "acme", [make_document("acme", "doc-0", "v2", PARAGRAPHS[:2])]
    )
    store.delete_documents("acme", ["doc-1"])
    sync_documents(store, embedder, cache, "acme", [make_document("acme", "doc-1", "v3", ["x"])])
    store.delete_documents("acme", ["doc-2"])
    before = {tenant: store.existing_points(tenant, ids) for tenant in ("acme", "globex")}
    assert {doc: set(p.values()) for doc, p in before["acme"].items()} == {
        "doc-0": {"v2"},
        "doc-1": {"v3"},
    }

    store.connection.close()
    with QdrantConnection(store.settings) as qdrant:
        reopened = QdrantStore(qdrant, store.schema)
        after = {tenant: reopened.existing_points(tenant, ids) for tenant in ("acme", "globex")}
        assert after == before
        assert reopened.document_ids("acme") == {"doc-0", "doc-1"}
