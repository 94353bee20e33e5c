"""Re-indexing without downtime (docs/qdrant.md#re-indexing) on Qdrant local mode: a collection made
without the `lexical` vector is rebuilt from the stage cache and its own points, checked,
and the alias moved in one step; killed (SIGKILL) mid-way, the alias still names the old,
complete collection and a re-run finishes the build. The model swap through the flow is
in tests/test_flow.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from config.settings import QdrantSettings, load_settings
from indexing.embedders import BgeM3Embedder
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.reconcile import sync_documents
from indexing.reindex import build_name, drop_retired, reindex
from indexing.search import search
from indexing.store_schema import LEXICAL
from stage_cache.store import StageCache
from tasks.state import chunking_fingerprint
from testkit.index_helpers import (
    ENCODER,
    CountingEmbedder,
    make_document,
    qdrant_settings,
    schema_of,
)
from testkit.tiny_model import tiny_embedder, tiny_model_dir

__all__ = ["tiny_embedder", "tiny_model_dir"]  # fixtures used below

ROOT = Path(__file__).resolve().parent.parent
WORDS = (
    "backup",
    "restore",
    "queue",
    "worker",
    "ledger",
    "printer",
    "badge",
    "cluster",
    "invoice",
    "laptop",
)


def documents(tenant: str, count: int) -> list[Any]:
    return [
        make_document(
            tenant,
            f"doc-{i}",
            "v1",
            [f"{WORDS[i % 10]} {WORDS[(i * 3) % 10]} note {i} of {tenant}", f"part two {i}"],
            extra={"acl": {"public": True}, "links_in": i % 3},
        )
        for i in range(count)
    ]


def dense_collection(
    settings: QdrantSettings, embedder: BgeM3Embedder, cache: StageCache, count: int
) -> None:
    """The collection an earlier version made: dense + sparse, no lexical vector."""
    with QdrantConnection(settings) as qdrant:
        old = QdrantStore(qdrant, schema_of(embedder, lexical=False))
        old.ensure_collection()
        for tenant in ("acme", "globex"):
            sync_documents(old, embedder, cache, tenant, documents(tenant, count))


def everything(store: QdrantStore, name: str) -> dict[str, dict[str, Any]]:
    records, _ = store.client.scroll(name, limit=10_000, with_payload=True, with_vectors=True)
    return {str(r.id): {"payload": r.payload, "vector": r.vector} for r in records}


@pytest.fixture
def cache(tmp_path: Path) -> StageCache:
    return StageCache(tmp_path / "cache", fsync=False)


def test_reindex_adds_the_lexical_vector_and_moves_the_alias_once(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    settings = qdrant_settings(tmp_path)
    dense_collection(settings, tiny_embedder, cache, count=12)
    embedder = CountingEmbedder(tiny_embedder)
    with QdrantConnection(settings) as qdrant:
        live = QdrantStore(qdrant, schema_of(tiny_embedder, lexical=True))
        old = live.resolve() or ""
        before = everything(live, old)
        moved: list[Any] = []
        real = live.client.update_collection_aliases

        def move(operations: Any, **kwargs: Any) -> Any:
            moved.append(operations)
            return real(operations, **kwargs)

        live.client.update_collection_aliases = move  # type: ignore[method-assign,assignment]
        progress: list[tuple[int, int]] = []
        result = reindex(
            live, embedder, ENCODER, cache, page_size=10,
            progress=lambda done, total: progress.append((done, total)),
        )  # fmt: skip

        assert result.moved and len(moved) == 1
        assert (result.source, result.target) == (old, build_name(live.alias, live.schema))
        assert live.resolve() == result.target and result.points == len(before) == 48
        assert progress[-1] == (48, 48) and len(progress) == 5
        # Dense vectors came from the embedding cache: nothing was embedded again.
        assert embedder.texts == [] and result.embedded == 0
        # each distinct text encoded once ("part two N" is in both tenants)
        texts = {
            c.embed_text for t in ("acme", "globex") for d in documents(t, 12) for c in d.chunks
        }
        assert result.lexical_encoded == len(texts) == 36
        after = everything(live, result.target)
        assert {k: v["payload"] for k, v in after.items()} == {
            k: v["payload"] for k, v in before.items()
        }
        for point, held in after.items():
            assert held["vector"]["dense"] == pytest.approx(before[point]["vector"]["dense"])
            assert held["vector"][LEXICAL].indices  # every text here has terms
        # The old collection is kept, complete, recorded as retired.
        assert len(everything(live, old)) == 48
        assert live.recorded(old)["state"] == "retired"
        assert live.recorded(result.target) == {
            "model_id": tiny_embedder.model_id,
            "lexical_id": ENCODER.id,
            "state": "live",
            "source": old,
        }
        hits = search(live, tiny_embedder, "ledger", limit=3, mode="lexical", lexical=ENCODER)
        assert hits and all("ledger" in h.md_text for h in hits)
        # Run again: the collection already holds what the settings make.
        again = reindex(live, embedder, ENCODER, cache)
        assert not again.moved and again.target == result.target and len(moved) == 1
        # Retired collections go once their days are up, never the live one.
        assert drop_retired(live, keep_old_days=7) == ()
        assert drop_retired(live, keep_old_days=0) == (old,)
        assert live.collections() == [result.target]


def test_reindex_drop_old_and_a_name_of_ones_own(
    tmp_path: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    settings = qdrant_settings(tmp_path)
    dense_collection(settings, tiny_embedder, cache, count=3)
    with QdrantConnection(settings) as qdrant:
        live = QdrantStore(qdrant, schema_of(tiny_embedder, lexical=True))
        old = live.resolve()
        result = reindex(live, tiny_embedder, ENCODER, cache, target="hybrid_v2", drop_old=True)
        assert result.target == "hybrid_v2" and result.dropped == (old,)
        assert live.collections() == ["hybrid_v2"] and live.resolve() == "hybrid_v2"


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from config.settings import load_settings
    from indexing.reindex import reindex
    from stage_cache.store import StageCache
    from tasks.resources import Resources

    settings = load_settings(config_file=sys.argv[1])
    resources = Resources(settings)
    embedder = resources.embedder()

    def progress(done, total):
        if done >= 20:  # two pages of ten written: die as a power cut would
            os.kill(os.getpid(), signal.SIGKILL)

    reindex(
        resources.store(embedder, check=False), embedder, resources.lexical(),
        StageCache(settings.cache.dir), page_size=10, progress=progress,
        parts=resources.parts(),
    )
    """
)


def test_reindex_killed_mid_way_keeps_the_old_collection_and_a_rerun_finishes(
    tmp_path: Path, tiny_model_dir: Path, tiny_embedder: BgeM3Embedder, cache: StageCache
) -> None:
    settings = qdrant_settings(tmp_path)
    dense_collection(settings, tiny_embedder, cache, count=20)
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "qdrant": {"path": settings.path, "collection": settings.collection},
                "cache": {"dir": str(cache.root), "fsync": False},
                "embedder": {"model": str(tiny_model_dir), "device": "cpu"},
                "parts": {"enabled": False},  # the schema schema_of makes
            }
        )
    )
    # made with the settings' chunking (a collection that records none is re-chunked)
    chunking = chunking_fingerprint(load_settings(config_file=config, environ={}))
    with QdrantConnection(settings) as qdrant:
        made = QdrantStore(qdrant, schema_of(tiny_embedder))
        made.record(made.resolve() or "", chunking_id=chunking)
    killed = subprocess.run(
        [sys.executable, "-c", KILLER, str(config)], cwd=ROOT, capture_output=True, text=True
    )
    assert killed.returncode == -9, killed.stderr

    # the schema the killed process made (its settings' chunking recorded too)
    with QdrantConnection(settings) as qdrant:
        live = QdrantStore(
            qdrant, replace(schema_of(tiny_embedder, lexical=True), chunking_id=chunking)
        )
        old = live.resolve() or ""
        build = build_name(live.alias, live.schema)
        assert old != build and old.endswith("_initial")  # the alias did not move
        assert len(everything(live, old)) == 80  # and the old collection is whole
        assert live.recorded(build)["state"] == "building"
        assert 0 < len(everything(live, build)) < 80

        result = reindex(live, tiny_embedder, ENCODER, cache, page_size=10)
        assert result.moved and result.target == build and live.resolve() == build
        assert result.points == 80 and result.written < 80  # the written pages were kept
        assert set(everything(live, build)) == set(everything(live, old))
