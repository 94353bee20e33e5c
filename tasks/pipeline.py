"""The ingest pipeline's work, as plain functions over batches of documents.

discover (a connector's complete listing) -> plan (which documents changed) ->
prepare_batch (fetch, normalize, chunk; each stage cached by content hash) ->
index_batch (embed only unseen texts, upsert only missing points, drop other versions) ->
delete_missing (documents gone from a complete listing). The Prefect tasks in
`tasks.prefect_tasks` wrap these; nothing here imports Prefect, so the same code is
measured without orchestration and called by the CLI.

Results stay small (ids, counts, cache keys): chunks travel through the stage cache.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from chunking.record import Chunk
from config.errors import ConfigError, ErrorCode, IngestError
from config.limits import within_time_limit
from config.settings import Settings
from connectors.base import (
    Connector,
    DeletionScope,
    DocumentGone,
    DocumentRef,
    HeadingCitation,
    IdMigration,
    IndexedCheck,
    LinkResolver,
    Listing,
    ScopedDeletion,
    SourceDocument,
)
from connectors.registry import check_source, connector_class
from indexing.embedders import Embedder, Embedding
from indexing.qdrant_store import LEXICAL, REINDEX_ADVICE, QdrantStore
from indexing.reconcile import (
    DocumentChunks,
    MassDeletionRefused,
    delete_missing_documents,
    sync_documents,
)
from indexing.reindex import ReindexResult, drop_retired, reindex
from normalizers.base import NormalizedDocument
from stage_cache.keys import CacheKey, config_hash, sha256_hex, stage_key
from stage_cache.store import StageCache
from tasks.citations import document_url
from tasks.links import LinkStore, StoredLink
from tasks.resources import Resources
from tasks.stages import chunk_normalized, normalize_input, normalize_source
from tasks.state import (
    CHUNK_STAGE_VERSION,
    NORMALIZE_STAGE_VERSION,
    DocumentState,
    SyncState,
    pipeline_fingerprint,
)

STAGES = ("fetch", "normalize", "chunk", "embed", "upsert")
TOKEN_BINS = ((0, 49), (50, 149), (150, 300), (301, 600), (601, 10**9))


# Progress of a run as DEBUG records (`progress_total`, `progress_done` in their extra):
# the CLI's progress bar listens in the same process; deployments report through artifacts.
progress = logging.getLogger("ingest.progress")


def progress_start(total: int) -> None:
    progress.debug("%d documents to process", total, extra={"progress_total": total})


def report_progress(documents: int) -> None:
    progress.debug("%d documents processed", documents, extra={"progress_done": documents})


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # a source kind of connectors.registry
    targets: tuple[str, ...]  # directories/globs, Confluence space keys, ...

    @property
    def scope(self) -> str:
        return f"{self.kind}:{','.join(sorted(self.targets))}"

    @classmethod
    def of(cls, kind: str, targets: Sequence[str] | None, settings: Settings) -> SourceSpec:
        """The run's source: the given targets, else those of the kind's targets setting
        (`confluence.spaces`, `files.paths`)."""
        check_source(kind, settings.sources)
        setting = connector_class(kind, settings.sources).targets_setting
        configured: Any = settings
        for part in setting.split("."):
            configured = getattr(configured, part, None)
        chosen = tuple(targets or configured or ())
        if not chosen:
            raise ConfigError(f"no targets: pass targets or set {setting}", setting=setting)
        return cls(kind, chosen)

    def connector(self, resources: Resources) -> Connector:
        return resources.connector(self.kind, self.targets, self.scope)


@dataclass(frozen=True)
class Failure:
    document_id: str
    code: str
    message: str
    transient: bool = False


@dataclass(frozen=True)
class DocumentWarning:
    """Something the run report should say about a document that was indexed anyway, e.g.
    which fallback reader converted it; or, under the run's scope as `document_id`, about
    the source (`Listing.notes`)."""

    document_id: str
    message: str


@dataclass(frozen=True)
class DocumentLink:
    """A document a run prepared and where a reader finds it (its page, its file)."""

    document_id: str
    title: str | None
    url: str | None


# How many prepared documents a run's report links to.
LINKS_SHOWN = 20


@dataclass
class StageCount:
    done: int = 0
    cached: int = 0


@dataclass
class BatchOutcome:
    """What one batch did: counts, failures, time per stage; merged into the run summary."""

    documents: int = 0
    stages: dict[str, StageCount] = field(default_factory=lambda: {s: StageCount() for s in STAGES})
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    failures: list[Failure] = field(default_factory=list)
    warnings: list[DocumentWarning] = field(default_factory=list)
    links: list[DocumentLink] = field(default_factory=list)  # the first LINKS_SHOWN
    gone: list[str] = field(default_factory=list)
    indexed: list[str] = field(default_factory=list)  # documents whose points were synced
    chunks: int = 0
    token_histogram: Counter[str] = field(default_factory=Counter)

    def merge(self, other: BatchOutcome) -> None:
        self.documents += other.documents
        self.indexed += other.indexed
        for stage in STAGES:
            self.stages[stage].done += other.stages[stage].done
            self.stages[stage].cached += other.stages[stage].cached
            self.seconds[stage] += other.seconds[stage]
        self.failures += other.failures
        self.warnings += other.warnings
        self.links = (self.links + other.links)[:LINKS_SHOWN]
        self.gone += other.gone
        self.chunks += other.chunks
        self.token_histogram.update(other.token_histogram)


@dataclass(frozen=True)
class PreparedDocument:
    document_id: str
    version: str
    chunk_key: str  # stage-cache digest of the chunk records
    chunks: int


@dataclass
class PreparedBatch:
    outcome: BatchOutcome
    documents: list[PreparedDocument]


@dataclass(frozen=True)
class Plan:
    listing: Listing
    to_process: tuple[DocumentRef, ...]
    unchanged: tuple[str, ...]
    still_failing: tuple[Failure, ...]
    new: frozenset[str]
    warnings: tuple[DocumentWarning, ...] = ()


log = logging.getLogger(__name__)

# --- embedder ------------------------------------------------------------------------


class _TimedEmbedder:
    """The embedder, with the time spent embedding counted (the rest of a sync is
    cache lookups, upserts and deletes)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.vector_size = inner.vector_size
        self.has_sparse = inner.has_sparse
        self.seconds = 0.0

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        except IngestError:
            raise
        except Exception as exc:  # the model broke on this batch: report, keep old points
            raise IngestError(ErrorCode.EMBED_FAILED, f"{type(exc).__name__}: {exc}") from exc
        finally:
            self.seconds += time.perf_counter() - started


def cache_unwritable(settings: Settings, exc: OSError, *, code: ErrorCode) -> IngestError:
    """A write to the cache directory failed (disk full, permissions): transient, so the
    documents are retried by the next run once there is room."""
    return IngestError(
        code,
        f"the cache directory {settings.cache.dir} cannot be written: {exc.strerror or exc}",
        subject=str(exc.filename or settings.cache.dir),
        transient=True,
    )


def handoff_cache(settings: Settings) -> StageCache:
    """The stage cache. Always written, because prepared chunks reach the index step
    through it; `cache.enabled: false` only stops results from being reused."""
    return StageCache(settings.cache.dir, fsync=settings.cache.fsync)


# --- discover and plan ----------------------------------------------------------------


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
    """What the run should say about its collection (SPEC §4.2). A run that will write
    stops before any work when the collection cannot hold the embedder's vectors (another
    size or model); a collection that lacks a vector (made before `lexical` existed) is
    written and searched without it until re-indexed, which the report says."""
    store = resources.store()
    if store.resolve() is None:
        return ()
    held = store.describe()
    wanted = resources.schema(resources.embedder() if writes else None)
    conflicts = held.conflicts(wanted) if writes else []
    if conflicts:
        raise ConfigError(
            f"collection {store.alias!r} cannot hold {conflicts[0]}: {REINDEX_ADVICE}",
            setting="qdrant.collection",
        )
    lexical = held.lacks(wanted).get(LEXICAL)
    if lexical is None:
        return ()
    if held.lexical:  # made with other lexical settings
        what = f"{lexical}: new points get the current settings' weights beside the old ones"
    else:
        what = "no 'lexical' vector: searches are dense only and new points are written without it"
    return (DocumentWarning(store.alias, f"the collection has {what}; {REINDEX_ADVICE}"),)


def batches(refs: Sequence[DocumentRef], size: int) -> list[tuple[DocumentRef, ...]]:
    return [tuple(refs[i : i + size]) for i in range(0, len(refs), size)]


# --- prepare: fetch, normalize, chunk ----------------------------------------------------


def prepare_batch(
    spec: SourceSpec,
    settings: Settings,
    refs: Sequence[DocumentRef],
    resources: Resources,
    *,
    force: bool = False,
) -> PreparedBatch:
    outcome = BatchOutcome(documents=len(refs))
    cache = handoff_cache(settings)
    force = force or not settings.cache.enabled
    state = SyncState.for_scope(settings, spec.scope)
    fingerprint = pipeline_fingerprint(settings)
    connector = spec.connector(resources)
    links = DocumentLinks(
        LinkStore(settings.cache.dir, settings.tenant_id), spec.scope, connector, resources
    )
    started = time.perf_counter()
    fetched = _fetch_many(connector, refs)
    outcome.seconds["fetch"] += time.perf_counter() - started
    prepared: list[PreparedDocument] = []
    failed_states: dict[str, DocumentState] = {}
    for ref, item in zip(refs, fetched, strict=True):
        if isinstance(item, IngestError):
            if isinstance(item, DocumentGone):
                outcome.gone.append(ref.document_id)
                continue
            outcome.failures.append(_failure(ref.document_id, item))
            if not item.transient:
                failed_states[ref.document_id] = _failed_state(ref, fingerprint, item)
            continue
        outcome.stages["fetch"].done += 1
        try:
            prepared.append(_prepare_one(item, settings, cache, outcome, force=force, links=links))
        except IngestError as exc:
            outcome.failures.append(_failure(ref.document_id, exc))
            if not exc.transient:
                failed_states[ref.document_id] = _failed_state(ref, fingerprint, exc)
        except OSError as exc:  # the cache's disk (full, unwritable): retry on the next run
            error = cache_unwritable(settings, exc, code=ErrorCode.CHUNKING_FAILED)
            outcome.failures.append(_failure(ref.document_id, error))
    if failed_states:
        state.update(failed_states)
    return PreparedBatch(outcome, prepared)


def _fetch_many(
    connector: Connector, refs: Sequence[DocumentRef]
) -> list[SourceDocument | IngestError]:
    """The connector's fetch; a crash of it fails the batch as a transient fetch failure."""
    try:
        return connector.fetch_many(list(refs))
    except IngestError:
        raise
    except Exception as exc:
        raise IngestError(
            ErrorCode.FETCH_FAILED, f"{type(exc).__name__}: {exc}", transient=True
        ) from exc


def _prepare_one(
    source: SourceDocument,
    settings: Settings,
    cache: StageCache,
    outcome: BatchOutcome,
    *,
    force: bool,
    links: DocumentLinks,
) -> PreparedDocument:
    started = time.perf_counter()
    key = stage_key(
        "normalize",
        NORMALIZE_STAGE_VERSION,
        config_hash(settings.limits),
        sha256_hex(normalize_input(source)),
    )
    cached = None if force else cache.get_json(key)
    if cached is not None:
        normalized = NormalizedDocument.from_json(cached)
        outcome.stages["normalize"].cached += 1
    else:
        normalized = within_time_limit(
            lambda: normalize_source(source, settings.limits),
            settings.limits.document_timeout_s,
            what="normalizing",
            subject=source.ref.document_id,
            setting="limits.document_timeout_s",
        )
        cache.put_json(key, normalized.to_json())
        outcome.stages["normalize"].done += 1
    outcome.seconds["normalize"] += time.perf_counter() - started
    outcome.warnings += [
        DocumentWarning(source.ref.document_id, w) for w in (*source.warnings, *normalized.warnings)
    ]

    started = time.perf_counter()
    links.store(source, normalized)
    source = _with_link_counts(source, normalized)
    chunk_input = sha256_hex(
        json.dumps(
            [normalized.markdown, normalized.to_json()["anchors"], _source_meta(source)],
            sort_keys=True,
            default=str,
        )
    )
    chunk_key = stage_key(
        "chunk",
        CHUNK_STAGE_VERSION,
        config_hash({"chunking": settings.chunking.model_dump(), "tenant": settings.tenant_id}),
        chunk_input,
    )
    records = None if force else cache.get_json(chunk_key)
    if records is not None:
        outcome.stages["chunk"].cached += 1
    else:
        citation = links.connector if isinstance(links.connector, HeadingCitation) else None
        document = chunk_normalized(
            source, normalized, settings.chunking, settings.tenant_id, citation
        )
        records = [c.to_record() for c in document.chunks]
        cache.put_json(chunk_key, records)
        outcome.stages["chunk"].done += 1
    outcome.seconds["chunk"] += time.perf_counter() - started
    if len(outcome.links) < LINKS_SHOWN:
        outcome.links.append(
            DocumentLink(source.ref.document_id, source.title, document_url(source))
        )
    outcome.chunks += len(records)
    for record in records:
        outcome.token_histogram[_token_bin(int(record["token_count"]))] += 1
    return PreparedDocument(
        source.ref.document_id, source.ref.version, chunk_key.digest, len(records)
    )


@dataclass(frozen=True)
class DocumentLinks:
    """Where a batch's documents' outgoing links go, resolved to synced document ids where
    the connector resolves links against the latest listing of `scope` (SPEC §3.8)."""

    links: LinkStore
    scope: str
    connector: Connector
    resources: Resources

    def store(self, source: SourceDocument, normalized: NormalizedDocument) -> None:
        targets: list[str | None] = [None] * len(normalized.links)
        if isinstance(self.connector, LinkResolver) and normalized.links:
            saved = self.links.listing_index(self.scope)
            resolve = self.resources.link_resolution(self.connector, saved)
            targets = resolve(normalized.links, source)
        self.links.put(
            source.ref.document_id,
            [
                StoredLink(link.target_url, link.link_type, target, link.text)
                for link, target in zip(normalized.links, targets, strict=True)
            ],
        )


def _with_link_counts(source: SourceDocument, normalized: NormalizedDocument) -> SourceDocument:
    """Chunk payloads carry the document's outgoing link count (SPEC §3.8 ranking boosts)."""
    if not normalized.links:
        return source
    extra = {**source.extra, "links_out": len(normalized.links)}
    return dataclasses.replace(source, extra=extra)


def _source_meta(source: SourceDocument) -> dict[str, Any]:
    meta = dataclasses.asdict(source)
    meta.pop("data")
    meta.pop("format")  # follows from the filename and MIME type, which the key holds
    return meta


# --- index: embed, upsert, drop other versions ----------------------------------------


def index_batch(
    spec: SourceSpec,
    settings: Settings,
    documents: Sequence[PreparedDocument],
    resources: Resources,
    *,
    force: bool = False,
) -> BatchOutcome:
    """Raises a transient IngestError (Qdrant or the embedder unavailable) for retry."""
    outcome = BatchOutcome()
    if not documents:
        return outcome
    cache = handoff_cache(settings)
    embedder = resources.embedder()
    store = resources.store(embedder)
    batch: list[DocumentChunks] = []
    for document in documents:
        records = cache.get_json(CacheKey("chunk", document.chunk_key))
        if records is None:
            raise IngestError(
                ErrorCode.UPSERT_FAILED,
                "the chunks prepared for this document left the cache before indexing",
                subject=document.document_id,
                transient=True,
            )
        chunks = [Chunk.from_record(r) for r in records]
        batch.append(DocumentChunks(document.document_id, document.version, chunks))
    try:
        return _sync(spec, settings, resources, store, embedder, batch, force=force)
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.EMBED_FAILED) from exc


def _sync(
    spec: SourceSpec,
    settings: Settings,
    resources: Resources,
    store: QdrantStore,
    embedder: Embedder,
    batch: Sequence[DocumentChunks],
    *,
    force: bool,
) -> BatchOutcome:
    outcome = BatchOutcome()
    # links_in is pushed after indexing; until then these documents' points lack it
    LinkStore(settings.cache.dir, settings.tenant_id).mark_unpushed([d.document_id for d in batch])
    started = time.perf_counter()
    embed_cache = StageCache(
        settings.cache.dir, enabled=settings.cache.enabled and not force, fsync=settings.cache.fsync
    )
    timed = _TimedEmbedder(embedder)
    result = sync_documents(
        store, timed, embed_cache, settings.tenant_id, batch, lexical=resources.lexical()
    )
    elapsed = time.perf_counter() - started
    outcome.seconds["embed"] += timed.seconds
    outcome.seconds["upsert"] += elapsed - timed.seconds
    outcome.stages["embed"] = StageCount(done=result.embedded, cached=result.embed_cache_hits)
    outcome.stages["upsert"] = StageCount(
        done=result.documents_written, cached=result.documents_unchanged
    )
    outcome.indexed = [d.document_id for d in batch]
    fingerprint = pipeline_fingerprint(settings)
    SyncState.for_scope(settings, spec.scope).update(
        {
            d.document_id: DocumentState(
                d.source_version_id, fingerprint, None, "no chunks" if not d.chunks else None
            )
            for d in batch
        }
    )
    return outcome


# --- reconcile deletions ------------------------------------------------------------------


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
    listed = [ref.document_id for ref in listing.refs if ref.document_id not in set(gone)]
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
            space_key=scope.space_key,
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
        outcome.failures.append(Failure(spec.scope, exc.code.value, exc.message, exc.transient))
        return [], isinstance(exc, MassDeletionRefused)
    return deleted, False


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
    store = resources.store()
    if store.resolve() is not None:
        drop_retired(store, settings.qdrant.keep_old_days)
    return deleted


def reindex_collection(
    settings: Settings,
    resources: Resources,
    *,
    target: str | None = None,
    drop_old: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ReindexResult:
    """Build the collection the settings make now from the one behind the alias (stage
    cache and old points; nothing fetched or chunked) and move the alias to it (SPEC
    §4.2). Nothing to do when the collection already holds what the settings make."""
    embedder = resources.embedder()
    try:
        return reindex(
            resources.store(embedder, check=False),
            embedder,
            resources.lexical(),
            handoff_cache(settings),
            target=target,
            drop_old=drop_old,
            keep_old_days=settings.qdrant.keep_old_days,
            progress=progress,
        )
    except OSError as exc:
        raise cache_unwritable(settings, exc, code=ErrorCode.EMBED_FAILED) from exc


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


# --- helpers ------------------------------------------------------------------------------


def _failure(document_id: str, error: IngestError) -> Failure:
    return Failure(document_id, error.code.value, error.message, error.transient)


def _failed_state(ref: DocumentRef, fingerprint: str, error: IngestError) -> DocumentState:
    return DocumentState(ref.version, fingerprint, error.code.value, error.message)


def _token_bin(tokens: int) -> str:
    for low, high in TOKEN_BINS:
        if low <= tokens <= high:
            return f"{low}-{high}" if high < 10**9 else f">{low - 1}"
    return "?"
