"""Discover and plan: a connector's complete listing, and which of its documents the
run processes (changed, new, or whose points are missing), which are unchanged and which
still fail on the same version (docs/sources.md#bad-input)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from config.errors import ConfigError, ErrorCode
from config.settings import Settings, env_name
from connectors.base import Connector, DocumentRef, IndexedCheck, LinkResolver, Listing
from connectors.registry import connector_class
from indexing.qdrant_store import QdrantStore
from indexing.store_schema import DENSE_PARTS, LEXICAL, REINDEX_ADVICE, CollectionSchema
from tasks.links import LinkStore
from tasks.outcome import DocumentWarning, Failure, cache_unwritable
from tasks.resources import Resources
from tasks.state import SyncState, pipeline_fingerprint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # a source kind (config/sources.py)
    targets: tuple[str, ...]  # what the kind reads: directories or globs, space keys, ...

    @property
    def scope(self) -> str:
        return f"{self.kind}:{','.join(sorted(self.targets))}"

    @classmethod
    def of(cls, kind: str, targets: Sequence[str] | None, settings: Settings) -> SourceSpec:
        """The run's source: the given targets, else those of the kind's targets setting
        (its connector class's `targets_setting`)."""
        setting = connector_class(kind, settings.sources).targets_setting
        chosen = tuple(targets or settings.value(setting) or ())
        if not chosen:
            raise ConfigError(
                f"no targets: pass targets or set {setting} "
                f"(in a worker's environment: {env_name(setting)})",
                setting=setting,
            )
        return cls(kind, chosen)

    def connector(self, resources: Resources) -> Connector:
        return resources.connector(self.kind, self.targets, self.scope)


@dataclass(frozen=True)
class Plan:
    listing: Listing
    to_process: tuple[DocumentRef, ...]
    unchanged: tuple[str, ...]
    still_failing: tuple[Failure, ...]
    new: frozenset[str]
    warnings: tuple[DocumentWarning, ...] = ()


def discover(spec: SourceSpec, settings: Settings, resources: Resources) -> Listing:
    connector = spec.connector(resources)
    listing = connector.list_refs()
    if isinstance(connector, LinkResolver):
        links = LinkStore(settings.cache.dir, settings.tenant_id)
        try:
            links.save_listing_index(spec.scope, connector.link_index())
        except OSError as exc:  # documents then fail on the same disk, each reported
            log.warning("%s", cache_unwritable(settings, exc, code=ErrorCode.CHUNKING_FAILED))
    return listing


def plan(
    spec: SourceSpec,
    settings: Settings,
    listing: Listing,
    resources: Resources,
    *,
    mode: Literal["incremental", "full"],
    since: datetime | None,
) -> Plan:
    state = SyncState.for_scope(settings, spec.scope)
    fingerprint = pipeline_fingerprint(settings)
    store = resources.store()
    ids = [ref.document_id for ref in listing.refs]
    indexed = store.existing_versions(settings.tenant_id, ids) if store.resolve() else {}
    connector = spec.connector(resources)
    if isinstance(connector, IndexedCheck) and store.resolve():
        connector.check_indexed(IndexedDocuments(store, settings.tenant_id, connector.source_type))
    since_iso = since.isoformat() if since else None
    process: list[DocumentRef] = []
    unchanged: list[str] = []
    failing: list[Failure] = []
    for ref in listing.refs:
        known = state.get(ref.document_id)
        same = known is not None and (known.version, known.fingerprint) == (
            ref.version,
            fingerprint,
        )
        recent = since_iso is not None and (ref.updated_at or "") >= since_iso
        if mode == "incremental" and same and not recent and known is not None:
            if known.error_code is not None:
                failing.append(
                    Failure(
                        ref.document_id,
                        known.error_code,
                        f"unchanged since it failed: {known.error_message}",
                    )
                )
                continue
            if indexed.get(ref.document_id, set()) <= {ref.version} and (
                ref.document_id in indexed or known.error_message == "no chunks"
            ):
                unchanged.append(ref.document_id)
                continue
        process.append(ref)
    new = frozenset(ref.document_id for ref in process if ref.document_id not in indexed)
    notes = _collection_notes(resources, writes=bool(process))
    return Plan(listing, tuple(process), tuple(unchanged), tuple(failing), new, notes)


def _collection_notes(resources: Resources, *, writes: bool) -> tuple[DocumentWarning, ...]:
    """What the run should say about its collection (docs/qdrant.md#schema-changes). A run that
    will write stops before any work when the collection cannot hold the embedder's vectors (another
    size or model); a collection that lacks a vector (made before `lexical` or
    `dense_parts` existed) is written and searched without it until re-indexed, which the
    report says."""
    store = resources.store()
    if store.resolve() is None:
        return ()
    held = store.describe()
    wanted = resources.schema(resources.embedder() if writes else None)
    if writes:
        held.refuse_conflicts(wanted, store.alias)
        if held.chunking_id != wanted.chunking_id:
            _chunking_in_place(store, held, wanted, resources.settings)
    lacks = held.lacks(wanted)
    notes = []
    if LEXICAL in lacks:
        notes.append(
            f"{lacks[LEXICAL]}: new points get the current settings' weights beside the old ones"
            if held.lexical  # made with other lexical settings
            else "no 'lexical' vector: searches are dense only and new points are written "
            "without it"
        )
    if DENSE_PARTS in lacks:
        notes.append(
            f"{lacks[DENSE_PARTS]}: new points get parts cut the current way beside the old ones"
            if held.parts
            else "no 'dense_parts' vector: chunks are scored by their own vector only and "
            "new points are written without parts"
        )
    return tuple(
        DocumentWarning(store.alias, f"the collection has {what}; {REINDEX_ADVICE}")
        for what in notes
    )


def _chunking_in_place(
    store: QdrantStore, held: CollectionSchema, wanted: CollectionSchema, settings: Settings
) -> None:
    """A run re-chunks the documents of changed chunking settings in place, and the
    collection records the new settings; with the gate on (`eval.questions`) such a
    change goes through `ingest reindex` instead, which can keep the alias where it is."""
    physical = store.resolve() or store.alias
    if held.chunking_changed(wanted) and settings.eval.questions is not None:
        what = (
            f"collection {physical!r} does not record the chunking settings it was built "
            "with (an earlier version made it)"
            if held.chunking_id is None
            else f"the chunking settings changed since collection {physical!r} was built"
        )
        raise ConfigError(
            f"{what} and eval.questions is set, so a run does not re-chunk it in place: "
            "run `ingest reindex` to build a collection with the current chunking and move "
            "the alias to it only if it is not worse on the questions",
            setting="chunking",
        )
    store.record(physical, chunking_id=wanted.chunking_id)


def batches(refs: Sequence[DocumentRef], size: int) -> list[tuple[DocumentRef, ...]]:
    return [tuple(refs[i : i + size]) for i in range(0, len(refs), size)]


@dataclass(frozen=True)
class IndexedDocuments:
    """The store's view of one tenant's documents of one source type, for connectors."""

    store: QdrantStore
    tenant_id: str
    source_type: str

    def field(self, name: str) -> dict[str, Any]:
        return self.store.document_field(self.tenant_id, name, source_type=self.source_type)

    def indexed(self, document_ids: Sequence[str]) -> set[str]:
        return set(self.store.existing_versions(self.tenant_id, document_ids))
