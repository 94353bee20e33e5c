"""The ingest pipeline's work, as plain functions over batches of documents: the public
entry the Prefect tasks (`tasks.prefect_tasks`), the command line and the benchmarks call.

discover (a connector's complete listing) -> plan (which documents changed) ->
prepare_batch (fetch, normalize, chunk; each stage cached by content hash) ->
index_batch (embed only unseen texts, upsert only missing points, drop other versions) ->
reconcile (documents gone from a complete listing, incoming-link counts). The batch
steps' `_isolated` forms keep a failure to the document that caused it (`tasks.isolation`).
Each step lives in its own module (`tasks.plan`, `tasks.prepare`, `tasks.index`,
`tasks.reconcile`; the records they exchange in `tasks.outcome`); nothing here imports
Prefect, so the same code is measured without orchestration and called by the CLI.

Results stay small (ids, counts, cache keys): chunks travel through the stage cache.
"""

from __future__ import annotations

from tasks.index import index_batch, reindex_collection
from tasks.isolation import index_isolated, prepare_isolated
from tasks.outcome import (
    CHUNK_STAGES,
    LISTING,
    OPTIMIZING,
    RECONCILING,
    STAGES,
    BatchOutcome,
    DocumentLink,
    DocumentWarning,
    Failure,
    PreparedBatch,
    add_seconds,
    progress,
    progress_phase,
    progress_start,
    report_progress,
)
from tasks.plan import Plan, SourceSpec, batches, discover, plan
from tasks.prepare import prepare_batch
from tasks.reconcile import (
    DocumentWrites,
    Reconciled,
    delete_missing,
    indexed_points,
    optimize_index,
    reconcile,
    reconcile_into,
)

__all__ = [
    "CHUNK_STAGES",
    "LISTING",
    "OPTIMIZING",
    "RECONCILING",
    "STAGES",
    "BatchOutcome",
    "DocumentLink",
    "DocumentWarning",
    "DocumentWrites",
    "Failure",
    "Plan",
    "PreparedBatch",
    "Reconciled",
    "SourceSpec",
    "add_seconds",
    "batches",
    "delete_missing",
    "discover",
    "index_batch",
    "index_isolated",
    "indexed_points",
    "optimize_index",
    "plan",
    "prepare_batch",
    "prepare_isolated",
    "progress",
    "progress_phase",
    "progress_start",
    "reconcile",
    "reconcile_into",
    "reindex_collection",
    "report_progress",
]
