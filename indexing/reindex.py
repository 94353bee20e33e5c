"""Re-index without downtime (docs/qdrant.md#re-indexing): build a new physical collection for the
schema the settings make now (another model or vector size, the `lexical` vector added, BGE-M3's
sparse added), check it against the old one, then move the alias in one atomic step.

Where only the vectors change, nothing is fetched or normalized again: the chunk records
are the old points' payloads (`embed_text` put back from their own fields), and only the
vectors the new schema lacks are computed. Where the chunking settings changed (the
collection records them), each document's chunks are made anew by the caller's
`rechunk` (from the normalized text of the stage cache, or from the source where the
cache lost it), and the check before the move is by documents rather than point ids. A
`gate` may keep the alias where it is: the build then stays, recorded `building`, for
inspection or a forced move.

A dense vector is copied from the old point when the old collection records the same
model, else read from the embedding cache (a text embedded before by this model) or
embedded; lexical weights come from their cache or are encoded.

Crash-safe: until the alias moves, readers and runs use the old collection, which the
build never writes. The build's name follows from its schema and its metadata records
`state: building` and its source, so a re-run after a crash finds it and finishes it:
points missing or different are written, strays deleted. Before the move the build must
hold exactly the old collection's point ids and the same payloads on a sample (or, for
a chunking change, every document with all its new chunks). After it
the old collection is recorded `retired` and dropped once `qdrant.keep_old_days` have
passed (or at once with `drop_old`); abandoned builds are dropped too.

The same build moves a store from qdrant-client's local mode into Qdrant Edge: an Edge
store with nothing behind its alias takes the local-mode collection at the same path as
its source (its vectors copied where the model is the same), and the local-mode one is
recorded retired in its own store.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from chunking.chunker import compose_embed_text
from chunking.parts import PartSplitter
from chunking.record import Chunk
from config.errors import ConfigError, ErrorCode, IngestError
from indexing.embed_cache import embed_with_cache, lexical_with_cache, parts_with_cache
from indexing.embedders import Embedder, Embedding
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore, chunk_payload
from indexing.store_schema import DENSE, SPARSE, CollectionSchema
from stage_cache.store import StageCache

log = logging.getLogger(__name__)

PAGE = 256  # points read, computed and written at a time
SAMPLE = 64  # payloads compared between the old collection and the build


@dataclass(frozen=True)
class ReindexResult:
    source: str  # the physical collection the alias named before
    target: str  # the one it names now (the same when nothing had to change)
    points: int
    written: int  # points written into the build (fewer on a resumed build)
    embedded: int  # texts the embedder computed (cache misses)
    lexical_encoded: int
    moved: bool
    dropped: tuple[str, ...]
    # The source's engine: `local` when a local-mode store moved into Edge.
    source_engine: str = "edge"
    rechunked: bool = False  # the chunking changed: chunks made anew from the stage cache
    gate: dict[str, Any] | None = None  # what the promotion gate compared, where it ran


# A document's chunks made anew (the current chunking settings) from its points'
# payloads; the caller reads its normalized text from the stage cache.
Rechunk = Callable[[list[dict[str, Any]]], list[Chunk]]
# Runs before the alias moves from the collection (first) to the build (second): returns
# what it compared, or raises to keep the alias where it is.
Gate = Callable[[str, str], dict[str, Any]]


def build_name(alias: str, schema: CollectionSchema) -> str:
    """The build's name for a schema: the same on every re-run, another for another schema."""
    digest = hashlib.sha256(json.dumps(asdict(schema), sort_keys=True).encode()).hexdigest()
    return f"{alias}_{digest[:12]}"


def reindex(
    live: QdrantStore,
    embedder: Embedder,
    lexical: LexicalEncoder | None,
    cache: StageCache,
    *,
    target: str | None = None,
    drop_old: bool = False,
    keep_old_days: float = 7.0,
    progress: Callable[[int, int], None] | None = None,
    page_size: int = PAGE,
    parts: PartSplitter | None = None,
    rechunk: Rechunk | None = None,
    gate: Gate | None = None,
) -> ReindexResult:
    """Build the collection `live.schema` describes from the one behind `live`'s alias
    and move the alias to it. `cache` is the stage cache (embeddings, lexical weights,
    part vectors); `parts` splits chunks where the build holds `dense_parts`; `rechunk`
    makes a document's chunks anew where the chunking settings changed; `gate` decides
    whether the alias moves; `progress(done, total)` hears of every page written."""
    old = _source(live)
    try:
        return _reindex(
            live,
            old,
            _Encoders(embedder, lexical, parts, rechunk),
            cache,
            target,
            drop_old,
            keep_old_days,
            progress,
            page_size,
            gate,
        )
    finally:
        if old.connection is not live.connection:
            old.connection.close()


def _source(live: QdrantStore) -> QdrantStore:
    """The collection behind the alias; or, for an Edge store that has none yet, the
    local-mode collection at the same path (the store before Edge was the default)."""
    source = live.resolve()
    if source is not None and source != live.alias:
        return QdrantStore(live.connection, live.describe(source), collection=source)
    earlier = live.connection.earlier_store()
    if earlier is not None:
        local = QdrantConnection(earlier)
        reader = QdrantStore(local, live.schema)
        found = reader.resolve()
        if found is not None and found != live.alias:
            log.info("moving the local-mode collection %r into Qdrant Edge", found)
            return QdrantStore(local, reader.describe(found), collection=found)
        local.close()
    raise ConfigError(
        f"no collection behind the alias {live.alias!r} to re-index: run `ingest run` first",
        setting="qdrant.collection",
    )


def _reindex(
    live: QdrantStore,
    old: QdrantStore,
    encoders: _Encoders,
    cache: StageCache,
    target: str | None,
    drop_old: bool,
    keep_old_days: float,
    progress: Callable[[int, int], None] | None,
    page_size: int,
    gate: Gate | None,
) -> ReindexResult:
    source, held = old.collection, old.holds
    name = target or build_name(live.alias, live.schema)
    moving = old.connection is not live.connection
    # A move between engines copies the chunks as they are.
    rechunked = not moving and held.chunking_changed(live.schema)
    needed = moving or rechunked or held.conflicts(live.schema) or held.lacks(live.schema)
    if name == source or (target is None and not needed):
        dropped = drop_retired(live, keep_old_days)
        return ReindexResult(
            source, source, live.count(), 0, 0, 0, False, dropped, live.connection.engine
        )
    build = QdrantStore(live.connection, live.schema, collection=name)
    _open_build(build, source)
    if rechunked:
        if encoders.rechunk is None:
            raise ValueError("the chunking changed: a re-index needs `rechunk`")
        written, embedded, encoded, points = _rechunk_fill(old, build, encoders, cache, progress)
    else:
        written, embedded, encoded = _fill(old, build, encoders, cache, progress, page_size)
        old_ids = old.point_ids()
        build.delete_ids(sorted(build.point_ids() - old_ids))
        points = _verify(old, build, old_ids)
    # The gate searches both collections through one connection: not across engines.
    compared = gate(source, name) if gate is not None and not moving else None
    build.record(name, state="live")
    live.point_alias_at(name)
    old.record(source, state="retired", retired_at=datetime.now(UTC).isoformat())
    dropped = (source,) if drop_old else ()
    if drop_old:
        old.drop_collection(source)
    dropped += drop_retired(live, keep_old_days)
    return ReindexResult(
        source,
        name,
        points,
        written,
        embedded,
        encoded,
        True,
        dropped,
        old.connection.engine,
        rechunked,
        compared,
    )


def _open_build(build: QdrantStore, source: str) -> None:
    """Create the build, or take up one a crashed re-index (or an earlier alias move)
    left with the same schema."""
    name = build.collection
    if name not in build.collections():
        build.create_build(name, source)
        return
    recorded = build.recorded(name)
    if recorded.get("state") not in ("building", "retired"):
        raise ConfigError(
            f"collection {name!r} exists and is no re-index build: pass another --to NAME, "
            "or drop it",
            setting="qdrant.collection",
        )
    held = build.describe(name)
    unfit = [*held.conflicts(build.schema), *held.lacks(build.schema).values()]
    if unfit:
        raise ConfigError(
            f"collection {name!r} does not hold what the settings make now "
            f"({'; '.join(unfit)}): pass another --to NAME",
            setting="qdrant.collection",
        )
    build.record(name, state="building", source=source)
    build.holds = held


@dataclass(frozen=True)
class _Encoders:
    """What makes a build's points: its chunks (anew, where the chunking changed) and
    their vectors."""

    embedder: Embedder
    lexical: LexicalEncoder | None
    parts: PartSplitter | None
    rechunk: Rechunk | None = None


def _fill(
    old: QdrantStore,
    build: QdrantStore,
    encoders: _Encoders,
    cache: StageCache,
    progress: Callable[[int, int], None] | None,
    page_size: int,
) -> tuple[int, int, int]:
    """Write every point of `old` the build lacks or holds otherwise. Returns (points
    written, texts embedded, texts lexically encoded)."""
    total = old.count()
    copy_dense = old.holds.model_id is not None and old.holds.model_id == build.schema.model_id
    copy_sparse = copy_dense and (old.holds.sparse or not build.schema.sparse)
    written = embedded = encoded = done = 0
    for page in old.pages(page_size):
        present = build.payloads([str(record.id) for record in page])
        stale = [r for r in page if present.get(str(r.id)) != (r.payload or {})]
        if stale:
            chunks = [chunk_of_payload(record.payload or {}) for record in stale]
            if copy_sparse:
                embeddings = [_copied(record.vector, build.schema.sparse) for record in stale]
                counts = _write(build, chunks, encoders, cache, embeddings)
            else:
                counts = _write(build, chunks, encoders, cache)
            embedded, encoded = embedded + counts[0], encoded + counts[1]
            written += len(stale)
        done += len(page)
        if progress is not None:
            progress(done, total)
    return written, embedded, encoded


def _write(
    build: QdrantStore,
    chunks: list[Chunk],
    encoders: _Encoders,
    cache: StageCache,
    embeddings: list[Embedding] | None = None,
) -> tuple[int, int]:
    """Upsert `chunks` with their vectors (`embeddings` where copied, else from the cache
    or the embedder). Returns (texts embedded, texts lexically encoded)."""
    texts = [chunk.embed_text for chunk in chunks]
    embedded = encoded = 0
    if embeddings is None:
        result = embed_with_cache(encoders.embedder, texts, cache)
        embeddings, embedded = result.values, result.misses
    weights = None
    if build.holds.lexical and encoders.lexical is not None:
        found = lexical_with_cache(encoders.lexical, texts, cache)
        weights, encoded = found.values, found.misses
    part_vectors = None
    if build.holds.parts and encoders.parts is not None:
        found_parts = parts_with_cache(encoders.embedder, encoders.parts, chunks, cache)
        part_vectors, embedded = found_parts.values, embedded + found_parts.misses
    build.upsert(chunks, embeddings, weights, part_vectors)
    return embedded, encoded


def _rechunk_fill(
    old: QdrantStore,
    build: QdrantStore,
    encoders: _Encoders,
    cache: StageCache,
    progress: Callable[[int, int], None] | None,
) -> tuple[int, int, int, int]:
    """Write every document of `old` chunked anew, one document at a time (those the
    build already holds as they are now are left); delete what else the build holds;
    verify by documents. Returns (points written, texts embedded, texts lexically
    encoded, points)."""
    assert encoders.rechunk is not None
    documents = old.document_points()
    expected: dict[str, list[Chunk]] = {}
    written = embedded = encoded = 0
    for done, (document_id, points) in enumerate(sorted(documents.items()), 1):
        chunks = encoders.rechunk(list(old.payloads(sorted(points)).values()))
        expected[document_id] = chunks
        present = build.payloads([chunk.point_id for chunk in chunks])
        stale = [c for c in chunks if present.get(c.point_id) != chunk_payload(c)]
        if stale:
            counts = _write(build, stale, encoders, cache)
            embedded, encoded = embedded + counts[0], encoded + counts[1]
            written += len(stale)
        if progress is not None:
            progress(done, len(documents))
    wanted = {chunk.point_id for chunks in expected.values() for chunk in chunks}
    build.delete_ids(sorted(build.point_ids() - wanted))
    _verify_documents(old, build, expected)
    return written, embedded, encoded, len(wanted)


def chunk_of_payload(payload: dict[str, Any]) -> Chunk:
    """The chunk record a point's payload holds, with the embed_text it was left without."""
    embed_text = compose_embed_text(
        payload.get("title"),
        payload.get("headings_path") or [],
        str(payload.get("overlap_prefix") or ""),
        str(payload.get("md_text") or ""),
    )
    return Chunk.from_record({**payload, "embed_text": embed_text})


def _copied(vector: Any, sparse: bool) -> Embedding:
    """The old point's vectors, its BGE-M3 sparse ones only where the build has them."""
    named = vector if isinstance(vector, dict) else {}
    weights = named.get(SPARSE) if sparse else None
    return Embedding(
        dense=list(named[DENSE]),
        sparse=dict(zip(weights.indices, weights.values, strict=True)) if weights else None,
    )


def _verify(old: QdrantStore, build: QdrantStore, old_ids: set[str]) -> int:
    """The build holds exactly the old point ids and, on a sample, the same payloads;
    else the old collection changed meanwhile (a run wrote to it) and a re-run finishes."""
    ids = sorted(old_ids)
    built = build.point_ids()
    if built != set(ids):
        raise _changed(f"{len(ids)} points in the old collection, {len(built)} in the build")
    step = max(1, len(ids) // SAMPLE)
    sample = ids[::step][:SAMPLE]
    before, after = old.payloads(sample), build.payloads(sample)
    differ = [point for point in sample if before.get(point) != after.get(point)]
    if differ:
        raise _changed(f"{len(differ)} of {len(sample)} sampled payloads differ")
    return len(ids)


def _verify_documents(
    old: QdrantStore, build: QdrantStore, expected: dict[str, list[Chunk]]
) -> None:
    """The chunks differ, so the check is by documents: every document of the old
    collection is in the build with every chunk made for it, and the payloads of a sample
    are those chunks' records."""
    held = build.document_points()
    gone = sorted(set(old.document_points()) - set(held))
    if gone:
        raise _changed(f"{len(gone)} documents of the old collection are not in the build")
    short = [d for d, chunks in expected.items() if {c.point_id for c in chunks} - set(held[d])]
    if short:
        raise _changed(f"{len(short)} documents lack chunks in the build ({short[0]}, ...)")
    chunks = [chunk for listed in expected.values() for chunk in listed]
    sample = chunks[:: max(1, len(chunks) // SAMPLE)][:SAMPLE]
    found = build.payloads([chunk.point_id for chunk in sample])
    differ = [c for c in sample if found.get(c.point_id) != chunk_payload(c)]
    if differ:
        raise _changed(f"{len(differ)} of {len(sample)} sampled payloads differ")


def _changed(what: str) -> IngestError:
    return IngestError(
        ErrorCode.UPSERT_FAILED,
        f"the re-index build does not match the old collection ({what}): it changed during "
        "the re-index (a run wrote to it?); the alias was not moved: run `ingest reindex` "
        "again to finish",
        subject="reindex",
        transient=True,
    )


def drop_retired(live: QdrantStore, keep_old_days: float) -> tuple[str, ...]:
    """Drop what re-indexing left behind the alias: collections retired more than
    `keep_old_days` ago, and builds of a source the alias no longer names. Collections
    without this project's records are never touched, nor anything before the alias
    names a collection."""
    current = live.resolve()
    if current is None:
        return ()
    now = datetime.now(UTC)
    dropped: list[str] = []
    for name in live.collections():
        if name == current or not name.startswith(f"{live.alias}_"):
            continue
        recorded = live.recorded(name)
        retired_at = _when(recorded.get("retired_at"))
        expired = (
            recorded.get("state") == "retired"
            and retired_at is not None
            and now - retired_at >= timedelta(days=keep_old_days)
        )
        abandoned = recorded.get("state") == "building" and recorded.get("source") != current
        if expired or abandoned:
            live.drop_collection(name)
            dropped.append(name)
    if dropped:
        log.info("dropped collections left by re-indexing: %s", ", ".join(dropped))
    return tuple(dropped)


def _when(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
