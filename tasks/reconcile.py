"""Reconcile after a run's batches: delete the documents that vanished (gone at fetch,
or missing from a complete listing, within the connector's deletion scopes and the
mass-deletion guard), then bring incoming-link counts in payloads up to date.

Both write many documents at once; a write that fails for a reason that is not transient
is made again one document at a time (`DocumentWrites`), so only the documents it fails
for are reported and every other one is reconciled."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DeletionScope, IdMigration, Listing, ScopedDeletion
from indexing.reconcile import MassDeletionRefused, delete_missing_documents
from indexing.reindex import drop_retired
from tasks.links import LinkStore
from tasks.outcome import (
    BatchOutcome,
    Failure,
    cache_unwritable,
    document_failure,
    failure_of,
    is_transient,
)
from tasks.plan import IndexedDocuments, SourceSpec
from tasks.resources import Resources
from tasks.state import SyncState

log = logging.getLogger(__name__)


@dataclass
class DocumentWrites:
    """Writes of many documents at once, each kept to the documents it fails for: a write
    that fails for a reason that is not transient is made again document by document,
    and the documents it still fails for are `failures`, with their own error."""

    code: ErrorCode = ErrorCode.UPSERT_FAILED  # what a crash of a write is reported as
    failures: list[Failure] = field(default_factory=list)

    def each(self, document_ids: Sequence[str], write: Callable[[list[str]], object]) -> list[str]:
        """Calls `write` with `document_ids`; returns those it succeeded for."""
        try:
            write(list(document_ids))
            return list(document_ids)
        except Exception as exc:
            if is_transient(exc):
                raise
            if len(document_ids) == 1:
                self.failures.append(document_failure(document_ids[0], exc, self.code))
                return []
        return [done for one in document_ids for done in self.each([one], write)]


@dataclass(frozen=True)
class Reconciled:
    """The documents a reconcile deleted, and those it could not reconcile."""

    deleted: list[str]
    failures: list[Failure]


def delete_missing(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    gone: Sequence[str],
    resources: Resources,
    *,
    force: bool,
    writes: DocumentWrites,
) -> list[str]:
    """Documents that vanished: those fetch found gone, and, when the listing is complete,
    those indexed for this source but no longer listed (scoped by tenant and source).
    A document a deletion fails for goes to `writes`' failures."""
    store = resources.store()
    if store.resolve() is None:
        return []

    def delete(document_ids: Sequence[str]) -> list[str]:
        return writes.each(
            document_ids, lambda some: store.delete_documents(settings.tenant_id, some)
        )

    deleted: list[str] = []
    if gone:
        deleted += delete(gone)
    gone_ids = set(gone)
    listed = [ref.document_id for ref in listing.refs if ref.document_id not in gone_ids]
    connector = spec.connector(resources)
    retired: frozenset[str] = frozenset()
    if isinstance(connector, IdMigration):
        view = IndexedDocuments(store, settings.tenant_id, connector.source_type)
        migration = connector.migrate_ids(view, set(listed))
        deleted += delete(migration.replaced)
        retired = migration.retired
    scopes = (
        connector.deletion_scopes(retired)
        if isinstance(connector, ScopedDeletion)
        else [DeletionScope(connector.source_type)]
    )
    for scope in scopes:
        deleted += delete_missing_documents(
            store,
            settings.tenant_id,
            listed,
            listing_complete=listing.complete,
            max_delete_share=settings.reconcile.max_delete_share,
            force=force,
            source_type=scope.source_type,
            container=scope.container,
            owned=scope.owns,
            delete=delete,
        )
    if deleted:
        SyncState.for_scope(settings, spec.scope).forget(deleted)
        LinkStore(settings.cache.dir, settings.tenant_id).remove(deleted)
    return deleted


def reconcile_into(
    outcome: BatchOutcome,
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    resources: Resources,
    force: bool,
    reconciler: Callable[..., Reconciled] | None = None,
) -> tuple[list[str], bool]:
    """Reconcile after the run's batches (`reconciler`: `reconcile` or its Prefect task);
    a failure becomes a failure of the run in `outcome`, so the report still comes.
    Returns the deleted ids and whether a mass deletion was refused."""
    try:
        reconciled = (reconciler or reconcile)(
            spec, settings, listing, outcome.gone, outcome.indexed, resources, force
        )
    except IngestError as exc:
        log.error("reconcile: %s", exc)
        outcome.failures.append(failure_of(spec.scope, exc))
        return [], isinstance(exc, MassDeletionRefused)
    outcome.failures += reconciled.failures
    return reconciled.deleted, False


def indexed_points(settings: Settings, resources: Resources) -> int | None:
    """How many points of the run's tenant the collection holds after the run (a re-run
    prepares no chunks, and its report still says what the index has); None where there
    is no collection yet or Qdrant cannot answer now."""
    try:
        store = resources.store()
        return store.count(settings.tenant_id) if store.resolve() is not None else None
    except IngestError:  # e.g. another process holds the local storage
        return None


def optimize_index(resources: Resources) -> float | None:
    """Build the search index where the store leaves that to the end of a run (Edge, past
    `qdrant.optimize_threshold` unindexed vectors): the seconds it took, or None. A
    failure costs only speed (search stays exact), so it is logged, not failed on."""
    try:
        store = resources.store()
        return store.optimize() if store.resolve() is not None else None
    except IngestError as exc:
        log.warning("building the search index failed (searches stay exact): %s", exc)
        return None


def reconcile(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    gone: Sequence[str],
    indexed: Sequence[str],
    resources: Resources,
    force: bool = False,
) -> Reconciled:
    """Delete what vanished, then bring incoming-link counts in payloads up to date. A
    document either fails for is reported alone, and the others are reconciled."""
    writes = DocumentWrites()
    try:
        deleted = delete_missing(
            spec, settings, listing, list(gone), resources, force=force, writes=writes
        )
        push_incoming_link_counts(settings, indexed, resources, writes)
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.UPSERT_FAILED) from exc
    drop_retired(resources.store(), settings.qdrant.keep_old_days)
    return Reconciled(deleted, writes.failures)


def push_incoming_link_counts(
    settings: Settings,
    indexed: Sequence[str],
    resources: Resources,
    writes: DocumentWrites,
) -> int:
    """Write `links_in` into the payload of every document whose incoming-link count
    changed since the last push, and of every document indexed this run (its fresh
    points do not have it yet). Returns how many documents were updated; a document the
    update fails for goes to `writes`' failures and is pushed again by the next run."""
    links = LinkStore(settings.cache.dir, settings.tenant_id)
    counts = links.incoming_counts()
    pushed = links.pushed_counts()
    changed = {d for d in counts.keys() | pushed.keys() if counts.get(d, 0) != pushed.get(d, 0)}
    store = resources.store()
    if store.resolve() is None:
        return 0
    unpushed = links.unpushed()  # indexed by a run that ended before its push
    targets = sorted(changed | set(indexed) | set(unpushed))
    # One update per distinct count: a handful of filtered writes, whatever the size.
    by_count: dict[int, list[str]] = {}
    for document_id in targets:
        by_count.setdefault(counts.get(document_id, 0), []).append(document_id)
    failed: list[str] = []
    for count, document_ids in sorted(by_count.items()):

        def push(some: list[str], count: int = count) -> None:
            store.set_documents_fields(settings.tenant_id, some, {"links_in": count})

        done = writes.each(document_ids, push)
        failed += sorted(set(document_ids) - set(done))
    links.save_pushed_counts(counts)
    links.mark_unpushed(failed)  # the next run pushes them whatever the counts say
    links.clear_unpushed(sorted((set(indexed) | set(unpushed)) - set(failed)))
    return len(targets) - len(failed)
