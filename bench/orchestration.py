"""Benchmark (run by hand): orchestration overhead of the `ingest` flow.

    .venv/bin/python -m bench.orchestration [--pages 2000] [--body-bytes 5000] [--order direct-first|prefect-first]

A space of `--pages` pages (~5 KB bodies) on the local Confluence API, embedded with the
tiny BGE-M3-shaped model, is ingested twice from scratch:

- `prefect`: the `ingest` flow, called in-process under `prefect_test_harness` (a
  temporary Prefect API server on SQLite in a subprocess, as `ingest run` gets from
  the ephemeral API). The server starts before the clock; its start-up is printed apart.
- `direct`: the same stages through `tasks.pipeline` without Prefect: discover, plan,
  then prepare_batch + index_batch for the same batches on a thread pool of the same size
  (`run.max_workers`), then delete_missing.

Each side gets fresh Qdrant and cache directories, so neither reuses the other's stage
caches; the tokenizer and the model files are warmed once before either clock starts.
Aim: prefect / direct <= 1.3.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from testkit.confluence_api import FakeConfluence, add_bulk_pages, ingest_environment
from testkit.tiny_model import build_tiny_model

SPACE = "BENCH"


def _environment(root: Path, api: FakeConfluence, model: Path, args: argparse.Namespace) -> None:
    """Settings for one side (the flow reads them from the environment, as deployments do)."""
    for name in [n for n in os.environ if n.startswith(("INGEST_", "CHUNK_"))]:
        del os.environ[name]
    os.environ.update(
        {
            **ingest_environment(root, api, model),
            "INGEST_RUN__BATCH_SIZE": str(args.batch_size),
            "INGEST_RUN__MAX_WORKERS": str(args.workers),
        }
    )


def run_direct() -> dict[str, Any]:
    from config.settings import load_settings
    from tasks import pipeline
    from tasks.pipeline import BatchOutcome, SourceSpec
    from tasks.resources import Resources

    started = time.perf_counter()
    settings = load_settings()
    spec = SourceSpec("confluence", (SPACE,))
    resources = Resources(settings)
    listing = pipeline.discover(spec, settings, resources)
    plan = pipeline.plan(spec, settings, listing, resources, mode="incremental", since=None)
    batches = pipeline.batches(plan.to_process, settings.run.batch_size)

    def one(refs: Any) -> BatchOutcome:
        prepared = pipeline.prepare_isolated(spec, settings, refs, resources)
        outcome = pipeline.index_isolated(spec, settings, prepared.documents, resources)
        outcome.merge(prepared.outcome)
        return outcome

    total = BatchOutcome()
    with ThreadPoolExecutor(max_workers=settings.run.max_workers) as pool:
        for outcome in pool.map(one, batches):
            total.merge(outcome)
        deleted = pipeline.delete_missing(
            spec,
            settings,
            listing,
            total.gone,
            resources,
            force=False,
            writes=pipeline.DocumentWrites(),
        )
    resources.close()
    wall = time.perf_counter() - started
    return {
        "wall_s": wall,
        "seen": len(listing.refs),
        "chunks": total.chunks,
        "failed": len(total.failures),
        "deleted": len(deleted),
        "batches": len(batches),
        "task_runs": 0,
        "points": _points(),
    }


def task_runs(flow_run_id: Any) -> list[Any]:
    """Every task run of the flow run, read from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs: list[Any] = []
    with get_client(sync_client=True) as client:
        while True:  # the API pages at 200
            page = client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                limit=200,
                offset=len(runs),
            )
            runs += page
            if len(page) < 200:
                break
    return runs


def run_prefect() -> dict[str, Any]:

    from flows.ingest import ingest
    from flows.report import summary_of

    started = time.perf_counter()
    state = ingest(source="confluence", targets=[SPACE], return_state=True)
    wall = time.perf_counter() - started
    summary = summary_of(state.result(raise_on_failure=False))
    assert isinstance(summary, dict), state
    flow_run_id = state.state_details.flow_run_id
    assert flow_run_id is not None
    runs = task_runs(flow_run_id)
    return {
        "wall_s": wall,
        "seen": summary["seen"],
        "chunks": summary["chunks"],
        "failed": len(summary["failed"]),
        "deleted": summary["deleted"],
        "batches": sum(1 for r in runs if r.name.startswith("prepare-batch")),
        "task_runs": len(runs),
        "points": _points(),
    }


def _points() -> int:
    from config.settings import load_settings
    from indexing.qdrant_store import QdrantConnection, QdrantStore
    from indexing.store_schema import CollectionSchema

    with QdrantConnection(load_settings().qdrant) as qdrant:
        return QdrantStore(qdrant, CollectionSchema(0, False, False)).count()


def _warm(model: Path) -> None:
    """Load the tokenizer and read the model once, so neither side pays first-use costs."""
    from chunking.tokens import get_token_counter
    from config.settings import EmbedderSettings
    from indexing.embedders import BgeM3Embedder

    get_token_counter().count("warm up")
    settings = EmbedderSettings.model_validate({"model": str(model), "device": "cpu"})
    BgeM3Embedder(settings).embed(["warm up"])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--body-bytes", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=100, help="run.batch_size")
    parser.add_argument("--workers", type=int, default=4, help="run.max_workers")
    parser.add_argument(
        "--order",
        choices=["direct-first", "prefect-first"],
        default="direct-first",
        help="which side runs first (the machine warms up as it goes)",
    )
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-orchestration-"))
    model = build_tiny_model(work / "model")
    # the flow's task runner reads run.max_workers when flows.ingest is imported
    os.environ["INGEST_RUN__MAX_WORKERS"] = str(args.workers)
    from prefect.testing.utilities import prefect_test_harness

    results: dict[str, dict[str, Any]] = {}
    with FakeConfluence("cloud") as api:
        api.add_space(SPACE)
        add_bulk_pages(api, SPACE, args.pages, body_bytes=args.body_bytes)
        _warm(model)
        server_started = time.perf_counter()
        with prefect_test_harness(server_startup_timeout=120):
            server_s = time.perf_counter() - server_started
            sides = ["direct", "prefect"]
            if args.order == "prefect-first":
                sides.reverse()
            for side in sides:
                _environment(work / side, api, model, args)
                results[side] = run_direct() if side == "direct" else run_prefect()

    direct, prefect = results["direct"], results["prefect"]
    print(
        f"\n{args.pages} pages x {args.body_bytes} B, batch {args.batch_size}, "
        f"{args.workers} workers, order {args.order}; Prefect API: prefect_test_harness "
        f"(temporary server on SQLite, started in {server_s:.1f} s, not counted)\n"
    )
    header = f"{'side':<8} {'wall s':>8} {'seen':>6} {'chunks':>7} {'points':>7} "
    header += f"{'failed':>6} {'task runs':>9}"
    print(header)
    print("-" * len(header))
    for side in ("direct", "prefect"):
        r = results[side]
        print(
            f"{side:<8} {r['wall_s']:>8.1f} {r['seen']:>6} {r['chunks']:>7} {r['points']:>7} "
            f"{r['failed']:>6} {r['task_runs'] or '-':>9}"
        )
    ratio = prefect["wall_s"] / direct["wall_s"]
    print(f"\nprefect / direct = {ratio:.2f}x (aim <= 1.3x)")
    same = (direct["points"], direct["chunks"]) == (prefect["points"], prefect["chunks"])
    print(f"same points and chunks on both sides: {same}")


if __name__ == "__main__":
    main()
