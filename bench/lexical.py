"""Cost of the lexical (BM25) vector (run by hand): `.venv/bin/python -m bench.lexical`.

1. Encoding speed: `LexicalEncoder.encode` over the embed_texts of the retrieval corpus
   chunked at the default budgets (bench/retrieval.py's corpus), in MB of embed_text per
   CPU-second, and the mean terms per embed_text (what `lexical.avg_len` is set from).
2. Share of a first run: the quickstart (`ingest run files samples/docs --config
   samples/quickstart.yaml`, in a fresh directory) run as a child process, its CPU time
   (user + system, Prefect's ephemeral API included) against the CPU time of encoding
   that run's chunks; and the same run with `lexical.enabled: false` for comparison
   (`--skip-run` leaves this part out).
3. Search latency at 10,000 and 100,000 points (`--points`) in Qdrant Edge and in
   qdrant-client's local mode (`--engines`, `--local-points`): bench/store_engines.py's
   measurement (the corpus's chunks repeated with their real lexical weights, dense and
   hybrid queries with the tenant and ACL filters in every prefetch; p50/p95, load,
   optimize, reopen and peak RSS per engine and size); `--skip-latency` leaves it out.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench import store_engines
from bench.retrieval import chunks_of, load_corpus
from config.settings import ChunkingSettings, LexicalSettings, QdrantSettings
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.store_schema import CollectionSchema

ROOT = Path(__file__).resolve().parents[1]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    store_engines.add_arguments(parser)
    parser.add_argument("--skip-run", action="store_true", help="leave out the quickstart runs")
    parser.add_argument("--skip-latency", action="store_true", help="leave out the searches")
    args = parser.parse_args()
    encoder = LexicalEncoder(LexicalSettings())  # type: ignore[call-arg]
    chunks = chunks_of(load_corpus(), ChunkingSettings())  # type: ignore[call-arg]
    print("encoding:", encoding_speed(encoder, [c.embed_text for c in chunks]), flush=True)
    if not args.skip_run:
        print("first quickstart run:", first_run_share(encoder), flush=True)
    if not args.skip_latency:
        store_engines.run(args)


if __name__ == "__main__":
    main()
