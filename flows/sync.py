"""One run's steps, the same for the `ingest` flow and for `ingest run`'s look before it
starts Prefect: discover -> plan -> process the planned documents in batches ->
reconcile -> summary. The flow runs each step as a Prefect task (flows/ingest.py);
`ingest run` runs them in its own process and stops, handing over to the flow, where a
step says there is work to orchestrate (flows/local_run.py). No Prefect here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import Listing
from connectors.registry import connector_class
from flows.report import RunSummary
from stage_cache.sync_log import SourceLog, SourceSync
from tasks import pipeline
from tasks.pipeline import BatchOutcome, Plan, SourceSpec
from tasks.resources import Resources

Mode = Literal["incremental", "full"]


class RunSteps(Protocol):
    """How a run lists, plans and processes; None from a step stops the run there."""

    @property
    def spec(self) -> SourceSpec: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def resources(self) -> Resources: ...

    def discover(self) -> Listing | None: ...

    def plan(self, listing: Listing, mode: Mode, since: datetime | None) -> Plan: ...

    def process(self, plan: Plan) -> BatchOutcome | None:
        """The outcome of the plan's documents, prepared and indexed."""
        ...

    @property
    def reconciler(self) -> Callable[..., pipeline.Reconciled] | None:
        """What reconciles (`tasks.pipeline.reconcile` or its Prefect task); None: the
        pipeline's own."""
        ...


def held_store_summary(
    spec: SourceSpec, settings: Settings, resources: Resources, mode: Mode
) -> RunSummary | None:
    """Take the run's store before any work: None when it is this run's now (kept until
    `resources` close), else the summary of a run stopped because another process holds
    it (an `ingest mcp` server, another run) past `qdrant.lock_wait_s`."""
    started = datetime.now().astimezone()
    try:
        resources.hold_store()
    except IngestError as exc:
        if exc.code is not ErrorCode.STORE_BUSY:
            raise
        return RunSummary.busy(spec=spec, settings=settings, mode=mode, error=exc, started=started)
    return None


def sync(
    steps: RunSteps, mode: Mode, since: datetime | None, force_delete: bool
) -> RunSummary | None:
    """The run's summary, or None where a step stopped it."""
    started = datetime.now().astimezone()
    # The store's seconds before the run (a re-index may have gone first on these
    # resources): the report counts the run's own.
    store_before = steps.resources.store_seconds()
    pipeline.progress_phase(pipeline.LISTING)
    listing = steps.discover()
    if listing is None:
        return None
    plan = steps.plan(listing, mode, since)
    outcome = steps.process(plan)
    if outcome is None:
        return None
    # Documents that failed for now are still listed, so they are never deleted here.
    pipeline.progress_phase(pipeline.RECONCILING)
    deleted, refused = pipeline.reconcile_into(
        outcome,
        steps.spec,
        steps.settings,
        listing,
        steps.resources,
        force_delete,
        steps.reconciler,
    )
    pipeline.progress_phase(pipeline.OPTIMIZING)
    optimized = pipeline.optimize_index(steps.resources)
    points = pipeline.indexed_points(steps.settings, steps.resources)
    # Read after the run's last store call (the count above).
    store_seconds = {
        work: seconds - store_before.get(work, 0.0)
        for work, seconds in steps.resources.store_seconds().items()
    }
    summary = RunSummary.build(
        spec=steps.spec,
        settings=steps.settings,
        mode=mode,
        listing=listing,
        plan=plan,
        outcome=outcome,
        deleted=deleted,
        started=started,
        deletion_refused=refused,
        points=points,
        optimize_seconds=optimized,
        store_seconds=store_seconds,
    )
    SourceLog.for_settings(steps.settings).record(
        summary.tenant_id,
        SourceSync(
            scope=summary.source,
            # the word the chunks carry (`file` for the `files` kind), so readers match
            # a scope's sync to the chunks they can see
            source_type=connector_class(steps.spec.kind, steps.settings.sources).source_type,
            targets=steps.spec.targets,
            last_sync=datetime.now().astimezone().isoformat(timespec="seconds"),
            status=summary.status,
            documents=summary.seen,
        ),
    )
    return summary


@dataclass(frozen=True)
class StepsHere:
    """The run's steps as the pipeline's own functions in this process, stopping where
    the flow has work to do: an incomplete listing (the flow retries and reports it) or
    documents to process."""

    spec: SourceSpec
    settings: Settings
    resources: Resources
    reconciler: None = None

    def discover(self) -> Listing | None:
        listing = pipeline.discover(self.spec, self.settings, self.resources)
        return listing if listing.complete else None

    def plan(self, listing: Listing, mode: Mode, since: datetime | None) -> Plan:
        return pipeline.plan(
            self.spec, self.settings, listing, self.resources, mode=mode, since=since
        )

    def process(self, plan: Plan) -> BatchOutcome | None:
        return None if plan.to_process else BatchOutcome()
