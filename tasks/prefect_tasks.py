"""Prefect task wrappers around `tasks.pipeline`: one task run per batch and stage group,
retried only for transient errors (network, 429/5xx, Qdrant unavailable)."""

from __future__ import annotations

import dataclasses
from typing import Any

from prefect import Task, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State as State
from prefect.client.schemas.objects import TaskRun

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DocumentRef, Listing
from indexing.reindex import Gate
from tasks import native_memory, pipeline
from tasks.pipeline import BatchOutcome, Failure, PreparedBatch, SourceSpec
from tasks.resources import Resources


def retry_when_transient(task: Task[..., Any], task_run: TaskRun, state: State[Any]) -> bool:
    """Retry condition: only errors that another attempt may cure. A store another
    process holds is not one of them: opening it already waited `qdrant.lock_wait_s`."""
    try:
        state.result()
    except IngestError as exc:
        return exc.transient and exc.code is not ErrorCode.STORE_BUSY
    except Exception:
        return False
    return False


@task(name="discover", cache_policy=NO_CACHE, retry_condition_fn=retry_when_transient)
def discover_task(spec: SourceSpec, settings: Settings, resources: Resources) -> Listing:
    return pipeline.discover(spec, settings, resources)


@task(name="plan", cache_policy=NO_CACHE, retry_condition_fn=retry_when_transient)
def plan_task(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    resources: Resources,
    mode: str,
    since: Any,
) -> pipeline.Plan:
    return pipeline.plan(spec, settings, listing, resources, mode=mode, since=since)  # type: ignore[arg-type]


@task(name="prepare-batch", cache_policy=NO_CACHE)
def prepare_task(
    spec: SourceSpec,
    settings: Settings,
    refs: tuple[DocumentRef, ...],
    resources: Resources,
    force: bool,
) -> PreparedBatch:
    """Fetch, normalize, chunk. Failures are recorded inside, each document's its own; a
    transient failure of the whole batch (the source went away) fails every document of
    it for now."""
    try:
        return pipeline.prepare_isolated(spec, settings, refs, resources, force=force)
    finally:
        native_memory.release_freed()  # what the batch's documents and parsers freed


@task(name="index-batch", cache_policy=NO_CACHE, retry_condition_fn=retry_when_transient)
def index_task(
    spec: SourceSpec,
    settings: Settings,
    prepared: PreparedBatch,
    resources: Resources,
    force: bool,
) -> BatchOutcome:
    try:
        outcome = pipeline.index_isolated(
            spec, settings, prepared.documents, resources, force=force
        )
    finally:
        native_memory.release_freed()  # what the batch's texts, vectors and points freed
    outcome.merge(prepared.outcome)
    return outcome


@task(name="reconcile", cache_policy=NO_CACHE, retry_condition_fn=retry_when_transient)
def reconcile_task(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    gone: list[str],
    indexed: list[str],
    resources: Resources,
    force: bool,
) -> pipeline.Reconciled:
    """Delete what vanished, then bring incoming-link counts in payloads up to date."""
    return pipeline.reconcile(spec, settings, listing, gone, indexed, resources, force=force)


@task(name="reindex", cache_policy=NO_CACHE, retry_condition_fn=retry_when_transient)
def reindex_task(
    settings: Settings, resources: Resources, gate: Gate | None = None
) -> dict[str, Any]:
    """Move the alias to a collection of the current schema before the run, if `gate`
    lets it (docs/qdrant.md#chunking-changes-and-the-gate)."""
    result = pipeline.reindex_collection(settings, resources, gate=gate)
    return dataclasses.asdict(result)


def failed_batch(
    prepared: PreparedBatch | None,
    refs: tuple[DocumentRef, ...],
    error: BaseException,
    crash_code: ErrorCode,
) -> BatchOutcome:
    """The outcome of a batch that failed for good while being prepared (`prepared` None)
    or indexed: its documents keep their old points (nothing is deleted) and are reported
    with the error, as `crash_code` when it is no IngestError."""
    if isinstance(error, IngestError):
        code, message, transient = error.code.value, error.message, error.transient
    else:
        code, message, transient = (
            crash_code.value,
            f"{type(error).__name__}: {error}",
            True,
        )
    outcome = BatchOutcome(documents=len(refs))
    already = set()
    if prepared is None:  # its documents never reached the progress of preparing
        pipeline.report_progress(len(refs))
    else:
        outcome.merge(prepared.outcome)
        outcome.documents = len(refs)
        already = {f.document_id for f in prepared.outcome.failures}
    outcome.failures += [
        Failure(r.document_id, code, message, transient)
        for r in refs
        if r.document_id not in already
    ]
    return outcome
