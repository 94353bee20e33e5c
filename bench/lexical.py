"""Cost of the lexical (BM25) vector (run by hand): `.venv/bin/python -m bench.lexical`.

1. Encoding speed: `LexicalEncoder.encode` over the embed_texts of the retrieval corpus
   chunked at the default budgets (bench/retrieval.py's corpus), in MB of embed_text per
   CPU-second, and the mean terms per embed_text (what `lexical.avg_len` is set from).
2. Share of a first run: the quickstart (`ingest run files samples/docs --config
   samples/quickstart.yaml`, in a fresh directory) run as a child process, its CPU time
   (user + system, Prefect's ephemeral API included) against the CPU time of encoding
   that run's chunks; and the same run with `lexical.enabled: false` for comparison
   (`--skip-run` leaves this part out).
3. Search latency in Qdrant local mode at 10,000 and 100,000 points (`--points`): the
   corpus's chunks repeated (each copy its own document) with random unit dense vectors
   and their real lexical weights; the first `--questions` questions of
   bench/retrieval_questions.py (default 40) asked densely and hybrid (dense + lexical,
   RRF), with the tenant filter inside each prefetch as `ingest search` sends it; p50 and
   p95 of `QdrantStore.query`.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from bench.retrieval import chunks_of, load_corpus
from bench.retrieval_questions import QUESTIONS
from chunking import Chunk
from config.settings import ChunkingSettings, LexicalSettings, QdrantSettings
from indexing.embedders import Embedding
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import (
    DENSE,
    LEXICAL,
    CollectionSchema,
    QdrantConnection,
    QdrantStore,
    SearchFilters,
)

ROOT = Path(__file__).resolve().parents[1]
DIM = 384  # all-MiniLM-L6-v2's size, the quickstart model


def encoding_speed(encoder: LexicalEncoder, texts: Sequence[str]) -> dict[str, Any]:
    started = time.process_time()
    for text in texts:
        encoder.encode(text)
    seconds = time.process_time() - started
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6
    return {
        "texts": len(texts),
        "MB": round(megabytes, 2),
        "MB_per_cpu_s": round(megabytes / seconds, 2),
        "ms_per_1000_texts": round(1000 * seconds / len(texts) * 1000, 1),
        "mean_terms": round(statistics.mean(len(encoder.terms(t)) for t in texts), 1),
    }


def first_run_share(encoder: LexicalEncoder) -> dict[str, Any]:
    """CPU of a first quickstart run with and without the lexical vector, and of encoding
    that run's chunks."""
    out: dict[str, Any] = {}
    for enabled in (True, False):
        with tempfile.TemporaryDirectory(prefix="bench-lexical-") as tmp:
            config = yaml.safe_load((ROOT / "samples" / "quickstart.yaml").read_text())
            config.setdefault("qdrant", {})["path"] = f"{tmp}/qdrant"
            config.setdefault("cache", {})["dir"] = f"{tmp}/cache"
            config["lexical"] = {"enabled": enabled}
            path = Path(tmp) / "config.yaml"
            path.write_text(yaml.safe_dump(config))
            env = {**os.environ, "PREFECT_HOME": f"{tmp}/prefect"}
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [sys.executable, "-m", "flows.cli", "run", "files", "samples/docs",
                 "--config", str(path), "--json"],
                cwd=ROOT, env=env, capture_output=True, check=False,
            )  # fmt: skip
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            out[f"run_cpu_s lexical={enabled}"] = round(cpu, 2)
            if enabled:
                texts = _indexed_texts(Path(tmp) / "qdrant", config)
                started = time.process_time()
                for text in texts:
                    encoder.encode(text)
                out["encode_cpu_s"] = round(time.process_time() - started, 3)
                out["chunks"] = len(texts)
    out["encode_share_of_run"] = round(out["encode_cpu_s"] / out["run_cpu_s lexical=True"], 4)
    return out


def _indexed_texts(path: Path, config: dict[str, Any]) -> list[str]:
    from indexing.reindex import chunk_of_payload

    settings = QdrantSettings(
        path=str(path), collection=config.get("qdrant", {}).get("collection", "chunks")
    )  # type: ignore[call-arg]
    with QdrantConnection(settings) as qdrant:
        store = QdrantStore(qdrant, CollectionSchema(0, False, True))
        return [
            chunk_of_payload(r.payload or {}).embed_text for page in store.pages(1000) for r in page
        ]


def latency(
    encoder: LexicalEncoder, chunks: Sequence[Chunk], points: int, questions: int, root: Path
) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    settings = QdrantSettings(path=str(root / f"q{points}"), collection="bench")  # type: ignore[call-arg]
    schema = CollectionSchema(DIM, sparse=False, lexical=True, lexical_id=encoder.id)
    with QdrantConnection(settings) as qdrant:
        store = QdrantStore(qdrant, schema)
        store.ensure_collection()
        weights = [encoder.encode(c.embed_text) for c in chunks]
        started = time.perf_counter()
        for start in range(0, points, 2000):
            batch = [
                dataclasses.replace(
                    chunks[i % len(chunks)],
                    chunk_id=hashlib.sha256(str(i).encode()).hexdigest(),
                    document_id=f"{chunks[i % len(chunks)].document_id}#{i // len(chunks)}",
                )
                for i in range(start, min(points, start + 2000))
            ]
            dense = rng.standard_normal((len(batch), DIM)).astype(np.float32)
            dense /= np.linalg.norm(dense, axis=1, keepdims=True)
            store.upsert(
                batch,
                [Embedding(dense=v.tolist()) for v in dense],
                [weights[i % len(chunks)] for i in range(start, start + len(batch))],
            )
        loaded = time.perf_counter() - started
        assert store.count() == points, "points collapsed: their ids must differ"
        filters = SearchFilters(tenant_id="default")
        timings: dict[str, list[float]] = {"dense": [], "hybrid": []}
        for question in QUESTIONS[:questions]:
            vector = rng.standard_normal(DIM).astype(np.float32)
            dense_query = (vector / np.linalg.norm(vector)).tolist()
            terms = encoder.encode_query(question.text)
            for mode, vectors in (
                ("dense", {DENSE: dense_query}),
                ("hybrid", {DENSE: dense_query, LEXICAL: terms} if terms else {DENSE: dense_query}),
            ):
                started = time.perf_counter()
                store.query(vectors, limit=10, filters=filters)
                timings[mode].append(time.perf_counter() - started)
    result: dict[str, Any] = {"points": points, "load_s": round(loaded, 1)}
    for mode, values in timings.items():
        ordered = sorted(values)
        result[f"{mode} p50 ms"] = round(1000 * ordered[len(ordered) // 2], 1)
        result[f"{mode} p95 ms"] = round(1000 * ordered[int(len(ordered) * 0.95)], 1)
    result["hybrid/dense p95"] = round(result["hybrid p95 ms"] / result["dense p95 ms"], 2)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default="10000,100000")
    parser.add_argument("--questions", type=int, default=40, help="queries per latency test")
    parser.add_argument("--skip-run", action="store_true", help="leave out the quickstart runs")
    args = parser.parse_args()
    encoder = LexicalEncoder(LexicalSettings())  # type: ignore[call-arg]
    chunks = chunks_of(load_corpus(), ChunkingSettings())  # type: ignore[call-arg]
    print("encoding:", encoding_speed(encoder, [c.embed_text for c in chunks]), flush=True)
    if not args.skip_run:
        print("first quickstart run:", first_run_share(encoder), flush=True)
    root = Path(tempfile.mkdtemp(prefix="bench-lexical-latency-"))
    try:
        for points in (int(p) for p in args.points.split(",")):
            result = latency(encoder, chunks, points, args.questions, root)
            print("local-mode search:", result, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
