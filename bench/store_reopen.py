"""What a reader's idle release costs its next query (run by hand):
`.venv/bin/python -m bench.store_reopen [--points 1000 10000] [--rounds 20]`.

A reader of an embedded store lets it go after `qdrant.idle_release_s` without a query
(`query.api.Index`), so its next query opens it again: the store's lock file, the Edge
client and the collection's shard. Per size, a Qdrant Edge store in a temporary
directory gets that many points (1024 dense dimensions, BGE-M3's size, and a payload);
then each round asks one filtered dense query with the store open (`warm`) and one
right after its connection was closed (`reopened`: what the first query after an idle
release pays). Prints the median and p95 in milliseconds, and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from qdrant_client import models

from config.settings import QdrantSettings
from indexing.qdrant_store import QdrantConnection, QdrantStore, SearchFilters, VectorQuery
from indexing.store_schema import CollectionSchema

DIMENSIONS = 1024
TENANT = "bench"


def _vector(rng: random.Random) -> list[float]:
    return [rng.uniform(-1.0, 1.0) for _ in range(DIMENSIONS)]


def _fill(settings: QdrantSettings, points: int, rng: random.Random) -> None:
    with QdrantConnection(settings) as connection:
        store = QdrantStore(connection, CollectionSchema(DIMENSIONS, False, False))
        store.ensure_collection()
        batch = []
        for i in range(points):
            payload = {"tenant_id": TENANT, "document_id": f"doc-{i // 10}", "ordinal": i % 10}
            batch.append(
                models.PointStruct(
                    id=str(uuid.UUID(int=i)), vector={"dense": _vector(rng)}, payload=payload
                )
            )
            if len(batch) == 256 or i == points - 1:
                store.client.upsert(store.collection, points=batch)
                batch = []


def _query(connection: QdrantConnection, vector: list[float]) -> float:
    """Milliseconds of one filtered dense query, opening the store where it is closed."""
    started = time.perf_counter()
    store = QdrantStore(connection, CollectionSchema(DIMENSIONS, False, False))
    assert store.resolve() is not None
    (hits,) = store.nearest(
        [VectorQuery("dense", vector, 10)], filters=SearchFilters(tenant_id=TENANT)
    )
    assert len(hits) == 10
    return (time.perf_counter() - started) * 1000


def measure(points: int, rounds: int) -> dict[str, Any]:
    rng = random.Random(points)
    with tempfile.TemporaryDirectory() as directory:
        settings = QdrantSettings.model_validate(
            {"path": str(Path(directory) / "qdrant"), "collection": "bench"}
        )
        _fill(settings, points, rng)
        warm: list[float] = []
        reopened: list[float] = []
        connection = QdrantConnection(settings)
        _query(connection, _vector(rng))  # the first opening of this process
        for _ in range(rounds):
            warm.append(_query(connection, _vector(rng)))
            connection.close()  # what an idle release does
            reopened.append(_query(connection, _vector(rng)))
        connection.close()
    return {"points": points, "warm": _stats(warm), "reopened": _stats(reopened)}


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p95_ms": round(ordered[max(0, round(0.95 * len(ordered)) - 1)], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    results = [measure(points, args.rounds) for points in args.points]
    for result in results:
        print(
            f"{result['points']:>6} points: warm p50 {result['warm']['p50_ms']} ms "
            f"p95 {result['warm']['p95_ms']} ms; reopened p50 {result['reopened']['p50_ms']} ms "
            f"p95 {result['reopened']['p95_ms']} ms"
        )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
