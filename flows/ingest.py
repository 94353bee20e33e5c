"""The `ingest` flow (SPEC §1, §5): discover -> plan -> per batch (prepare -> index) ->
reconcile -> report. Parameters are typed so the Prefect UI renders a form."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from prefect import flow, get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.objects import State
from prefect.context import FlowRunContext
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import Settings, load_settings
from flows.report import RunSummary, remember, summary_markdown
from tasks import pipeline
from tasks.pipeline import BatchOutcome, Failure, SourceSpec
from tasks.prefect_tasks import (
    discover_task,
    failed_batch,
    index_task,
    plan_task,
    prepare_task,
    reconcile_task,
)


class ChunkingOverrides(BaseModel):
    """Per-run chunk budgets (empty fields keep the configured values)."""

    min_tokens: int | None = Field(None, gt=0)
    target_tokens: int | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    overlap_tokens: int | None = Field(None, ge=0)
    oversize_block_limit: int | None = Field(None, gt=0)
    profile: Literal["adr-002", "seed-000", "seed-002"] | None = None


class TransientFailures(Exception):
    """Raised after every other document finished, so the run is marked Failed and the
    next scheduled run retries what could not be reached."""


def _task_runner() -> Any:
    try:
        settings = load_settings()
    except ConfigError:
        return ThreadPoolTaskRunner(max_workers=4)  # the flow reports the error itself
    if settings.run.task_runner == "dask":
        from prefect_dask.task_runners import DaskTaskRunner

        if settings.run.dask_address:
            return DaskTaskRunner(address=settings.run.dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": settings.run.dask_n_workers})
    return ThreadPoolTaskRunner(max_workers=settings.run.max_workers)


@flow(name="ingest", task_runner=_task_runner(), log_prints=True)
def ingest(
    source: Literal["confluence", "files"] = "confluence",
    targets: list[str] | None = None,
    tenant_id: str | None = None,
    mode: Literal["incremental", "full"] = "incremental",
    since: datetime | None = None,
    chunking: ChunkingOverrides | None = None,
    force: bool = False,
    force_delete: bool = False,
) -> dict[str, Any]:
    """Sync one source into Qdrant.

    Args:
        source: `confluence` (targets are space keys) or `files` (targets are directories).
        targets: space keys or paths; empty uses `confluence.spaces` / `files.paths`.
        tenant_id: tenant whose points this run writes and deletes (default: settings).
        mode: `incremental` skips documents whose version is already indexed; `full`
            re-processes every listed document (caches still apply unless `force`).
        since: also re-process documents updated since this time (backfills).
        chunking: chunk budgets for this run.
        force: ignore the stage caches (re-normalize, re-chunk, re-embed).
        force_delete: allow deleting more than `reconcile.max_delete_share` of the source.
    """
    logger = get_run_logger()
    overrides: dict[str, Any] = {"tenant_id": tenant_id}
    if chunking is not None:
        overrides["chunking"] = chunking.model_dump(exclude_none=True)
    settings = load_settings(overrides)
    spec = _source_spec(source, targets, settings)
    started = datetime.now().astimezone()

    # Transient errors (Qdrant or the source unreachable) are retried in every task, not
    # only in indexing: each task's retry condition lets only those through.
    retrying: dict[str, Any] = {
        "retries": settings.run.task_retries,
        "retry_delay_seconds": settings.run.task_retry_delay_s,
    }
    listing = discover_task.with_options(**retrying)(spec, settings)
    if not listing.complete:
        logger.warning(
            "the listing of %s is incomplete (%s): nothing will be deleted this run",
            spec.scope,
            "; ".join(listing.errors[:3]),
        )
    plan = plan_task.with_options(**retrying)(spec, settings, listing, mode, since)
    logger.info(
        "%s: %d listed, %d to process, %d unchanged, %d still failing",
        spec.scope,
        len(listing.refs),
        len(plan.to_process),
        len(plan.unchanged),
        len(plan.still_failing),
    )
    total = pipeline.BatchOutcome()
    batches = pipeline.batches(plan.to_process, settings.run.batch_size)
    pipeline.progress_start(len(plan.to_process))
    progress_id = create_progress_artifact(
        progress=0.0 if batches else 100.0, description=f"documents processed of {spec.scope}"
    )
    index_runner = index_task.with_options(**retrying)
    # Qdrant local mode is one process's store (a file lock on its directory): under a
    # runner of other processes (Dask), index batches then run here in the flow's process
    # while fetching, normalizing and chunking still spread over the workers.
    index_here = not settings.qdrant.url and not isinstance(
        getattr(FlowRunContext.get(), "task_runner", None), ThreadPoolTaskRunner
    )
    # An index task is submitted only when its batch is prepared, so no worker thread
    # sits waiting on an upstream future while other batches could be preparing.
    preparing = {prepare_task.submit(spec, settings, refs, force): refs for refs in batches}
    indexing: dict[PrefectFuture[BatchOutcome], tuple[Any, tuple[Any, ...]]] = {}
    done_documents = 0

    def account(outcome: BatchOutcome, documents: int) -> None:
        nonlocal done_documents
        total.merge(outcome)
        done_documents += documents
        if isinstance(progress_id, UUID):
            update_progress_artifact(
                progress_id, progress=100.0 * done_documents / max(1, len(plan.to_process))
            )

    def indexed(prepared: Any, refs: tuple[Any, ...], done: PrefectFuture[Any] | State) -> None:
        outcome, error = _result_or_error(done)
        if error is not None:  # the batch failed for good: report, keep the old points
            logger.error("indexing a batch of %d documents failed: %s", len(refs), error)
            outcome = failed_batch(prepared, refs, error)
        account(outcome, len(refs))

    for prepare_future in as_completed(list(preparing)):
        refs = preparing[prepare_future]
        prepared, error = _result_or_error(prepare_future)
        if error is not None:
            logger.error("preparing a batch of %d documents failed: %s", len(refs), error)
            account(failed_batch(None, refs, error), len(refs))
            continue
        if index_here:
            state = index_runner(spec, settings, prepared, force, return_state=True)
            indexed(prepared, refs, state)
        else:
            indexing[index_runner.submit(spec, settings, prepared, force)] = (prepared, refs)
    for index_future in as_completed(list(indexing)):
        prepared, refs = indexing[index_future]
        indexed(prepared, refs, index_future)

    transient = [f for f in total.failures if f.transient]
    deleted: list[str] = []
    try:
        # Documents that failed for now are still listed, so they are never deleted here.
        deleted = reconcile_task.with_options(**retrying)(
            spec, settings, listing, total.gone, total.indexed, force_delete
        )
    except IngestError as exc:
        logger.error("reconcile: %s", exc)
        code = exc.code.value if exc.code else ErrorCode.UPSERT_FAILED.value
        total.failures.append(Failure(spec.scope, code, exc.message, exc.transient))
        if exc.transient:
            transient.append(total.failures[-1])

    summary = RunSummary.build(
        spec=spec,
        settings=settings,
        mode=mode,
        listing=listing,
        plan=plan,
        outcome=total,
        deleted=deleted,
        started=started,
    )
    _write_artifacts(summary)
    remember(summary)
    if transient:
        raise TransientFailures(
            f"{len(transient)} document(s) could not be processed for transient reasons "
            f"(first: {transient[0].document_id}: {transient[0].message}); every other "
            "document was processed and nothing indexed was removed"
        )
    return summary.as_dict()


def _source_spec(source: str, targets: list[str] | None, settings: Settings) -> SourceSpec:
    if source == "confluence":
        chosen = targets or settings.confluence.spaces
        if not chosen:
            raise ConfigError(
                "no space keys: pass targets or set confluence.spaces", setting="confluence.spaces"
            )
        return SourceSpec("confluence", tuple(chosen))
    chosen = targets or settings.files.paths
    if not chosen:
        raise ConfigError("no paths: pass targets or set files.paths", setting="files.paths")
    return SourceSpec("files", tuple(chosen))


def _result_or_error(future: PrefectFuture[Any] | State) -> tuple[Any, BaseException | None]:
    try:
        return future.result(), None
    except Exception as exc:
        return None, exc


def _write_artifacts(summary: RunSummary) -> None:
    create_markdown_artifact(
        key="ingest-summary", markdown=summary_markdown(summary), description="ingest run summary"
    )
    if summary.failed:
        create_table_artifact(
            key="ingest-failures",
            table=[
                {"document_id": f.document_id, "code": f.code, "message": f.message}
                for f in summary.failed
            ],
            description="documents that failed, with their error codes",
        )
