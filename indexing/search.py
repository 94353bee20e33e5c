"""Query the index (docs/qdrant.md#search), and optionally widen each hit to
its context (docs/qdrant.md#expanding-a-hit).

Modes: `dense` (the embedder's vectors: each chunk's own and, where the collection holds
`dense_parts`, its parts' by MaxSim, fused by RRF), `lexical` (contextual BM25: the query's terms,
IDF from the collection), `sparse` (BGE-M3's learned weights), `hybrid` (each of those the
collection holds as a prefetch with the filters inside it, fused by reciprocal rank
fusion), `auto` (hybrid when the collection holds a lexical or sparse vector, else
dense). A collection without `lexical` (made before it existed) is searched without it,
said once with the command that adds it.

`expand="neighbours"` widens a hit to the chunks before and after it (their ids are in the
hit's `prev_chunk_id`/`next_chunk_id`: a lookup by point id; points without them, written
by an older chunker, are looked up by `document_id` + `ordinal`); `expand="section"` to
the chunks of its section (`section_id`, a payload-index lookup on a server). Either stops
growing at `expand_tokens` (chunk `token_count`s, the hit always kept), growing one chunk
at a time on each side. Hits of one document whose spans overlap or touch become one
result, ranked where the best of them ranked.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from indexing.embedders import Embedder
from indexing.lexical import LexicalEncoder, SparseWeights
from indexing.qdrant_store import PartVectors, QdrantStore, SearchFilters
from indexing.store_schema import (
    DENSE,
    DENSE_PARTS,
    LEXICAL,
    REINDEX_ADVICE,
    SPARSE,
    CollectionSchema,
)

__all__ = ["SearchFilters", "SearchHit", "expand_hits", "search"]

log = logging.getLogger(__name__)

SearchMode = Literal["auto", "hybrid", "dense", "lexical", "sparse"]
Expand = Literal["none", "neighbours", "section"]
DEFAULT_EXPAND_TOKENS = 1024


@dataclass(frozen=True)
class SearchHit:
    score: float
    chunk_id: str
    document_id: str
    title: str | None
    headings_path: list[str]
    source: str | None  # the page URL or the file path
    md_text: str
    payload: dict[str, Any]
    # Expanded: the chunk payloads this result spans, in document order (the hit among
    # them), and the chunk ids of every hit merged into it, best first.
    context: tuple[dict[str, Any], ...] = ()
    hits: tuple[str, ...] = ()

    @classmethod
    def of(cls, payload: dict[str, Any], score: float = 0.0) -> SearchHit:
        """The hit of one point's payload."""
        return cls(
            score=score,
            chunk_id=str(payload.get("chunk_id", "")),
            document_id=str(payload.get("document_id", "")),
            title=payload.get("title"),
            headings_path=list(payload.get("headings_path") or []),
            source=payload.get("source_url") or payload.get("file_path"),
            md_text=str(payload.get("md_text", "")),
            payload=payload,
        )

    @property
    def text(self) -> str:
        """The result's Markdown: the hit's text, or its whole span when expanded."""
        return joined_markdown(self.context) if self.context else self.md_text

    @property
    def tokens(self) -> int:
        chunks = self.context or (self.payload,)
        return sum(int(chunk.get("token_count") or 0) for chunk in chunks)


class SearchUnavailable(ValueError):
    """The mode asked for cannot run on this collection or query; the message says why."""


def search(
    store: QdrantStore,
    embedder: Embedder | None,
    query: str,
    limit: int = 10,
    filters: SearchFilters | None = None,
    *,
    mode: SearchMode = "auto",
    lexical: LexicalEncoder | None = None,
    prefetch_limit: int = 40,
    expand: Expand = "none",
    expand_tokens: int = DEFAULT_EXPAND_TOKENS,
) -> list[SearchHit]:
    """The best `limit` chunks for `query` (fewer when expanded hits merge). `lexical` is
    the encoder of the collection's lexical vector (None: lexical search is off); a
    lexical search needs no `embedder`."""
    held = store.describe()
    if lexical is not None and not held.lexical and "lexical" not in store.connection.warned:
        store.connection.warned.add("lexical")
        log.warning(
            "collection %r has no lexical vector: searching without it; %s",
            store.collection,
            REINDEX_ADVICE,
        )
    names = _vectors_for(mode, held, embedder, lexical)
    vectors = _query_vectors(names, query, embedder, lexical)
    if not vectors:
        raise SearchUnavailable(
            "the query has no terms the lexical index can match (only stop words or "
            "punctuation): rephrase it, or search with --mode dense"
        )
    points = store.query(vectors, limit=limit, filters=filters, prefetch_limit=prefetch_limit)
    hits = [SearchHit.of(point.payload, point.score) for point in points]
    return hits if expand == "none" else expand_hits(store, hits, expand, expand_tokens)


def _vectors_for(
    mode: SearchMode,
    held: CollectionSchema,
    embedder: Embedder | None,
    lexical: LexicalEncoder | None,
) -> tuple[str, ...]:
    """The named vectors a mode searches on this collection."""
    can = {
        DENSE: held.vector_size > 0 and embedder is not None,
        DENSE_PARTS: held.parts and embedder is not None,
        LEXICAL: held.lexical and lexical is not None,
        SPARSE: held.sparse and embedder is not None and embedder.has_sparse,
    }
    if mode in ("auto", "hybrid"):
        chosen = tuple(name for name in (DENSE, DENSE_PARTS, LEXICAL, SPARSE) if can[name])
        if mode == "hybrid" and not (can[LEXICAL] or can[SPARSE]):
            raise SearchUnavailable(
                "hybrid search needs the lexical or sparse vector beside dense, and the "
                f"collection has neither: {REINDEX_ADVICE}"
            )
        return chosen
    if not can[mode]:
        why = (
            "lexical.enabled is off"
            if mode == LEXICAL and lexical is None
            else f"the collection has no {mode!r} vector: {REINDEX_ADVICE}"
        )
        raise SearchUnavailable(f"{mode} search is not available: {why}")
    if mode == DENSE and can[DENSE_PARTS]:
        return (DENSE, DENSE_PARTS)  # a chunk scored by its own vector and its best part
    return (mode,)


def _query_vectors(
    names: Sequence[str], query: str, embedder: Embedder | None, lexical: LexicalEncoder | None
) -> dict[str, Sequence[float] | SparseWeights | PartVectors]:
    """The query as each named vector; a sparse one without terms is left out."""
    vectors: dict[str, Sequence[float] | SparseWeights | PartVectors] = {}
    if embedder is not None and (DENSE in names or SPARSE in names):
        embedding = embedder.embed([query])[0]
        if DENSE in names:
            vectors[DENSE] = embedding.dense
        if DENSE_PARTS in names:
            vectors[DENSE_PARTS] = [embedding.dense]  # MaxSim of the query against each part
        if SPARSE in names and embedding.sparse:
            vectors[SPARSE] = embedding.sparse
    if LEXICAL in names and lexical is not None:
        terms = lexical.encode_query(query)
        if terms:
            vectors[LEXICAL] = terms
    return vectors


# --- expansion ------------------------------------------------------------------------


def expand_hits(
    store: QdrantStore, hits: Sequence[SearchHit], expand: Expand, max_tokens: int
) -> list[SearchHit]:
    """Each hit widened to its neighbours or section (at most `max_tokens`), hits of one
    document version whose spans overlap or touch merged; in the order of their best hit."""
    rank = {id(hit): position for position, hit in enumerate(hits)}
    results: list[_Result] = []
    for hit in hits:
        key = _version_key(hit.payload)
        span = _grow(hit.payload, _candidates(store, hit.payload, expand), max_tokens)
        merged = _Result(key, span, [hit])
        for other in [r for r in results if r.key == key and r.touches(merged)]:
            results.remove(other)
            merged = merged.absorb(other)
        merged.hits.sort(key=lambda h: rank[id(h)])
        results.append(merged)
        results.sort(key=lambda r: rank[id(r.hits[0])])
    return [result.as_hit() for result in results]


@dataclass
class _Result:
    key: tuple[str, str, str]  # tenant, document, version
    chunks: dict[int, dict[str, Any]]  # ordinal -> payload, contiguous
    hits: list[SearchHit]

    @property
    def span(self) -> range:
        return range(min(self.chunks), max(self.chunks) + 1)

    def touches(self, other: _Result) -> bool:
        return self.span.start <= other.span.stop and other.span.start <= self.span.stop

    def absorb(self, other: _Result) -> _Result:
        """One result with the chunks and hits of both."""
        return _Result(self.key, {**self.chunks, **other.chunks}, self.hits + other.hits)

    def as_hit(self) -> SearchHit:
        best = self.hits[0]
        context = tuple(self.chunks[o] for o in sorted(self.chunks))
        paths = [list(chunk.get("headings_path") or []) for chunk in context]
        return replace(
            best,
            headings_path=_common_prefix(paths),
            context=context,
            hits=tuple(hit.chunk_id for hit in self.hits),
        )


def _version_key(payload: dict[str, Any]) -> tuple[str, str, str]:
    return (
        str(payload.get("tenant_id", "")),
        str(payload.get("document_id", "")),
        str(payload.get("source_version_id", "")),
    )


def _candidates(
    store: QdrantStore, hit: dict[str, Any], expand: Expand
) -> dict[int, dict[str, Any]]:
    """The chunks the hit may grow into, by ordinal (the same document version only)."""
    tenant, document, version = _version_key(hit)
    ordinal = int(hit.get("ordinal", 0))
    if expand == "section" and hit.get("section_id"):
        found = store.section_chunks(tenant, str(hit["section_id"]))
    elif "prev_chunk_id" in hit or "next_chunk_id" in hit:
        ids = [str(hit[k]) for k in ("prev_chunk_id", "next_chunk_id") if hit.get(k)]
        found = store.chunks_by_id(tenant, ids)
    else:  # points of an older chunker: no neighbour ids, the ordinals are contiguous
        found = store.document_chunks(tenant, document, version, ordinal - 1, ordinal + 1)
    same = [chunk for chunk in found if _version_key(chunk) == (tenant, document, version)]
    return {int(chunk["ordinal"]): chunk for chunk in same}


def _grow(
    hit: dict[str, Any], candidates: dict[int, dict[str, Any]], max_tokens: int
) -> dict[int, dict[str, Any]]:
    """A contiguous run of candidates around the hit, one chunk at a time on each side
    (before, then after), while the run's tokens stay within `max_tokens`."""
    ordinal = int(hit.get("ordinal", 0))
    run = {ordinal: hit}
    tokens = int(hit.get("token_count") or 0)
    first = last = ordinal
    grew = True
    while grew:
        grew = False
        for side in (first - 1, last + 1):
            chunk = candidates.get(side)
            size = int(chunk.get("token_count") or 0) if chunk else 0
            if chunk is not None and tokens + size <= max_tokens:
                run[side] = chunk
                tokens += size
                first, last = min(first, side), max(last, side)
                grew = True
    return run


def _common_prefix(paths: Sequence[list[str]]) -> list[str]:
    prefix = list(paths[0]) if paths else []
    for path in paths[1:]:
        while path[: len(prefix)] != prefix:
            prefix.pop()
    return prefix


def joined_markdown(chunks: Sequence[dict[str, Any]]) -> str:
    """Chunks of one document in order as one Markdown text: where the headings path
    changes between two chunks, the new headings come back as heading lines (a chunk's
    own `md_text` holds none, docs/chunking.md#sections); a table piece whose header stayed in the
    first piece gets it back from `table_header`. What a chunk repeats from the one before it is
    left out: the heading lines it carries from before its own span (a split section's
    heading), and the header of a table the text before it already holds (the table's
    rows go on)."""
    parts: list[str] = []
    previous: list[str] | None = None
    in_effect: dict[int, str] = {}  # heading level -> the heading line the text is under
    for chunk in chunks:
        path = list(chunk.get("headings_path") or [])
        if previous is not None and path != previous:
            same = 0
            while same < min(len(path), len(previous)) and path[same] == previous[same]:
                same += 1
            for level in range(same, len(path)):
                line = f"{'#' * (level + 1)} {path[level]}"
                if in_effect.get(level + 1) != line:  # not where a chunk's heading put it
                    parts.append(line)
                    _note_headings(in_effect, [line])
        previous = path
        text = str(chunk.get("md_text", ""))
        if parts:
            text = _without_carried_headings(text, _carried_length(chunk), in_effect)
        _note_headings(in_effect, text.split("\n"))
        table = _table_piece(text, chunk.get("table_header"), parts[-1] if parts else "")
        if table.continues:
            parts[-1] += f"\n{table.rows}"
        else:
            parts.append(table.text)
    return "\n\n".join(parts)


def _carried_length(chunk: dict[str, Any]) -> int:
    """How much of the chunk's Markdown is text from before its own span of the document
    (heading lines it repeats): its Markdown beyond the span's length."""
    own = int(chunk.get("char_end") or 0) - int(chunk.get("char_start") or 0)
    return max(0, len(str(chunk.get("md_text", ""))) - own) if own > 0 else 0


def _heading_level(line: str) -> int:
    marks = len(line) - len(line.lstrip("#"))
    return marks if 0 < marks <= 6 and line[marks : marks + 1] == " " else 0


def _note_headings(in_effect: dict[int, str], lines: Sequence[str]) -> None:
    for line in lines:
        level = _heading_level(line)
        if level:
            for deeper in [k for k in in_effect if k >= level]:
                del in_effect[deeper]
            in_effect[level] = line


def _without_carried_headings(text: str, carried: int, in_effect: dict[int, str]) -> str:
    """`text` without its leading heading lines, within its first `carried` characters,
    that the text before it is already under."""
    lines = text.split("\n")
    cut = 0
    for line in lines:
        if cut + len(line) > carried:
            break
        if line.strip() and in_effect.get(_heading_level(line)) != line:
            break
        cut += len(line) + 1
    return text[cut:] if cut else text


_DELIMITER_ROW = re.compile(r"\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?\s*)?")


@dataclass(frozen=True)
class _TablePiece:
    text: str  # the chunk's text, its table header in full
    rows: str  # the text without its header rows
    continues: bool  # the text before it ends in the same table


def _table_piece(text: str, recorded: str | None, before: str) -> _TablePiece:
    """A table piece's text with the full header (`table_header` where it holds only a
    shortened one, or none), and whether it continues the table `before` ends in."""
    lines = text.split("\n")
    own = "\n".join(lines[:2]) if len(lines) > 2 and _DELIMITER_ROW.fullmatch(lines[1]) else ""
    rows = "\n".join(lines[2:]) if own else text
    header = recorded or own
    if header and header == _ending_table_header(before):
        return _TablePiece(text, rows, continues=True)
    return _TablePiece(f"{header}\n{rows}" if recorded else text, rows, continues=False)


def _ending_table_header(text: str) -> str:
    """The header and delimiter rows of the table `text` ends in, "" when it ends in none."""
    lines = text.split("\n")
    start = len(lines)
    while start and lines[start - 1].startswith("|"):
        start -= 1
    table = lines[start:]
    if len(table) < 2 or not _DELIMITER_ROW.fullmatch(table[1]):
        return ""
    return "\n".join(table[:2])
