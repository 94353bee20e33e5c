"""Prepare a batch: fetch its documents, normalize and chunk each (every stage cached
by content hash), record their outgoing links. The chunks reach the index step through
the stage cache; the batch's result holds their keys. Legacy Office files the cache does
not hold yet are converted together before the batch is normalized (one LibreOffice
start for many files)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from config.errors import ErrorCode, IngestError
from config.limits import within_time_limit
from config.settings import Settings
from connectors.base import (
    Connector,
    DocumentGone,
    DocumentRef,
    HeadingCitation,
    LinkResolver,
    SourceDocument,
    fetch_many,
)
from normalizers import LegacyBatch, NormalizedDocument, PictureSetup, Upcoming, settled
from stage_cache.cached import JSON, Codec, cached
from stage_cache.keys import CacheKey, config_hash, sha256_hex, stage_key
from stage_cache.store import StageCache, json_bytes
from tasks.citations import document_url
from tasks.links import LinkStore, StoredLink
from tasks.outcome import (
    LINKS_SHOWN,
    BatchOutcome,
    DocumentLink,
    DocumentWarning,
    PreparedBatch,
    PreparedDocument,
    cache_unwritable,
    document_failure,
    failed_state,
    failure_of,
    report_progress,
    token_bin,
)
from tasks.plan import SourceSpec
from tasks.resources import Resources
from tasks.stages import (
    chunk_normalized,
    handoff_cache,
    normalize_config,
    normalize_input,
    normalize_source,
)
from tasks.state import (
    CHUNK_STAGE_VERSION,
    NORMALIZE_STAGE_VERSION,
    DocumentState,
    SyncState,
    pipeline_fingerprint,
)

V = TypeVar("V")


def prepare_batch(
    spec: SourceSpec,
    settings: Settings,
    refs: Sequence[DocumentRef],
    resources: Resources,
    *,
    force: bool = False,
) -> PreparedBatch:
    outcome = BatchOutcome(documents=len(refs))
    stages = _Stages(handoff_cache(settings), outcome, reuse=not force and settings.cache.enabled)
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
    # Each document's normalize key, hashed once: the legacy pre-conversion and the
    # normalize stage both look it up.
    config = config_hash(normalize_config(settings))
    keys = {
        i: _normalize_key(item, config)
        for i, item in enumerate(fetched)
        if isinstance(item, SourceDocument)
    }
    with LegacyBatch(settings.limits) as converted:
        started = time.perf_counter()
        converted.convert(
            Upcoming(item.data, item.filename, item.mime, item.format)
            for i, item in enumerate(fetched)
            if isinstance(item, SourceDocument) and not stages.holds(keys[i])
        )
        outcome.seconds["normalize"] += time.perf_counter() - started
        for i, (ref, item) in enumerate(zip(refs, fetched, strict=True)):
            try:
                if isinstance(item, IngestError):
                    if isinstance(item, DocumentGone):
                        outcome.gone.append(ref.document_id)
                        continue
                    outcome.failures.append(failure_of(ref.document_id, item))
                    if not item.transient:
                        failed_states[ref.document_id] = failed_state(ref, fingerprint, item)
                    continue
                outcome.stages["fetch"].done += 1
                try:
                    prepared.append(
                        _prepare_one(
                            item,
                            keys[i],
                            settings,
                            stages,
                            links,
                            resources.pictures(),
                            converted,
                        )
                    )
                except IngestError as exc:
                    outcome.failures.append(failure_of(ref.document_id, exc))
                    if not exc.transient:
                        failed_states[ref.document_id] = failed_state(ref, fingerprint, exc)
                except OSError as exc:  # the cache's disk (full, unwritable): retry next run
                    error = cache_unwritable(settings, exc, code=ErrorCode.CHUNKING_FAILED)
                    outcome.failures.append(failure_of(ref.document_id, error))
                except Exception as exc:  # a library broke on this document: it alone fails
                    crash = document_failure(ref.document_id, exc, ErrorCode.CHUNKING_FAILED)
                    outcome.failures.append(crash)
            finally:  # the bar moves per document, whatever became of it
                report_progress(1)
    if failed_states:
        state.update(failed_states)
    return PreparedBatch(outcome, prepared)


def _fetch_many(
    connector: Connector, refs: Sequence[DocumentRef]
) -> list[SourceDocument | IngestError]:
    """The connector's fetch; a crash of it fails the batch as a transient fetch failure."""
    try:
        return fetch_many(connector, refs)
    except IngestError:
        raise
    except Exception as exc:
        raise IngestError(
            ErrorCode.FETCH_FAILED, f"{type(exc).__name__}: {exc}", transient=True
        ) from exc


# The normalize stage's cache entry: the document's JSON form.
NORMALIZED = Codec(
    lambda document: json_bytes(document.to_json()),
    lambda data: NormalizedDocument.from_json(json.loads(data)),
    lambda document: settled(document.metadata),  # a picture's OCR timed out: not final
)


@dataclass(frozen=True)
class _Stages:
    """A batch's per-document stages through the cache, each counted cached or done and
    timed in its outcome; `reuse` false (a forced run) reads nothing but still writes,
    since prepared chunks reach the index step through the cache."""

    cache: StageCache
    outcome: BatchOutcome
    reuse: bool

    def run(
        self, stage: str, key: CacheKey, compute: Callable[[], V], codec: Codec[V]
    ) -> tuple[V, bool]:
        """The stage's value and whether it came from the cache."""
        started = time.perf_counter()
        value, hit = cached(self.cache, key, compute, codec, reuse=self.reuse)
        count = self.outcome.stages[stage]
        if hit:
            count.cached += 1
        else:
            count.done += 1
        self.outcome.seconds[stage] += time.perf_counter() - started
        return value, hit

    def holds(self, key: CacheKey) -> bool:
        """Whether `run` will read `key`'s value rather than compute it."""
        return self.reuse and self.cache.path(key).is_file()


def _normalize_key(source: SourceDocument, config: str) -> CacheKey:
    """The normalize stage's key of `source`; `config`: the hash of `normalize_config`."""
    return stage_key(
        "normalize", NORMALIZE_STAGE_VERSION, config, sha256_hex(normalize_input(source))
    )


def _normalized_entry_key(tenant_id: str, document_id: str) -> CacheKey:
    """Where the stage cache records which normalize entry a document's last run made
    (that entry is keyed by the source's bytes, which a reader of the index lacks)."""
    return stage_key("normalized-of", "1", tenant_id, sha256_hex(document_id))


def normalized_of(cache: StageCache, tenant_id: str, document_id: str) -> NormalizedDocument | None:
    """The normalized document the last run of `document_id` made, from the stage cache;
    None when the run predates this record or the cache was pruned."""
    entry = cache.get_json(_normalized_entry_key(tenant_id, document_id))
    if not isinstance(entry, dict):
        return None
    raw = cache.get(CacheKey("normalize", str(entry.get("normalize"))))
    return None if raw is None else NORMALIZED.decode(raw)


def _prepare_one(
    source: SourceDocument,
    normalize_key: CacheKey,
    settings: Settings,
    stages: _Stages,
    links: DocumentLinks,
    pictures: PictureSetup,
    converted: LegacyBatch,
) -> PreparedDocument:
    outcome = stages.outcome
    normalized, normalize_hit = stages.run(
        "normalize",
        normalize_key,
        lambda: within_time_limit(
            lambda: normalize_source(source, settings.limits, pictures, converted),
            settings.limits.document_timeout_s,
            what="normalizing",
            subject=source.ref.document_id,
            setting="limits.document_timeout_s",
        ),
        NORMALIZED,
    )
    if not normalize_hit:  # a cached document read its pictures in an earlier run
        outcome.pictures.add_document(normalized.metadata)
    stages.cache.put_json(
        _normalized_entry_key(settings.tenant_id, source.ref.document_id),
        {"version": source.ref.version, "normalize": normalize_key.digest},
    )
    outcome.warnings += [
        DocumentWarning(source.ref.document_id, w) for w in (*source.warnings, *normalized.warnings)
    ]
    links.store(source, normalized)
    source = _with_link_counts(source, normalized)
    chunk_key = _chunk_key(source, normalized, settings)
    citation = links.connector if isinstance(links.connector, HeadingCitation) else None
    records: list[dict[str, Any]]
    records, hit = stages.run(
        "chunk",
        chunk_key,
        lambda: [
            chunk.to_record()
            for chunk in chunk_normalized(
                source, normalized, settings.chunking, settings.tenant_id, citation
            ).chunks
        ],
        JSON,
    )
    if len(outcome.links) < LINKS_SHOWN:
        outcome.links.append(
            DocumentLink(source.ref.document_id, source.title, document_url(source))
        )
    outcome.chunks += len(records)
    chunked = outcome.chunk_stages["chunk"]
    if hit:
        chunked.cached += len(records)
    else:
        chunked.done += len(records)
    for record in records:
        outcome.token_histogram[token_bin(int(record["token_count"]))] += 1
    return PreparedDocument(
        source.ref.document_id,
        source.ref.version,
        chunk_key.digest,
        len(records),
        settled(normalized.metadata),
    )


def _chunk_key(
    source: SourceDocument, normalized: NormalizedDocument, settings: Settings
) -> CacheKey:
    """The chunk stage's key: the normalized text and anchors, everything known of the
    source but its bytes, the chunking settings and the tenant."""
    chunk_input = json.dumps(
        [normalized.markdown, normalized.anchor_rows(), _source_meta(source)],
        sort_keys=True,
        default=str,
    )
    return stage_key(
        "chunk",
        CHUNK_STAGE_VERSION,
        config_hash({"chunking": settings.chunking.model_dump(), "tenant": settings.tenant_id}),
        sha256_hex(chunk_input),
    )


@dataclass(frozen=True)
class DocumentLinks:
    """Where a batch's documents' outgoing links go, resolved to synced document ids where
    the connector resolves links against the latest listing of `scope` (docs/chunking.md#links)."""

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
    """Chunk payloads carry the document's outgoing link count (docs/chunking.md#links)."""
    if not normalized.links:
        return source
    metadata = {**source.metadata, "links_out": len(normalized.links)}
    return dataclasses.replace(source, metadata=metadata)


def _source_meta(source: SourceDocument) -> dict[str, Any]:
    meta = dataclasses.asdict(source)
    meta.pop("data")
    meta.pop("attachments")  # bytes: the normalized text holds what of them counts
    meta.pop("format")  # follows from the filename and MIME type, which the key holds
    return meta
