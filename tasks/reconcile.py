"""Reconcile after a run's batches: delete the documents that vanished (gone at fetch,
or missing from a complete listing, within the connector's deletion scopes and the
mass-deletion guard), then bring incoming-link counts in payloads up to date."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DeletionScope, IdMigration, Listing, ScopedDeletion
from indexing.reconcile import MassDeletionRefused, delete_missing_documents
from indexing.reindex import drop_retired
from tasks.links import LinkStore
from tasks.outcome import BatchOutcome, cache_unwritable, failure_of
from tasks.plan import IndexedDocuments, SourceSpec
from tasks.resources import Resources
from tasks.state import SyncState

log = logging.getLogger(__name__)


def delete_missing(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    gone: Sequence[str],
    resources: Resources,
    *,
    force: bool,
) -> list[str]:
    """Documents that vanished: those fetch found gone, and, when the listing is complete,
    those indexed for this source but no longer listed (scoped by tenant and source)."""
    store = resources.store()
    if store.resolve() is None:
        return []
    deleted: list[str] = []
    if gone:
        store.delete_documents(settings.tenant_id, list(gone))
        deleted += gone
    gone_ids = set(gone)
    listed = [ref.document_id for ref in listing.refs if ref.document_id not in gone_ids]
    connector = spec.connector(resources)
    retired: frozenset[str] = frozenset()
    if isinstance(connector, IdMigration):
        view = IndexedDocuments(store, settings.tenant_id, connector.source_type)
        migration = connector.migrate_ids(view, set(listed))
        store.delete_documents(settings.tenant_id, list(migration.replaced))
        deleted += migration.replaced
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
    reconciler: Callable[..., list[str]] | None = None,
) -> tuple[list[str], bool]:
    """Reconcile after the run's batches (`reconciler`: `reconcile` or its Prefect task);
    a failure becomes a failure of the run in `outcome`, so the report still comes.
    Returns the deleted ids and whether a mass deletion was refused."""
    try:
        deleted = (reconciler or reconcile)(
            spec, settings, listing, outcome.gone, outcome.indexed, resources, force
        )
    except IngestError as exc:
        log.error("reconcile: %s", exc)
        outcome.failures.append(failure_of(spec.scope, exc))
        return [], isinstance(exc, MassDeletionRefused)
    return deleted, False


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
) -> list[str]:
    """Delete what vanished, then bring incoming-link counts in payloads up to date.
    Returns the deleted document ids."""
    try:
        deleted = delete_missing(spec, settings, listing, list(gone), resources, force=force)
        push_incoming_link_counts(settings, indexed, resources)
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.UPSERT_FAILED) from exc
    drop_retired(resources.store(), settings.qdrant.keep_old_days)
    return deleted


def push_incoming_link_counts(
    settings: Settings, indexed: Sequence[str], resources: Resources
) -> int:
    """Write `links_in` into the payload of every document whose incoming-link count
    changed since the last push, and of every document indexed this run (its fresh
    points do not have it yet). Returns how many documents were updated."""
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
    for count, document_ids in sorted(by_count.items()):
        store.set_documents_fields(settings.tenant_id, document_ids, {"links_in": count})
    links.save_pushed_counts(counts)
    links.clear_unpushed(sorted(set(indexed) | set(unpushed)))
    return len(targets)
