"""The `ingest` flow (docs/architecture.md#the-run-step-by-step): discover -> plan -> per batch
(prepare -> index) -> reconcile -> report. Parameters are typed so the Prefect UI renders a form."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
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
from prefect.states import Failed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict, Field

from config.errors import ConfigError, ErrorCode
from config.settings import Settings, load_settings
from config.sources import DEFAULT_SOURCE
from connectors.base import DocumentRef, Listing
from flows.report import RunNotOk, RunSummary, status_message, summary_markdown
from flows.sync import held_store_summary, sync
from query.gate import GateRefused, gate_markdown, promotion_gate
from tasks import pipeline
from tasks.pipeline import BatchOutcome, Plan, PreparedBatch, SourceSpec
from tasks.prefect_tasks import (
    discover_task,
    failed_batch,
    index_task,
    plan_task,
    prepare_task,
    reconcile_task,
    reindex_task,
)
from tasks.resources import Resources
from tasks.stages import picture_warnings

DocumentBatch = tuple[DocumentRef, ...]


class ChunkingOverrides(BaseModel):
    """Chunk budgets for this run, in BGE-M3 tokens (docs/chunking.md#budgets). 0 keeps the
    configured value; the budgets must stay ordered (min <= target <= max <= oversize limit, overlap
    below min) or the run stops at once naming the setting."""

    model_config = ConfigDict(frozen=True)

    min_tokens: int = Field(
        default=0, ge=0, description="Smallest chunk (default 150). 0: configured."
    )
    target_tokens: int = Field(
        default=0, ge=0, description="Size chunks are packed to (default 250). 0: configured."
    )
    max_tokens: int = Field(
        default=0, ge=0, description="Largest chunk (default 300). 0: configured."
    )
    overlap_tokens: int = Field(
        default=0,
        ge=0,
        description="Tail of the previous chunk carried as context (default 50). 0: configured.",
    )
    oversize_block_limit: int = Field(
        default=0,
        ge=0,
        description="A table or code block up to this size stays whole (default 600). "
        "0: configured.",
    )
    profile: Literal["configured", "adr-002", "seed-000", "seed-002"] = Field(
        default="configured",
        description="Budgets of a source document (adr-002: 150/250/300; seed-000: 120/650/900; "
        "seed-002: 350 target, 450 max, 520 hard limit); the numbers above still win.",
    )

    def settings(self) -> dict[str, Any]:
        """The overrides this run asks for, as settings."""
        return {
            name: value
            for name, value in self.model_dump().items()
            if value and value != "configured"
        }


KEEP_CONFIGURED = ChunkingOverrides()


def task_runner_for(settings: Settings) -> Any:
    """The runner `run.task_runner` names: threads, or Dask (a cluster at
    `run.dask_address`, else a local one)."""
    if settings.run.task_runner == "dask":
        from prefect_dask.task_runners import DaskTaskRunner

        if settings.run.dask_address:
            return DaskTaskRunner(address=settings.run.dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": settings.run.dask_n_workers})
    return ThreadPoolTaskRunner(max_workers=settings.run.max_workers)


def _configured_task_runner() -> Any:
    """The flow's default runner. Worker deployments load the flow from its entrypoint
    (flows/ingest.py:ingest) and run it as is, so the default follows the settings this
    process sees; `ingest run` picks the runner of its own settings per run."""
    try:
        return task_runner_for(load_settings())
    except ConfigError:
        return ThreadPoolTaskRunner(max_workers=4)  # the flow reports the error itself


# persist_result: the run's summary is its result on the server, Completed or Failed
# (`prefect flow-run inspect`, the UI), stored under PREFECT_HOME/storage by default.
@flow(
    name="ingest",
    task_runner=_configured_task_runner(),
    log_prints=True,
    persist_result=True,
)
def ingest(
    source: str = DEFAULT_SOURCE,
    targets: tuple[str, ...] = (),
    tenant_id: str = "",
    mode: Literal["incremental", "full"] = "incremental",
    since: datetime | None = None,
    chunking: ChunkingOverrides = KEEP_CONFIGURED,
    force: bool = False,
    force_delete: bool = False,
    reindex: bool = False,
) -> dict[str, Any] | State[Any]:
    """Sync one source into Qdrant.

    Args:
        source: The source kind: confluence (targets are space keys), files (targets
            are directories, globs or files on the worker's machine), or a kind the
            `sources` setting registers.
        targets: Space keys (ENG) or paths (/mnt/share/docs). Empty: the configured
            confluence.spaces or files.paths.
        tenant_id: Tenant whose points this run writes and deletes. Empty: the configured
            tenant_id.
        mode: incremental skips documents whose version is already indexed; full
            re-processes every listed document (the stage caches still apply unless force).
        since: Also re-process documents updated since this date and time (a backfill).
            None (the default): no date.
        chunking: Chunk budgets for this run; 0 or configured keeps the setting.
        force: Ignore the stage caches: re-normalize, re-chunk and re-embed everything.
        force_delete: Allow deleting more than reconcile.max_delete_share of the source.
        reindex: First move the collection to what the settings make now (another
            embedding model or vector size, the lexical vector of hybrid search): a new
            collection is built from the stage cache and the alias moved to it in one
            step; nothing is done when the collection already holds it.
    """
    overrides: dict[str, Any] = {"tenant_id": tenant_id or None}
    if chunking.settings():
        overrides["chunking"] = chunking.settings()
    try:
        settings = load_settings(overrides)
        spec = SourceSpec.of(source, targets, settings)
    except ConfigError as exc:
        return _not_configured(exc)
    resources = Resources(settings)
    try:
        try:
            # the source's own settings (confluence.url, a path of files.paths) are checked
            # here, before any task: a task would log the error with a traceback
            spec.connector(resources)
        except ConfigError as exc:
            return _not_configured(exc)
        busy = held_store_summary(spec, settings, resources, mode)
        if busy is not None:  # a clean Failed run: the summary says who holds the store
            return _report(busy)
        run = _Run(spec, settings, resources, force)
        if reindex:
            run.reindex()
        return run.sync(mode, since, force_delete)
    finally:
        resources.close()


class _Run:
    """One run's steps: discover -> plan -> batches -> reconcile -> report."""

    def __init__(
        self, spec: SourceSpec, settings: Settings, resources: Resources, force: bool
    ) -> None:
        self.spec, self.settings, self.resources, self.force = spec, settings, resources, force
        self.gate_table: str | None = None  # the re-index gate's comparison, for the summary
        self.logger = get_run_logger()
        for warning in picture_warnings(settings):
            self.logger.warning("%s", warning)
        # Transient errors (Qdrant or the source unreachable) are retried in every task,
        # not only in indexing: each task's retry condition lets only those through.
        self.retrying: dict[str, Any] = {
            "retries": settings.run.task_retries,
            "retry_delay_seconds": settings.run.task_retry_delay_s,
        }

    def sync(
        self, mode: Literal["incremental", "full"], since: datetime | None, force_delete: bool
    ) -> dict[str, Any] | State[Any]:
        summary = sync(self, mode, since, force_delete)
        assert summary is not None, "the flow's steps never stop a run"
        return _report(summary, self.gate_table)

    def process(self, plan: Plan) -> BatchOutcome:
        return _BatchRunner(self).run(plan.to_process)

    @property
    def reconciler(self) -> Callable[..., pipeline.Reconciled]:
        return reconcile_task.with_options(**self.retrying)

    def reindex(self) -> None:
        gate = promotion_gate(self.settings, self.resources)
        try:
            result = reindex_task.with_options(**self.retrying)(self.settings, self.resources, gate)
        except GateRefused as refused:  # the run fails before its summary: an artifact of its own
            create_markdown_artifact(
                key="ingest-reindex-gate",
                markdown=gate_markdown(refused.verdict),
                description="re-index gate: the questions in the current and the new collection",
            )
            raise
        if result["gate"] is not None:
            self.gate_table = gate_markdown(result["gate"])
        if result["moved"]:
            self.logger.info(
                "re-indexed %d points from %s into %s (embedded %d texts); the alias %s "
                "names it now",
                result["points"],
                result["source"],
                result["target"],
                result["embedded"],
                self.settings.qdrant.collection,
            )
        else:
            self.logger.info("re-index: %s already holds what the settings make", result["target"])

    def discover(self) -> Listing:
        discover = discover_task.with_options(**self.retrying)
        listing = discover(self.spec, self.settings, self.resources)
        if not listing.complete:
            self.logger.warning(
                "the listing of %s is incomplete (%s): nothing will be deleted this run",
                self.spec.scope,
                "; ".join(listing.errors[:3]),
            )
        return listing

    def plan(
        self, listing: Listing, mode: Literal["incremental", "full"], since: datetime | None
    ) -> Plan:
        plan_run = plan_task.with_options(**self.retrying)
        plan = plan_run(self.spec, self.settings, listing, self.resources, mode, since)
        self.logger.info(
            "%s: %d listed, %d to process, %d unchanged, %d still failing",
            self.spec.scope,
            len(listing.refs),
            len(plan.to_process),
            len(plan.unchanged),
            len(plan.still_failing),
        )
        return plan


def _report(summary: RunSummary, gate_table: str | None = None) -> dict[str, Any] | State[Any]:
    _write_artifacts(summary, gate_table)
    result = summary.as_dict()
    if result["status"] != "ok":
        # Failed, so schedules and alerting notice; the summary stays the run's result,
        # carried by the exception Prefect resolves a Failed state's result into.
        message = status_message(result)
        return Failed(message=message, data=RunNotOk(message, result))
    return result


def _not_configured(error: ConfigError) -> State[Any]:
    """A run whose settings are missing or wrong (a source the worker is not configured
    for: `files.paths` unset) fails at once, its state's message the one line naming the
    setting; the error is its result, so `ingest run` reports it as a configuration
    error."""
    return Failed(message=str(error), data=error)


class _RunNotOkIsNoCrash(logging.Filter):
    """Prefect's engine re-raises the exception of every Failed run it executes for a
    worker and logs it as "Engine execution exited with unexpected exception" with a
    traceback, which the UI shows. A run this flow failed on purpose (its status is not
    `ok`, or its settings are wrong) is no crash: its state's message says why and its
    result holds the summary or the error, so that record is dropped; any other
    exception is logged as Prefect logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not isinstance(error, RunNotOk | ConfigError)


# The engine's flow run logger (`prefect.logging.loggers.flow_run_logger`), configured
# when Prefect was imported above; the engine loads this module before it runs the flow.
logging.getLogger("prefect.flow_runs").addFilter(_RunNotOkIsNoCrash())


class _BatchRunner:
    """Prepares (fetch, normalize, chunk) and indexes the plan's documents in batches,
    one task run per batch and stage group, and adds up their outcomes."""

    def __init__(self, run: _Run) -> None:
        self.spec, self.settings, self.force = run.spec, run.settings, run.force
        self.resources = run.resources
        self.index_task = index_task.with_options(**run.retrying)
        self.total = BatchOutcome()
        self.done = 0
        self.expected = 0
        self.progress_id: Any = None
        self.logger = run.logger

    def run(self, refs: Sequence[DocumentRef]) -> BatchOutcome:
        self.expected = len(refs)
        batches = pipeline.batches(refs, self.settings.run.batch_size)
        pipeline.progress_start(len(refs))
        self.progress_id = create_progress_artifact(
            progress=0.0 if batches else 100.0,
            description=f"documents processed of {self.spec.scope}",
        )
        # An embedded Qdrant (Edge, local mode) is one process's store (a file lock): under a
        # runner of other processes (Dask), index batches run here in the flow's process
        # while fetching, normalizing and chunking still spread over the workers.
        index_here = not self.settings.qdrant.url and not isinstance(
            getattr(FlowRunContext.get(), "task_runner", None), ThreadPoolTaskRunner
        )
        # An index task is submitted only when its batch is prepared, so no worker thread
        # sits waiting on an upstream future while other batches could be preparing.
        preparing = {
            prepare_task.submit(self.spec, self.settings, batch, self.resources, self.force): batch
            for batch in batches
        }
        indexing: dict[PrefectFuture[BatchOutcome], tuple[PreparedBatch, DocumentBatch]] = {}
        for prepare_future in as_completed(list(preparing)):
            batch = preparing[prepare_future]
            prepared, error = _result_or_error(prepare_future)
            if error is not None:
                self.logger.error("preparing a batch of %d documents failed: %s", len(batch), error)
                failed = failed_batch(None, batch, error, ErrorCode.CHUNKING_FAILED)
                self._account(failed, len(batch))
            elif index_here:
                args = (self.spec, self.settings, prepared, self.resources, self.force)
                self._indexed(prepared, batch, self.index_task(*args, return_state=True))
            else:
                args = (self.spec, self.settings, prepared, self.resources, self.force)
                indexing[self.index_task.submit(*args)] = (prepared, batch)
        for index_future in as_completed(list(indexing)):
            prepared, batch = indexing[index_future]
            self._indexed(prepared, batch, index_future)
        return self.total

    def _indexed(
        self, prepared: PreparedBatch, batch: DocumentBatch, done: PrefectFuture[Any] | State
    ) -> None:
        outcome, error = _result_or_error(done)
        if error is not None:  # the batch failed for good: report, keep the old points
            self.logger.error("indexing a batch of %d documents failed: %s", len(batch), error)
            outcome = failed_batch(prepared, batch, error, ErrorCode.UPSERT_FAILED)
        self._account(outcome, len(batch))

    def _account(self, outcome: BatchOutcome, documents: int) -> None:
        self.total.merge(outcome)
        self.done += documents
        if isinstance(self.progress_id, UUID):
            update_progress_artifact(
                self.progress_id, progress=100.0 * self.done / max(1, self.expected)
            )


def _result_or_error(future: PrefectFuture[Any] | State) -> tuple[Any, BaseException | None]:
    try:
        return future.result(), None
    except Exception as exc:
        return None, exc


def _write_artifacts(summary: RunSummary, gate_table: str | None = None) -> None:
    markdown = summary_markdown(summary)
    if gate_table is not None:  # what the re-index before the run compared
        markdown += "\n\n" + gate_table
    create_markdown_artifact(
        key="ingest-summary", markdown=markdown, description="ingest run summary"
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
