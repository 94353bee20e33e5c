"""Qdrant Edge, the embedded store (indexing/edge.py): the pinned version, what the store
leans on Edge for (sparse indices, the alias file, one process at a time, the HNSW build
at a run's end) and the move of a qdrant-client local-mode store into Edge by
`ingest reindex`. The store's behaviour on every engine is in test_qdrant_store.py and
the other store tests, which run on Edge and on local mode."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from qdrant_client import models

from config.errors import ConfigError, ErrorCode, IngestError
from flows.cli import main
from indexing.edge import EdgeClient, edge_root
from indexing.embedders import BgeM3Embedder
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.reconcile import sync_documents
from indexing.reindex import reindex
from indexing.search import search
from indexing.store_lock import read_holder
from indexing.store_schema import CollectionSchema
from stage_cache.store import StageCache
from testkit.index_helpers import CountingEmbedder, make_document, qdrant_settings, schema_of
from testkit.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["tiny_embedder", "tiny_model_dir"]  # fixtures used below

ROOT = Path(__file__).resolve().parent.parent


def test_pyproject_pins_the_installed_edge_exactly() -> None:
    """0.x is beta: the binding's behaviour (e.g. how it reads a Python bool) may change
    in any release, so the pin is exact and is the version installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [d for d in project["project"]["dependencies"] if d.startswith("qdrant-edge-py")]
    assert len(pins) == 1 and re.fullmatch(r"qdrant-edge-py==\d+\.\d+\.\d+", pins[0]), pins
    assert pins[0].split("==")[1] == version("qdrant-edge-py")


def documents(tenant: str, count: int) -> list[Any]:
    return [
        make_document(
            tenant,
            f"doc-{i}",
            "v1",
            [f"ledger {i} of {tenant} archived {i % 2 == 0}", f"part two {i}"],
            extra={"acl": {"public": i % 2 == 0}, "archived": i % 3 == 0},
        )
        for i in range(count)
    ]


def edge_store(directory: Path, vector_size: int = 4, **overrides: Any) -> QdrantStore:
    """A store on Edge in `directory`, whatever QDRANT_URL says."""
    settings = qdrant_settings(
        directory, engine="edge", url=None, path=str(directory / "qdrant"), **overrides
    )
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(vector_size, False, False))
    store.ensure_collection()
    return store


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache", fsync=False)


def test_sparse_vectors_are_written_sorted_and_a_repeated_index_is_refused(
    tmp_path: Path,
) -> None:
    client = EdgeClient(tmp_path, index_after_vectors=20_000)
    client.create_collection(
        "c",
        vectors_config={"dense": models.VectorParams(size=2, distance=models.Distance.COSINE)},
        sparse_vectors_config={"lexical": models.SparseVectorParams()},
    )

    def point(indices: list[int]) -> models.PointStruct:
        sparse = models.SparseVector(indices=indices, values=[1.0] * len(indices))
        return models.PointStruct(
            id="00000000-0000-0000-0000-000000000001",
            vector={"dense": [1.0, 0.0], "lexical": sparse},
            payload={},
        )

    with pytest.raises(ValueError, match="repeats an index"):
        client.upsert("c", [point([7, 3, 7])])
    assert client.count("c").count == 0
    client.upsert("c", [point([9, 2, 5])])
    (record,) = client.retrieve("c", ["00000000-0000-0000-0000-000000000001"], False, True)
    assert isinstance(record.vector, dict)
    lexical = record.vector["lexical"]
    assert isinstance(lexical, models.SparseVector) and lexical.indices == [2, 5, 9]
    client.close()


def test_filters_on_booleans_match_booleans(tmp_path: Path) -> None:
    """Edge 0.9's binding reads a Python bool in a match as an integer; the store's ACL
    and archived filters still select by the boolean payload."""
    store = edge_store(tmp_path)
    client = store.client
    assert isinstance(client, EdgeClient)
    points = [
        models.PointStruct(
            id=f"00000000-0000-0000-0000-00000000000{i}",
            vector={"dense": [1.0, float(i), 0.0, 0.0]},
            payload={"tenant_id": "t", "archived": i == 1},
        )
        for i in (1, 2)
    ]
    client.upsert(store.collection, points)
    for wanted in (True, False):
        selection = models.Filter(
            must=[models.FieldCondition(key="archived", match=models.MatchValue(value=wanted))]
        )
        found, _ = client.scroll(store.collection, scroll_filter=selection, with_payload=True)
        assert [r.payload["archived"] for r in found if r.payload] == [wanted]


def test_the_alias_file_is_replaced_whole_or_not_at_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = edge_store(tmp_path)
    first = store.resolve()
    aliases = edge_root(store.settings.path) / "aliases.json"
    assert json.loads(aliases.read_text()) == {store.alias: first}
    store.create_build("other", first or "")

    def crash(*_: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr("stage_cache.store.os.replace", crash)
    with pytest.raises(OSError):
        store.point_alias_at("other")
    monkeypatch.undo()
    assert json.loads(aliases.read_text()) == {store.alias: first}
    assert [p.name for p in aliases.parent.iterdir() if p.name.startswith(".tmp-")] == []
    store.point_alias_at("other")
    assert store.resolve() == "other"


def test_a_creation_cut_short_is_no_collection_and_is_made_again(tmp_path: Path) -> None:
    client = EdgeClient(tmp_path, index_after_vectors=20_000)
    (edge_root(tmp_path) / "half" / "segments").mkdir(parents=True)  # no record beside it
    assert not client.collection_exists("half") and client.get_collections().collections == []
    dense = models.VectorParams(size=2, distance=models.Distance.COSINE)
    client.create_collection("half", vectors_config={"dense": dense})
    assert client.collection_exists("half") and client.count("half").count == 0
    client.close()


def test_a_quantization_edge_does_not_keep_here_is_refused_with_its_name(tmp_path: Path) -> None:
    client = EdgeClient(tmp_path, index_after_vectors=20_000)
    binary = models.BinaryQuantization(binary=models.BinaryQuantizationConfig())
    dense = models.VectorParams(size=2, distance=models.Distance.COSINE, quantization_config=binary)
    with pytest.raises(IngestError, match="scalar quantization only, not BinaryQuantization"):
        client.create_collection("c", vectors_config={"dense": dense})
    assert not client.collection_exists("c")
    client.close()


HOLDER = textwrap.dedent(
    """
    import sys
    from config.settings import QdrantSettings
    from indexing.store_schema import CollectionSchema
    from indexing.qdrant_store import QdrantConnection, QdrantStore

    settings = QdrantSettings(path=sys.argv[1], collection=sys.argv[2])
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(4, False, False))
    print(store.count(), flush=True)
    sys.stdin.read()  # hold the store until told to go
    """
)


def _holder(store: QdrantStore, script: str = HOLDER) -> subprocess.Popen[str]:
    """Another process that opens the store (its first line: the points it counts) and
    holds it until its stdin closes."""
    holder = subprocess.Popen(
        [sys.executable, "-c", script, store.settings.path, store.alias],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "0"
    return holder


def _let_go(holder: subprocess.Popen[str]) -> None:
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=30)


def test_a_second_process_is_told_who_holds_the_store_and_what_to_do(tmp_path: Path) -> None:
    store = edge_store(tmp_path, lock_wait_s=0)
    store.connection.close()  # let go, so that the other process can open it
    holder = _holder(store)
    try:
        started = time.monotonic()
        with pytest.raises(IngestError) as refused:
            QdrantStore(QdrantConnection(store.settings), store.schema).count()
        assert time.monotonic() - started < 1  # lock_wait_s 0: no waiting
        message = refused.value.message
        assert refused.value.code is ErrorCode.STORE_BUSY and "\n" not in message
        assert f"store at {Path(store.settings.path).resolve()} is held by" in message
        assert f"(pid {holder.pid}," in message and "qdrant.url" in message
        # the same when this process's closed client reopens the shard itself
        with pytest.raises(IngestError) as refused:
            store.count()
        assert refused.value.code is ErrorCode.STORE_BUSY
        assert f"(pid {holder.pid}," in refused.value.message
    finally:
        _let_go(holder)
    assert store.count() == 0  # free again once the other process is gone
    store.connection.close()
    assert read_holder(Path(store.settings.path)) is None  # no holder named once free


# A process that opens the shards without the lock file (as an older version did).
BARE_HOLDER = textwrap.dedent(
    """
    import sys
    from indexing.edge import EdgeClient

    client = EdgeClient(sys.argv[1], index_after_vectors=20_000)
    print(client.count(sys.argv[2]).count, flush=True)
    sys.stdin.read()
    """
)


def test_a_holder_without_the_lock_file_is_not_taken_for_this_process(tmp_path: Path) -> None:
    store = edge_store(tmp_path, lock_wait_s=0)
    store.connection.close()
    holder = _holder(store, BARE_HOLDER)
    try:
        with pytest.raises(IngestError) as refused:
            QdrantStore(QdrantConnection(store.settings), store.schema).count()
        assert refused.value.code is ErrorCode.STORE_BUSY
        assert "is held by another process" in refused.value.message
        assert f"pid {os.getpid()}" not in refused.value.message
    finally:
        _let_go(holder)


def test_a_store_held_for_a_while_is_waited_for(tmp_path: Path) -> None:
    """`qdrant.lock_wait_s`: the opening waits while the other process holds the store
    and goes on as soon as it lets go."""
    store = edge_store(tmp_path, lock_wait_s=30)
    store.connection.close()
    holder = _holder(store)
    threading.Timer(1.0, _let_go, (holder,)).start()
    started = time.monotonic()
    waiting = QdrantStore(QdrantConnection(store.settings), store.schema)
    assert waiting.count() == 0
    assert 1.0 <= time.monotonic() - started < 20
    holder_now = read_holder(Path(store.settings.path))
    assert holder_now is not None and holder_now.pid == os.getpid()
    waiting.connection.close()


def test_optimize_builds_the_index_past_the_threshold_only(tmp_path: Path) -> None:
    def filled(threshold: int) -> QdrantStore:
        store: QdrantStore = edge_store(tmp_path / str(threshold), 8, optimize_threshold=threshold)
        points = [
            models.PointStruct(
                id=f"00000000-0000-0000-0000-{i:012d}",
                vector={"dense": [float((i * k) % 7) + 1.0 for k in range(8)]},
                payload={"tenant_id": "t"},
            )
            for i in range(300)
        ]
        store.client.upsert(store.collection, points)
        return store

    below = filled(threshold=1_000)
    assert below.optimize() is None
    past = filled(threshold=100)
    seconds = past.optimize()
    assert seconds is not None and seconds >= 0
    info = past.client.get_collection(past.collection)
    assert info.indexed_vectors_count == 300
    assert past.optimize() is None  # nothing left to do


@pytest.mark.parametrize(("quantization", "quantized"), [("int8", "int8"), ("none", None)])
def test_the_build_links_each_chunks_vector_over_its_quantized_copies_and_not_its_parts(
    tmp_path: Path, quantization: str, quantized: str | None
) -> None:
    settings = qdrant_settings(
        tmp_path,
        engine="edge",
        url=None,
        path=str(tmp_path / "q"),
        optimize_threshold=100,
        quantization=quantization,
    )
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(4, False, False, parts=True))
    store.ensure_collection()
    points = [
        models.PointStruct(
            id=f"00000000-0000-0000-0000-{i:012d}",
            vector={
                "dense": [float((i * k) % 7) + 1.0 for k in range(4)],
                "dense_parts": [[float((i + j * k) % 5) + 1.0 for k in range(4)] for j in range(3)],
            },
            payload={"tenant_id": "t"},
        )
        for i in range(300)
    ]
    store.client.upsert(store.collection, points)
    assert store.optimize() is not None
    built = {
        path.parent.name: json.loads(path.read_text())["m"]
        for path in edge_root(settings.path).glob("*/segments/*/vector_index-*/hnsw_config.json")
    }
    # Edge's own record of each graph it built: 16 links a vector, none for the parts.
    assert built == {"vector_index-dense": 16, "vector_index-dense_parts": 0}
    # Edge's record of the copies it made: the chunk vector's as asked, never the parts'.
    copies = {
        path.parent.name: json.loads(path.read_text())["quantization_config"]["scalar"]["type"]
        for path in edge_root(settings.path).glob(
            "*/segments/*/vector_storage-*/quantized.config.json"
        )
    }
    assert copies == ({"vector_storage-dense": quantized} if quantized else {})
    store.connection.close()


@pytest.mark.slow
def test_local_mode_store_is_refused_by_a_run_and_moved_by_reindex(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    local = qdrant_settings(tmp_path, engine="local", url=None, path=str(tmp_path / "qdrant"))
    with QdrantConnection(local) as qdrant:
        old = QdrantStore(qdrant, schema_of(tiny_embedder))
        old.ensure_collection()
        for tenant in ("acme", "globex"):
            sync_documents(old, tiny_embedder, cache, tenant, documents(tenant, 6))
        source = old.resolve()
        records, _ = old.client.scroll(
            source or "", limit=1000, with_payload=True, with_vectors=True
        )
        before = {str(r.id): r for r in records}
    assert len(before) == 24

    edge = local.model_copy(update={"engine": "edge"})
    with QdrantConnection(edge) as qdrant:
        run = QdrantStore(qdrant, schema_of(tiny_embedder))
        with pytest.raises(ConfigError, match="ingest reindex") as refused:
            run.ensure_collection()
        assert refused.value.subject == "qdrant.engine"
        assert run.collections() == []  # nothing made beside the old store

        embedder = CountingEmbedder(tiny_embedder)
        result = reindex(run, embedder, None, cache)
        assert result.moved and result.source == source and result.points == 24
        assert embedder.texts == []  # the same model: vectors copied, nothing embedded
        assert run.resolve() == result.target and run.count() == 24
        records, _ = run.client.scroll(
            run.collection, limit=1000, with_payload=True, with_vectors=True
        )
        after = {str(r.id): r for r in records}
        assert after.keys() == before.keys()
        for point, record in after.items():
            old_vector = before[point].vector
            assert record.payload == before[point].payload
            assert isinstance(record.vector, dict) and isinstance(old_vector, dict)
            assert record.vector["dense"] == pytest.approx(old_vector["dense"])
        hits = search(run, tiny_embedder, "ledger 3 of globex", limit=3)
        assert hits and hits[0].document_id == "doc-3"
        run.ensure_collection()  # Edge has its collection now: runs go on

    with QdrantConnection(local) as qdrant:  # the old store is kept, recorded retired
        kept = QdrantStore(qdrant, schema_of(tiny_embedder))
        assert kept.count() == 24 and kept.recorded(source or "")["state"] == "retired"


def test_the_cli_points_a_search_to_reindex_which_moves_the_store(
    tmp_path: Path,
    tiny_model_dir: Path,
    tiny_embedder: BgeM3Embedder,
    cache: StageCache,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """What a user of an earlier version sees: `ingest search` on the new default names
    `ingest reindex`, which moves the store and says where the old files stay; then
    search finds what was indexed."""
    path = tmp_path / "qdrant"
    local = qdrant_settings(tmp_path, engine="local", url=None, path=str(path), collection="chunks")
    with QdrantConnection(local) as qdrant:
        old = QdrantStore(qdrant, schema_of(tiny_embedder))
        old.ensure_collection()
        sync_documents(old, tiny_embedder, cache, "default", documents("default", 4))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "qdrant": {"path": str(path)},
                "cache": {"dir": str(cache.root), "fsync": False},
                "embedder": {"model": str(tiny_model_dir), "device": "cpu"},
            }
        )
    )
    assert main(["search", "ledger 2", "--config", str(config)]) == 2
    assert "ingest reindex" in capsys.readouterr().err

    assert main(["reindex", "--config", str(config)]) == 0
    said = capsys.readouterr().out
    assert "8 points" in said and f"kept in local mode's files under {path}" in said

    assert main(["search", "ledger 2 of default", "--config", str(config)]) == 0
    assert "ledger 2 of default" in capsys.readouterr().out.replace("**", "")  # words marked
