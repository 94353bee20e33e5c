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
at a time on each side. `expand="passage"` (docs/qdrant.md#passages) grows a hit into its
neighbours only up to `grow_tokens`. A hit grows only into chunks no better result holds;
a hit a better result already holds joins it. Hits of one document whose spans touch
become one result, ranked where the best of them ranked, while it stays within
`expand_tokens`. The results are made of the best `limit` hits (fewer results where hits
join), or with `tokens` of the best hits that fit that many tokens: a caller's context,
filled in rank order until the next hit would overflow it, passages not grown.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy

from chunking.record import ChunkPayload
from config.settings import SearchSettings
from indexing.embedders import Embedder
from indexing.lexical import LexicalEncoder, SparseWeights
from indexing.qdrant_store import (
    PartVectors,
    QdrantStore,
    ScoredPayload,
    SearchFilters,
    VectorQuery,
)
from indexing.store_schema import (
    DENSE,
    DENSE_PARTS,
    LEXICAL,
    REINDEX_ADVICE,
    SPARSE,
    CollectionSchema,
)

__all__ = [
    "ResultShape",
    "SearchFilters",
    "SearchHit",
    "expand_hits",
    "find_points",
    "search",
]

log = logging.getLogger(__name__)

SearchMode = Literal["auto", "hybrid", "dense", "lexical", "sparse"]
Expand = Literal["none", "passage", "neighbours", "section"]
DEFAULT_EXPAND_TOKENS = 1024
RRF_K = 2  # Qdrant's and qdrant-client's default
FIRST_RANKING_WEIGHT = 1.0001  # see _rrf

QueryVectors = Mapping[str, Sequence[float] | SparseWeights | PartVectors]


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
        chunk = ChunkPayload.of(payload)
        return cls(
            score=score,
            chunk_id=chunk.chunk_id,
            document_id=chunk.document_id,
            title=chunk.title,
            headings_path=list(chunk.headings_path),
            source=chunk.source,
            md_text=chunk.md_text,
            payload=payload,
        )

    @property
    def text(self) -> str:
        """The result's Markdown: the hit's text, or its whole span when expanded."""
        return joined_markdown(self.context) if self.context else self.md_text

    @property
    def tokens(self) -> int:
        chunks = self.context or (self.payload,)
        return sum(ChunkPayload.of(chunk).token_count for chunk in chunks)


@dataclass(frozen=True)
class ResultShape:
    """What a search's results are: `search`'s `expand`, `expand_tokens`, `grow_tokens`."""

    expand: Expand
    expand_tokens: int
    grow_tokens: int | None

    @classmethod
    def of(
        cls, settings: SearchSettings, expand: Expand | None = None, tokens: int | None = None
    ) -> ResultShape:
        """`expand` None: the `search.expand` setting; `tokens` None: `search.passage_tokens`
        for passages, DEFAULT_EXPAND_TOKENS for neighbours and sections."""
        chosen = expand or settings.expand
        if chosen == "passage":
            return cls(chosen, tokens or settings.passage_tokens, settings.passage_grow_tokens)
        return cls(chosen, tokens or DEFAULT_EXPAND_TOKENS, None)


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
    grow_tokens: int | None = None,
    tokens: int | None = None,
) -> list[SearchHit]:
    """The best `limit` chunks for `query` (with `tokens`, those of them that fit that many
    tokens), or with `expand` the `limit` results that the hits, in rank order, widen and
    join into. `lexical` is the encoder of the collection's lexical vector (None: lexical
    search is off); a lexical search needs no `embedder`. `grow_tokens` (None:
    `expand_tokens`) is how far a hit grows by itself."""
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
    # Twice the limit from the candidates the limit asked for would have, so that the
    # results left out as copies are made up for and the first results stay the same;
    # results that join hits take every candidate there is to make up their number.
    prefetch = max(prefetch_limit, limit)
    joining = expand != "none" and tokens is None
    points = find_points(
        store,
        vectors,
        limit=max(2 * limit, prefetch) if joining else 2 * limit,
        filters=filters,
        prefetch_limit=prefetch,
    )
    hits = _first_copies(SearchHit.of(point.payload, point.score) for point in points)
    if tokens is not None:
        hits = _fitting(hits[:limit], tokens)
        if expand == "passage":
            grow_tokens = 0  # the caller's context goes to the best hits
    if expand == "none":
        return hits[:limit]
    return expand_hits(store, hits, expand, expand_tokens, grow_tokens=grow_tokens, results=limit)


def _fitting(hits: Sequence[SearchHit], tokens: int) -> list[SearchHit]:
    """The best hits, in rank order, until the next would take their tokens past `tokens`."""
    taken: list[SearchHit] = []
    used = 0
    for hit in hits:
        used += hit.tokens
        if used > tokens:
            break
        taken.append(hit)
    return taken


def _first_copies(hits: Iterable[SearchHit]) -> list[SearchHit]:
    """The hits less each whose text is, whitespace and case aside, a better hit's of the
    same document: a passage a document repeats (a disclaimer, a report's recurring note)
    would spend a caller's results and context twice on the same words. Copies in other
    documents stay: each is a source of its own, and may be readable by other people."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for hit in hits:
        text = " ".join(hit.md_text.split()).casefold()
        key = (ChunkPayload.of(hit.payload).tenant_id, hit.document_id, text)
        if key not in seen:
            seen.add(key)
            kept.append(hit)
    return kept


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


# --- fusion ---------------------------------------------------------------------------


def find_points(
    store: QdrantStore,
    vectors: QueryVectors,
    *,
    limit: int,
    filters: SearchFilters | None = None,
    prefetch_limit: int = 40,
) -> list[ScoredPayload]:
    """Search by one named vector (`dense`, `dense_parts`, `sparse`, `lexical`), or by
    several fused with reciprocal rank fusion, each ranking `prefetch_limit` candidates
    (`limit` when larger): the candidates do not follow the limit, which only cuts the
    fused list, so the first k results are the same for every limit from k to
    `prefetch_limit`. A chunk's own vector and its parts' are two views of one model:
    beside other vectors they are fused first and count as one ranking, so the model does
    not outvote the lexical ranking two to one. The parts have no graph of their own: they
    rank, exactly by MaxSim, the candidates the other vectors found, a few dozen points,
    never the collection. Every vector is searched once, the filters inside each search;
    the payloads of the fused results are read by id."""
    if not vectors:
        raise ValueError("a query needs at least one vector")
    if len(vectors) == 1:
        ((using, vector),) = vectors.items()
        (alone,) = store.nearest(
            [VectorQuery(using, vector, limit)], filters=filters, with_payload=True
        )
        return alone
    candidates = max(prefetch_limit, limit)
    searched = [using for using in vectors if using != DENSE_PARTS]
    found = store.nearest(
        [VectorQuery(using, vectors[using], candidates) for using in searched], filters=filters
    )
    ranked = {
        using: [p.point_id for p in points] for using, points in zip(searched, found, strict=True)
    }
    if DENSE_PARTS in vectors:
        ranked[DENSE_PARTS] = _parts_ranking(
            store, vectors[DENSE_PARTS], ranked, candidates, filters
        )
    views = [ranked[name] for name in (DENSE, DENSE_PARTS) if name in ranked]
    others = [ranked[using] for using in ranked if using not in (DENSE, DENSE_PARTS)]
    if len(views) > 1 and others:
        rankings = [[p for p, _ in _rrf(views, candidates)], *others]
    else:
        rankings = list(ranked.values())
    fused = _rrf(rankings, limit)
    if not fused:
        return []
    payloads = store.payloads([point for point, _ in fused])
    return [
        ScoredPayload(point, score, payloads[point]) for point, score in fused if point in payloads
    ]


def _parts_ranking(
    store: QdrantStore,
    parts: Sequence[float] | SparseWeights | PartVectors,
    ranked: Mapping[str, Sequence[str]],
    candidates: int,
    filters: SearchFilters | None,
) -> list[str]:
    """The other vectors' candidates ranked by the parts' MaxSim."""
    among = list(dict.fromkeys(point for points in ranked.values() for point in points))
    if not among:
        return []
    (found,) = store.nearest([VectorQuery(DENSE_PARTS, parts, candidates, among)], filters=filters)
    return [point.point_id for point in found]


def _rrf(rankings: Sequence[Sequence[str]], limit: int) -> list[tuple[str, float]]:
    """Reciprocal rank fusion with Qdrant's own k and formula, in its single precision,
    so the scores are the ones the engine's fusion gives. Its scores tie often (one point
    first in one ranking, another first in the other): the first ranking (the model's)
    heavier by 0.01% breaks every tie its way and moves no score by more than that; the
    ties left keep the order the points were first ranked in."""
    one, k = numpy.float32(1.0), numpy.float32(RRF_K)
    scores: dict[str, numpy.float32] = {}
    for index, ranking in enumerate(rankings):
        weight = numpy.float32(FIRST_RANKING_WEIGHT if index == 0 else 1.0)
        for position, point in enumerate(ranking):
            score = one / (numpy.float32(position + 1) / weight + k - one)
            scores[point] = scores.get(point, numpy.float32(0.0)) + score
    ordered = sorted(scores.items(), key=lambda item: -item[1])
    return [(point, float(score)) for point, score in ordered[:limit]]


# --- expansion ------------------------------------------------------------------------


def expand_hits(
    store: QdrantStore,
    hits: Sequence[SearchHit],
    expand: Expand,
    max_tokens: int,
    *,
    grow_tokens: int | None = None,
    results: int | None = None,
) -> list[SearchHit]:
    """Each hit widened to its neighbours or section, in the order of the best hit of each
    result: a hit grows (up to `grow_tokens`, None: `max_tokens`) only into chunks no
    better result holds, a hit a better result holds joins it, and results of one
    document version that touch merge while they hold at most `max_tokens`. With
    `results`, the hits are taken in rank order until there are that many results (a hit
    that joins a better result does not make one of its own)."""
    grow = max_tokens if grow_tokens is None else min(grow_tokens, max_tokens)
    rank = {id(hit): position for position, hit in enumerate(hits)}
    shaped: list[_Result] = []
    for hit in hits:
        own = ChunkPayload.of(hit.payload)
        same = [r for r in shaped if r.key == own.version_key]
        holder = next((r for r in same if own.ordinal in r.chunks), None)
        taken = {ordinal for r in same for ordinal in r.chunks}
        whole = expand == "passage" and grow > 0
        small = own.token_count < grow
        found = _candidates(store, hit.payload, expand) if whole or small else {}
        block = _split_block(store, hit.payload, found, taken, max_tokens) if whole else None
        if block is None:
            room = {o: chunk for o, chunk in found.items() if o not in taken} if small else {}
            block = _grow(hit.payload, room, grow)
        merged = _Result(own.version_key, block, [hit])
        if holder is not None and _tokens({**holder.chunks, **merged.chunks}) > max_tokens:
            holder.hits.append(hit)  # held already; widening it would pass the limit
            continue
        for other in sorted(same, key=lambda r: r is not holder):  # the holder first
            if other.touches(merged) and _tokens({**merged.chunks, **other.chunks}) <= max_tokens:
                shaped.remove(other)
                merged = merged.absorb(other)
        merged.hits.sort(key=lambda h: rank[id(h)])
        shaped.append(merged)
        shaped.sort(key=lambda r: rank[id(r.hits[0])])
        if results is not None and len(shaped) == results:
            break
    return [result.as_hit(alone_bare=expand == "passage") for result in shaped]


def _split_block(
    store: QdrantStore,
    hit: dict[str, Any],
    neighbours: dict[int, dict[str, Any]],
    taken: set[int],
    max_tokens: int,
) -> dict[int, dict[str, Any]] | None:
    """The chunks of the blocks the hit shares with its `neighbours` and on (a paragraph,
    list or table the chunker split to fit its budget), when they hold at most
    `max_tokens` together and no better result holds one of them; None otherwise. A
    reader gets the block whole rather than the piece of it the search matched."""
    own = ChunkPayload.of(hit)
    if own.block_start_idx is None or not own.names_neighbours:
        return None
    run = {own.ordinal: hit}
    edges = {True: own, False: own}  # before the hit, after it
    ring = neighbours
    while edges:
        shares: dict[bool, ChunkPayload] = {}
        for before, edge in edges.items():
            chunk = ring.get(edge.ordinal - 1 if before else edge.ordinal + 1)
            other = ChunkPayload.of(chunk) if chunk is not None else None
            if other is None or not (edge.continues(other) if before else other.continues(edge)):
                continue
            if other.ordinal in taken:
                return None
            run[other.ordinal] = ring[other.ordinal]
            shares[before] = other
        if _tokens(run) > max_tokens:
            return None
        edges = shares
        following = [
            i
            for before, e in edges.items()
            if (i := e.prev_chunk_id if before else e.next_chunk_id)
        ]
        ring = _of_version(own, store.chunks_by_id(own.tenant_id, following)) if following else {}
    return run if len(run) > 1 else None


def _tokens(chunks: dict[int, dict[str, Any]]) -> int:
    return sum(ChunkPayload.of(chunk).token_count for chunk in chunks.values())


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

    def as_hit(self, alone_bare: bool) -> SearchHit:
        """The best hit, widened to the result's chunks (`alone_bare`: a result of the hit
        alone is the hit as search found it, not an expanded one)."""
        best = self.hits[0]
        if alone_bare and len(self.chunks) == 1:
            return best
        context = tuple(self.chunks[o] for o in sorted(self.chunks))
        paths = [list(ChunkPayload.of(chunk).headings_path) for chunk in context]
        return replace(
            best,
            headings_path=_common_prefix(paths),
            context=context,
            hits=tuple(hit.chunk_id for hit in self.hits),
        )


def _candidates(
    store: QdrantStore, hit: dict[str, Any], expand: Expand
) -> dict[int, dict[str, Any]]:
    """The chunks the hit may grow into, by ordinal (the same document version only)."""
    own = ChunkPayload.of(hit)
    tenant, document, version = own.version_key
    if expand == "section" and own.section_id:
        found = store.section_chunks(tenant, str(own.section_id))
    elif own.names_neighbours:
        found = store.chunks_by_id(tenant, own.neighbour_ids)
    else:  # points of an older chunker: no neighbour ids, the ordinals are contiguous
        found = store.document_chunks(tenant, document, version, own.ordinal - 1, own.ordinal + 1)
    return _of_version(own, found)


def _of_version(own: ChunkPayload, found: Sequence[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """The found chunks of `own`'s document version, by ordinal."""
    read = [(ChunkPayload.of(chunk), chunk) for chunk in found]
    return {other.ordinal: chunk for other, chunk in read if other.version_key == own.version_key}


def _grow(
    hit: dict[str, Any], candidates: dict[int, dict[str, Any]], max_tokens: int
) -> dict[int, dict[str, Any]]:
    """A contiguous run of candidates around the hit, one chunk at a time on each side
    (before, then after), while the run's tokens stay within `max_tokens`."""
    own = ChunkPayload.of(hit)
    run = {own.ordinal: hit}
    tokens = own.token_count
    first = last = own.ordinal
    grew = True
    while grew:
        grew = False
        for side in (first - 1, last + 1):
            chunk = candidates.get(side)
            size = ChunkPayload.of(chunk).token_count if chunk else 0
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
    rows go on). The pieces of a paragraph the chunker split read as that paragraph."""
    parts: list[str] = []
    previous: list[str] | None = None
    before: ChunkPayload | None = None
    in_effect: dict[int, str] = {}  # heading level -> the heading line the text is under
    for record in chunks:
        chunk = ChunkPayload.of(record)
        path = list(chunk.headings_path)
        goes_on = (
            before is not None
            and path == previous
            and chunk.chunk_type == before.chunk_type == "paragraph"
            and chunk.continues(before)
        )
        before = chunk
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
        text = chunk.md_text
        if parts:
            text = _without_carried_headings(text, _carried_length(chunk), in_effect)
        _note_headings(in_effect, text.split("\n"))
        table = _table_piece(text, chunk.table_header, parts[-1] if parts else "")
        if goes_on:
            parts[-1] += f" {text}"  # one paragraph again, as the document has it
        elif table.continues:
            parts[-1] += f"\n{table.rows}"
        else:
            parts.append(table.text)
    return "\n\n".join(parts)


def _carried_length(chunk: ChunkPayload) -> int:
    """How much of the chunk's Markdown is text from before its own span of the document
    (heading lines it repeats): its Markdown beyond the span's length."""
    own = chunk.char_end - chunk.char_start
    return max(0, len(chunk.md_text) - own) if own > 0 else 0


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
