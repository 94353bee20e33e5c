"""Search latency of the embedded stores, Qdrant Edge against qdrant-client's local mode
(run by hand):

    .venv/bin/python -m bench.store_engines [--engines edge,local]
        [--points 10000,100000] [--local-points 10000,20000] [--questions 40]

The collection is the product's default schema: `dense` (384-d), `dense_parts` (each
point 2-4 part vectors, MaxSim) and `lexical` (contextual BM25, IDF from Qdrant). Its
points are the retrieval corpus's chunks (bench/retrieval.py) repeated, each copy its own
document with an `acl` payload (a third public, the rest restricted or not, read by one
of 7 users and 5 groups), random unit dense and part vectors and the chunks' real lexical
weights. The first `--questions` questions of bench/retrieval_questions.py are asked as
`ingest search` asks them, with the tenant filter and the ACL filter of a user in a group
(`SearchFilters(tenant_id, user, groups)`) inside every prefetch: `dense` (dense and
dense_parts fused by RRF) and `hybrid` (that fusion, then RRF with lexical).

Each engine and point count runs in a child process of its own, so its peak RSS is its
own. Printed per run, then as a Markdown table: load seconds (the upserts), dense and
hybrid p50/p95 ms and hybrid p95 / dense p95; on Edge the same after `store.optimize()`
(the HNSW build a run makes at its end past `qdrant.optimize_threshold`; "-" where it had
nothing to do), its seconds, and each mode's recall@10 after it: the share of each
question's ten results before the build (every segment scanned, exact) still found by the
graphs; reopen seconds (connection closed, opened again, the
collection checked and a first hybrid query answered); the child's RSS once its data was
loaded (before any store) and its peak RSS.

Local mode scans every point for each query in Python (seconds a query at 10,000 points,
growing with the count), so `--local-points` (default: `--points`) keeps it to the sizes
it finishes in reasonable time; on Edge at 100,000 points the HNSW build takes minutes. `bench.lexical` runs the same
measurement as its latency part.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.measure import peak_rss_mib, rss_mib

DIM = 384  # all-MiniLM-L6-v2's size, the quickstart model
USERS = 7
GROUPS = 5
FILTERS_USER = "user0"
FILTERS_GROUPS = ("group1",)
ROOT = Path(__file__).resolve().parents[1]


def _acl(copy: int) -> dict[str, Any]:
    """A document's `acl` payload: a third public; the rest restricted every other copy."""
    return {
        "public": copy % 3 == 0,
        "users": [f"user{copy % USERS}"],
        "groups": [f"group{copy % GROUPS}"],
        "restricted": copy % 2 == 0,
    }


def _visible(acl: dict[str, Any]) -> bool:
    """Whether the filters' user passes `acl` (what the ACL filter decides in the store)."""
    readers = FILTERS_USER in acl["users"] or set(FILTERS_GROUPS) & set(acl["groups"])
    return bool(acl["public"] or not acl["restricted"] or readers)


def _unit(rng: np.random.Generator, rows: int) -> np.ndarray[Any, Any]:
    vectors: np.ndarray[Any, Any] = rng.standard_normal((rows, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def _percentiles(seconds: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(seconds)
    return (
        round(1000 * ordered[len(ordered) // 2], 1),
        round(1000 * ordered[int(len(ordered) * 0.95)], 1),
    )


def measure(engine: str, points: int, data: Path, root: Path) -> dict[str, Any]:
    """One engine at one size, in this process (a child of `compare`)."""
    from chunking import Chunk
    from config.settings import QdrantSettings
    from indexing.qdrant_store import QdrantConnection, QdrantStore, SearchFilters
    from indexing.search import find_points
    from indexing.store_schema import DENSE, DENSE_PARTS, LEXICAL, CollectionSchema

    loaded: dict[str, Any] = pickle.loads(data.read_bytes())
    chunks: list[Chunk] = [Chunk.from_record(r) for r in loaded["records"]]
    weights: list[dict[int, float]] = loaded["weights"]
    questions: list[dict[int, float]] = loaded["questions"]
    result: dict[str, Any] = {"engine": engine, "points": points, "rss_data_mib": round(rss_mib())}
    rng = np.random.default_rng(7)
    settings = QdrantSettings.model_validate(
        {"path": str(root / f"{engine}-{points}"), "collection": "bench", "engine": engine}
    )
    schema = CollectionSchema(
        DIM, sparse=False, lexical=True, lexical_id=loaded["lexical_id"], parts=True
    )
    filters = SearchFilters(tenant_id="default", user=FILTERS_USER, groups=FILTERS_GROUPS)
    dense_queries = _unit(rng, len(questions)).tolist()

    with QdrantConnection(settings) as qdrant:
        store = QdrantStore(qdrant, schema)
        store.ensure_collection()
        started = time.perf_counter()
        _load(store, chunks, weights, points, rng)
        result["load s"] = round(time.perf_counter() - started, 1)
        assert store.count() == points, "points collapsed: their ids must differ"
        documents = [_acl(i // len(chunks)) for i in range(points)]
        result["visible %"] = round(100 * sum(map(_visible, documents)) / points)
        warm_up = {DENSE: dense_queries[0], DENSE_PARTS: [dense_queries[0]]}
        find_points(store, {**warm_up, LEXICAL: questions[0]}, limit=10, filters=filters)
        timings, exact = _asked(
            store, dense_queries, questions, filters
        )  # before the build every segment is scanned
        _record(result, timings)
        optimized = store.optimize()
        result["optimize s"] = None if optimized is None else round(optimized, 1)
        if optimized is not None:
            timings, approximate = _asked(store, dense_queries, questions, filters)
            _record(result, timings, " optimized")
            for mode, answers in approximate.items():
                kept = [len(a & e) / len(e) for a, e in zip(answers, exact[mode], strict=True)]
                result[f"{mode} recall@10 optimized"] = round(sum(kept) / len(kept), 3)
    started = time.perf_counter()
    with QdrantConnection(settings) as qdrant:
        store = QdrantStore(qdrant, schema)
        store.ensure_collection()
        dense = dense_queries[0]
        find_points(
            store,
            {DENSE: dense, DENSE_PARTS: [dense], LEXICAL: questions[0]},
            limit=10,
            filters=filters,
        )
        result["reopen s"] = round(time.perf_counter() - started, 2)
    result["peak rss mib"] = round(peak_rss_mib())
    return result


def _load(
    store: Any, chunks: Sequence[Any], weights: Sequence[dict[int, float]], points: int, rng: Any
) -> None:
    """`points` copies of the chunks, each its own document with an ACL, random unit dense
    and part vectors and the chunk's real lexical weights."""
    from indexing.embedders import Embedding

    for start in range(0, points, 2000):
        copies = range(start, min(points, start + 2000))
        batch = [
            dataclasses.replace(
                chunks[i % len(chunks)],
                chunk_id=hashlib.sha256(str(i).encode()).hexdigest(),
                document_id=f"{chunks[i % len(chunks)].document_id}#{i // len(chunks)}",
                document={"acl": _acl(i // len(chunks))},
            )
            for i in copies
        ]
        dense = _unit(rng, len(batch))
        parts = [_unit(rng, int(rng.integers(2, 5))) for _ in batch]
        store.upsert(
            batch,
            [Embedding(dense=v.tolist()) for v in dense],
            [weights[i % len(chunks)] for i in copies],
            [p.tolist() for p in parts],
        )


def _asked(
    store: Any, dense_queries: Sequence[Any], questions: Sequence[dict[int, float]], filters: Any
) -> tuple[dict[str, list[float]], dict[str, list[set[str]]]]:
    """Each mode's seconds and top-10 point ids, question by question."""
    from indexing.search import find_points
    from indexing.store_schema import DENSE, DENSE_PARTS, LEXICAL

    timings: dict[str, list[float]] = {"dense": [], "hybrid": []}
    found: dict[str, list[set[str]]] = {"dense": [], "hybrid": []}
    for dense, terms in zip(dense_queries, questions, strict=True):
        views: dict[str, Any] = {DENSE: dense, DENSE_PARTS: [dense]}
        for mode, vectors in (("dense", views), ("hybrid", {**views, LEXICAL: terms})):
            started = time.perf_counter()
            hits = find_points(store, vectors, limit=10, filters=filters)
            timings[mode].append(time.perf_counter() - started)
            found[mode].append({hit.point_id for hit in hits})
    return timings, found


def _record(result: dict[str, Any], timings: dict[str, list[float]], suffix: str = "") -> None:
    """Each mode's p50 and p95 into `result`, and hybrid's p95 over dense's."""
    for mode, seconds in timings.items():
        p50, p95 = _percentiles(seconds)
        result[f"{mode} p50 ms{suffix}"] = p50
        result[f"{mode} p95 ms{suffix}"] = p95
    ratio = result[f"hybrid p95 ms{suffix}"] / result[f"dense p95 ms{suffix}"]
    result[f"hybrid/dense p95{suffix}"] = round(ratio, 2)


def prepare(data: Path, questions: int) -> None:
    """The corpus's chunks, their lexical weights and the questions' terms, for the
    children (so each does not chunk the corpus again)."""
    from bench.retrieval import chunks_of, load_corpus
    from bench.retrieval_questions import QUESTIONS
    from config.settings import ChunkingSettings, LexicalSettings
    from indexing.lexical import LexicalEncoder

    encoder = LexicalEncoder(LexicalSettings())  # type: ignore[call-arg]
    chunks = chunks_of(load_corpus(), ChunkingSettings())  # type: ignore[call-arg]
    asked = [encoder.encode_query(q.text) for q in QUESTIONS[:questions]]
    payload = {
        "records": [c.to_record() for c in chunks],
        "weights": [encoder.encode(c.embed_text) for c in chunks],
        "questions": [terms for terms in asked if terms],
        "lexical_id": encoder.id,
    }
    data.write_bytes(pickle.dumps(payload))


COLUMNS = (
    "engine", "points", "visible %", "load s", "dense p50 ms", "dense p95 ms", "hybrid p50 ms",
    "hybrid p95 ms", "hybrid/dense p95", "optimize s", "dense p50 ms optimized",
    "dense p95 ms optimized", "hybrid p50 ms optimized", "hybrid p95 ms optimized",
    "hybrid/dense p95 optimized", "dense recall@10 optimized", "hybrid recall@10 optimized",
    "reopen s", "rss_data_mib", "peak rss mib",
)  # fmt: skip


def table(results: Sequence[dict[str, Any]]) -> str:
    """The results as a Markdown table, one row per engine and size."""

    def cell(value: Any) -> str:
        return "-" if value is None else str(value)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in COLUMNS) + " |" for r in results]
    return "\n".join(lines)


def compare(
    engines: Sequence[str], points: dict[str, Sequence[int]], questions: int
) -> list[dict[str, Any]]:
    """Each engine at each of its sizes in a child process; their results, printed as
    they come and as a table at the end."""
    root = Path(tempfile.mkdtemp(prefix="bench-store-engines-"))
    results: list[dict[str, Any]] = []
    try:
        data = root / "data.pickle"
        prepare(data, questions)
        for engine in engines:
            for count in points[engine]:
                done = subprocess.run(
                    [sys.executable, "-m", "bench.store_engines", "--child", engine,
                     str(count), str(data), str(root)],
                    cwd=ROOT, capture_output=True, text=True, check=False,
                )  # fmt: skip
                if done.returncode != 0:
                    print(f"{engine} at {count} points failed:\n{done.stderr}", flush=True)
                    continue
                results.append(json.loads(done.stdout.splitlines()[-1]))
                print(f"{engine} search:", results[-1], flush=True)
                shutil.rmtree(root / f"{engine}-{count}", ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(table(results), flush=True)
    return results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engines", default="edge,local", help="embedded engines, in order")
    parser.add_argument("--points", default="10000,100000", help="point counts")
    parser.add_argument(
        "--local-points", help="local mode's point counts (default: --points); it is slow"
    )
    parser.add_argument("--questions", type=int, default=40, help="queries per latency test")


def run(args: argparse.Namespace) -> None:
    """`compare` as `add_arguments`'s options ask."""
    sizes = [int(p) for p in args.points.split(",")]
    local = [int(p) for p in args.local_points.split(",")] if args.local_points else sizes
    engines = args.engines.split(",")
    unknown = set(engines) - {"edge", "local"}
    if unknown:
        raise SystemExit(f"--engines: unknown {', '.join(sorted(unknown))}; use edge, local")
    compare(engines, {"edge": sizes, "local": local}, args.questions)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--child", nargs=4, metavar=("ENGINE", "POINTS", "DATA", "ROOT"))
    add_arguments(parser)
    args = parser.parse_args()
    if args.child:
        engine, points, data, root = args.child
        print(json.dumps(measure(engine, int(points), Path(data), Path(root))))
    else:
        run(args)


if __name__ == "__main__":
    main()
