"""Index-layer throughput (run by hand): `.venv/bin/python -m bench.embed_upsert`.

1. upsert: N chunks (default 100,000) with precomputed random unit vectors (1024-d, as
   BGE-M3) into the embedded default store, Qdrant Edge: points/s.
2. embed cache: writing M 1024-d embeddings with and without fsync, then the hit path
   (`embed_with_cache` over them, all hits).
3. unchanged re-run of M chunks (default 10,000) as the flow does it: per document the
   chunk-stage cache entry (JSON chunk records), then `sync_documents` per batch of 100
   documents, which finds every point present and embeds/upserts nothing.
4. tiny-model embedding throughput on this CPU: chunks/s at 300 tokens per batch size.
5. embedder memory: peak RSS of a process embedding one very long text and 2,000 short
   ones, per `embedder.tokens_per_batch` (the largest padded batch is reported too).

Everything lives in a temporary directory that is removed at the end.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunking.record import Chunk
from config.settings import EmbedderSettings, QdrantSettings
from indexing.embed_cache import embed_key, embed_with_cache, encode_embedding
from indexing.embedders import BgeM3Embedder, Embedding
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.reconcile import DocumentChunks, sync_documents
from indexing.store_schema import CollectionSchema
from stage_cache.keys import stage_key
from stage_cache.store import StageCache
from testkit.index_helpers import make_chunk

ROOT = Path(__file__).resolve().parents[1]

DIM = 1024
CHUNKS_PER_DOCUMENT = 20
DOCUMENTS_PER_BATCH = 100
WORDS = [
    "backup",
    "restore",
    "vault",
    "key",
    "rotation",
    "audit",
    "quarter",
    "service",
    "desk",
    "ticket",
    "portal",
]


def random_unit_vectors(count: int, seed: int = 7) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIM), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def make_documents(tenant: str, chunks: int) -> list[DocumentChunks]:
    rng = random.Random(11)
    documents = []
    for d in range(chunks // CHUNKS_PER_DOCUMENT):
        texts = [
            f"Section {i} of document {d}: " + " ".join(rng.choices(WORDS, k=40))
            for i in range(CHUNKS_PER_DOCUMENT)
        ]
        chunk_list = [make_chunk(tenant, f"doc-{d}", "v1", i, t) for i, t in enumerate(texts)]
        documents.append(DocumentChunks(f"doc-{d}", "v1", chunk_list))
    return documents


class PrecomputedEmbedder:
    """Hands out precomputed vectors (the benchmark measures the store, not a model)."""

    model_id = "precomputed-random-1024"
    has_sparse = False
    vector_size = DIM

    def __init__(self, vectors: np.ndarray) -> None:
        self.vectors = vectors
        self.next = 0
        self.embedded = 0

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        rows = self.vectors[self.next : self.next + len(texts)]
        self.next += len(texts)
        self.embedded += len(texts)
        return [Embedding(dense=row.tolist()) for row in rows]


def bench_upsert(root: Path, points: int) -> dict[str, Any]:
    settings = QdrantSettings.model_validate({"path": str(root / "qdrant-upsert")})
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(DIM, False, False))
    store.ensure_collection()
    documents = make_documents("bench", points)
    chunks = [c for d in documents for c in d.chunks]
    vectors = random_unit_vectors(len(chunks))
    seconds = 0.0
    # Slices keep the Python float lists of only one slice in memory at a time.
    for start in range(0, len(chunks), 4096):
        rows = vectors[start : start + 4096]
        embeddings = [Embedding(dense=row.tolist()) for row in rows]
        started = time.perf_counter()
        store.upsert(chunks[start : start + 4096], embeddings)
        seconds += time.perf_counter() - started
    count = store.count()
    store.connection.close()
    return {"points": count, "seconds": round(seconds, 1), "points_per_s": round(count / seconds)}


def bench_cache_hits(root: Path, count: int) -> dict[str, Any]:
    embedder = PrecomputedEmbedder(random_unit_vectors(count, seed=3))
    texts = [f"chunk text number {i}" for i in range(count)]
    encoded = [encode_embedding(Embedding(dense=row.tolist())) for row in embedder.vectors]
    writes = {}
    for fsync in (False, True):
        cache = StageCache(root / f"cache-hits-{fsync}", fsync=fsync)
        started = time.perf_counter()
        for text, value in zip(texts, encoded, strict=True):
            cache.put(embed_key(embedder.model_id, text), value)
        writes[f"writes_per_s_fsync_{fsync}".lower()] = round(
            count / (time.perf_counter() - started)
        )
    started = time.perf_counter()
    result = embed_with_cache(embedder, texts, cache)
    seconds = time.perf_counter() - started
    assert result.hits == count and embedder.embedded == 0
    hits = {"hits": result.hits, "seconds": round(seconds, 2), "hits_per_s": round(count / seconds)}
    return {**hits, **writes}


def bench_unchanged_rerun(root: Path, chunks: int) -> dict[str, Any]:
    settings = QdrantSettings.model_validate({"path": str(root / "qdrant-rerun")})
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(DIM, False, False))
    store.ensure_collection()
    cache = StageCache(root / "cache-rerun")
    documents = make_documents("bench", chunks)
    embedder = PrecomputedEmbedder(random_unit_vectors(chunks, seed=5))

    def chunk_key(document_id: str) -> Any:
        return stage_key("chunk", "1", "bench-config", f"{document_id}@v1")

    # First run: chunk results cached per document, then embedded and upserted.
    for start in range(0, len(documents), DOCUMENTS_PER_BATCH):
        batch = documents[start : start + DOCUMENTS_PER_BATCH]
        for document in batch:
            cache.put_json(
                chunk_key(document.document_id), [c.to_record() for c in document.chunks]
            )
        sync_documents(store, embedder, cache, "bench", batch)
    embedded_first = embedder.embedded

    # Unchanged re-run, as a new process would do it: reopen the store (local mode loads
    # every point from disk), then cached chunk records -> nothing to embed, nothing to upsert.
    store.connection.close()
    started = time.perf_counter()
    store = QdrantStore(QdrantConnection(settings), CollectionSchema(DIM, False, False))
    store.ensure_collection()
    opened = time.perf_counter() - started
    started = time.perf_counter()
    upserted = embedded = 0
    for start in range(0, len(documents), DOCUMENTS_PER_BATCH):
        batch = []
        for document in documents[start : start + DOCUMENTS_PER_BATCH]:
            records = cache.get_json(chunk_key(document.document_id))
            assert records is not None, "the first run cached every document"
            restored = [Chunk.from_record(r) for r in records]
            batch.append(DocumentChunks(document.document_id, "v1", restored))
        result = sync_documents(store, embedder, cache, "bench", batch)
        upserted += result.points_upserted
        embedded += result.embedded
    seconds = time.perf_counter() - started
    store.connection.close()
    assert upserted == 0 and embedded == 0 and embedder.embedded == embedded_first
    return {
        "chunks": chunks,
        "documents": len(documents),
        "open_local_qdrant_s": round(opened, 2),
        "rerun_s": round(seconds, 2),
    }


def bench_tiny_model(root: Path, chunks: int, batch_sizes: Sequence[int]) -> list[dict[str, Any]]:
    from testkit.tiny_model import build_tiny_model

    model_dir = build_tiny_model(root / "tiny")
    rng = random.Random(5)
    words = [" ".join(rng.choices(WORDS, k=400)) for _ in range(chunks)]
    rows = []
    texts: list[str] = []
    for batch_size in batch_sizes:
        settings = EmbedderSettings.model_validate(
            {"model": str(model_dir), "device": "cpu", "batch_size": batch_size}
        )
        embedder = BgeM3Embedder(settings)
        if not texts:  # 300 tokens each, as the longest chunks of the default budgets
            texts = [_cut_to_tokens(embedder, f"{i} {w}", 300) for i, w in enumerate(words)]
        embedder.embed(texts[:batch_size])  # warm-up
        started = time.perf_counter()
        embedder.embed(texts)
        seconds = time.perf_counter() - started
        rows.append(
            {"batch_size": batch_size, "tokens": 300, "chunks_per_s": round(chunks / seconds, 1)}
        )
    return rows


def _cut_to_tokens(embedder: BgeM3Embedder, text: str, tokens: int) -> str:
    words = text.split()
    while len(embedder.token_ids(" ".join(words))) > tokens:
        words.pop()
    return " ".join(words)


def bench_memory(root: Path, long_tokens: int, budgets: Sequence[int]) -> list[dict[str, Any]]:
    """Peak RSS of a fresh process embedding one very long text (`long_tokens`) and 2,000
    short ones with the tiny model, per `embedder.tokens_per_batch`: the largest padded
    batch follows the budget, and so does memory."""
    import json
    import subprocess
    import sys

    from testkit.tiny_model import build_tiny_model

    model_dir = build_tiny_model(root / "tiny-memory")
    rows = []
    for budget in budgets:
        code = f"""
import json
from bench.measure import peak_rss_mib
from config.settings import EmbedderSettings
from indexing.embedders import BgeM3Embedder
embedder = BgeM3Embedder(EmbedderSettings(model={str(model_dir)!r}, device="cpu", tokens_per_batch={budget}))
texts = ["backup " * {long_tokens}] + [f"short text number {{i}} about restores" for i in range(2000)]
embeddings = embedder.embed(texts)
print(json.dumps({{"tokens_per_batch": {budget}, "window": embedder.window,
    "largest_batch_tokens": embedder.largest_batch_tokens, "long_text_windows": embeddings[0].windows,
    "peak_rss_mb": round(peak_rss_mib())}}))
"""
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--rerun-chunks", type=int, default=10_000)
    parser.add_argument("--cache-hits", type=int, default=10_000)
    parser.add_argument("--embed-chunks", type=int, default=512)
    parser.add_argument("--batch-sizes", default="8,16,32,64,128")
    parser.add_argument("--memory-long-tokens", type=int, default=50_000)
    parser.add_argument("--memory-budgets", default="2048,16384,262144")
    parser.add_argument("--skip", default="", help="comma list of: upsert,cache,rerun,embed,memory")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    with tempfile.TemporaryDirectory(prefix="bench-embed-upsert-") as tmp:
        root = Path(tmp)
        if "upsert" not in skip:
            print("upsert (embedded store, 1024-d):", bench_upsert(root, args.points), flush=True)
        if "cache" not in skip:
            print("embed cache hit path:", bench_cache_hits(root, args.cache_hits), flush=True)
        if "rerun" not in skip:
            print("unchanged re-run:", bench_unchanged_rerun(root, args.rerun_chunks), flush=True)
        if "embed" not in skip:
            sizes = [int(s) for s in args.batch_sizes.split(",")]
            for row in bench_tiny_model(root, args.embed_chunks, sizes):
                print("tiny model (CPU):", row, flush=True)
        if "memory" not in skip:
            budgets = [int(s) for s in args.memory_budgets.split(",")]
            for row in bench_memory(root, args.memory_long_tokens, budgets):
                print("embedder memory (tiny model):", row, flush=True)


if __name__ == "__main__":
    main()
