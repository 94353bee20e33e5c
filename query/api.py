"""The one way to read the index: `ingest search`, `ingest mcp` and the LangChain and
LlamaIndex retrievers all open an `Index` and call it, so they search the same way
(`indexing.search`: hybrid where the collection allows, filters inside every prefetch)
under the same access rules.

Access is an `Identity` (a user, groups), or `PUBLIC` (no identity: only points whose
`acl.public` is true), or None (no access filter: the operator's view `ingest search`
gives without `--user`/`--group`). Readers that serve someone else (an agent, an app)
pass an identity or PUBLIC, never None.

No Prefect here: only a settings Secret block (the Qdrant API key) imports it, lazily.
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from chunking.record import CONTAINER_FIELD, ChunkPayload
from config.settings import Settings, load_settings
from indexing.handles import IndexHandles
from indexing.qdrant_store import QdrantStore, SearchFilters
from indexing.search import (
    DEFAULT_EXPAND_TOKENS,
    Expand,
    ResultShape,
    SearchHit,
    SearchMode,
    SearchUnavailable,
    expand_hits,
    joined_markdown,
    search,
)
from markdown_text.context import context_header
from query.identity import PUBLIC, Identity
from stage_cache.sync_log import SourceLog, SourceSync

__all__ = [
    "PUBLIC",
    "Hit",
    "Identity",
    "Index",
    "IndexMissing",
    "SearchUnavailable",
    "SourceInfo",
]

FetchExpand = Literal["none", "neighbours", "section", "document"]
_CHUNK_ID = re.compile(r"[0-9a-f]{64}")


class IndexMissing(LookupError):
    """The configured collection does not exist yet; the message says what to run."""


@dataclass(frozen=True)
class Hit:
    """One result: a chunk, or the span of chunks it was widened to."""

    chunk_id: str
    document_id: str
    score: float
    text: str  # the chunk's Markdown, or the whole span's when expanded
    title: str | None
    breadcrumbs: tuple[str, ...]  # where the document lives: space, ancestors, page
    headings_path: tuple[str, ...]  # where the chunk lives in the document
    citation_url: str | None  # the deep link to where the chunk starts
    source: str | None  # the page URL or the file path
    source_type: str | None
    container: str | None  # the Confluence space, where there is one
    labels: tuple[str, ...]
    updated_at: str | None
    tokens: int
    prev_chunk_id: str | None
    next_chunk_id: str | None
    # Expanded: the chunk ids of the span in document order, and of every hit merged
    # into it, best first.
    span: tuple[str, ...] = ()
    hits: tuple[str, ...] = ()
    payload: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    context: tuple[dict[str, Any], ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def of(cls, hit: SearchHit) -> Hit:
        chunk = ChunkPayload.of(hit.payload)
        return cls(
            chunk_id=hit.chunk_id,
            document_id=hit.document_id,
            score=hit.score,
            text=hit.text,
            title=hit.title,
            breadcrumbs=chunk.breadcrumbs,
            headings_path=tuple(hit.headings_path),
            citation_url=chunk.citation_url or hit.source,
            source=hit.source,
            source_type=chunk.source_type,
            container=chunk.container,
            labels=chunk.labels,
            updated_at=chunk.updated_at,
            tokens=hit.tokens,
            prev_chunk_id=chunk.prev_chunk_id,
            next_chunk_id=chunk.next_chunk_id,
            span=tuple(ChunkPayload.of(spanned).chunk_id for spanned in hit.context),
            hits=hit.hits,
            payload=hit.payload,
            context=hit.context,
        )

    def metadata(self) -> dict[str, Any]:
        """The few fields a RAG app cites and filters by (the retrievers' metadata)."""
        return {
            "title": self.title,
            "citation_url": self.citation_url,
            "breadcrumbs": list(self.breadcrumbs),
            "headings_path": list(self.headings_path),
            "document_id": self.document_id,
            "chunk_id": self.chunk_id,
            "score": self.score,
            "source_type": self.source_type,
        }

    @property
    def heading(self) -> str:
        """`title > heading > heading`, the title left out where the first heading
        repeats it (the chunker's context line)."""
        return context_header(self.title or self.document_id, self.headings_path)


@dataclass(frozen=True)
class SourceInfo:
    """A kind of source the reader can see: its chunks, its containers (spaces) with
    theirs, and the last sync of each of its runs' scopes."""

    source_type: str
    chunks: int
    containers: dict[str, int]
    syncs: tuple[SourceSync, ...]


class Index:
    """The collection the settings name, opened for reading. Close it (or use it as a
    context manager): an embedded store holds a file lock while it is open.

    An embedded store is open in one process at a time, so a reader that stays up (an
    MCP server, an app's retriever) must not keep it while idle: it lets the store go
    `qdrant.idle_release_s` after its last query ended and opens it again at the next
    one (waiting up to `qdrant.lock_wait_s` while a run holds it). The model stays
    loaded."""

    def __init__(
        self,
        settings: Settings,
        *,
        resources: IndexHandles | None = None,
        collection: str | None = None,
    ) -> None:
        """`resources`: a caller's open ones (its store connection: an embedded store
        opens once per process), left open by `close`; `collection`: read this physical
        collection rather than the one behind the alias (a re-index build, before the
        alias names it)."""
        self.settings = settings
        self._owned = resources is None
        self._resources = resources or IndexHandles(settings)
        self._collection = collection
        self._reading = threading.Lock()
        self._queries = 0  # queries under way
        self._release: threading.Timer | None = None

    @classmethod
    def open(cls, config_file: str | Path | None = None) -> Index:
        """Settings as every command reads them: `config_file` (else `INGEST_CONFIG`)
        over the defaults, then `INGEST_` environment variables."""
        return cls(load_settings(config_file=config_file))

    def __enter__(self) -> Index:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        with self._reading:
            if self._release is not None:
                self._release.cancel()
                self._release = None
        if self._owned:
            self._resources.close()

    @contextmanager
    def _query(self) -> Iterator[None]:
        """One query: the store stays open while any is under way, and is let go when
        none has come for `qdrant.idle_release_s` (an embedded store only: a server's
        connection has no lock to give back)."""
        with self._reading:
            self._queries += 1
            if self._release is not None:
                self._release.cancel()
                self._release = None
        try:
            yield
        finally:
            with self._reading:
                self._queries -= 1
                if not self._queries and not self.settings.qdrant.url and self._owned:
                    self._release = threading.Timer(
                        self.settings.qdrant.idle_release_s, self._release_when_idle
                    )
                    self._release.daemon = True
                    self._release.start()

    def _release_when_idle(self) -> None:
        with self._reading:
            # a timer cancelled after it fired, or a query under way, keeps the store
            if self._queries or threading.current_thread() is not self._release:
                return
            self._release = None
            self._resources.release_store()

    def store(self) -> QdrantStore:
        """The store, refusing a collection that does not exist yet. Counted as a
        query: an embedded store is let go when no other comes within
        `qdrant.idle_release_s`."""
        with self._query():
            return self._store()

    def _store(self) -> QdrantStore:
        store = self._resources.store()
        if self._collection is not None:
            held = store.describe(self._collection)
            return QdrantStore(store.connection, held, collection=self._collection)
        if store.resolve() is None:
            store.refuse_over_local_mode()
            raise IndexMissing(
                f"no collection {self.settings.qdrant.collection!r} yet: run `ingest run` first"
            )
        return store

    def warm_up(self) -> None:
        """Open what a query needs (the store, the lexical vocabulary, the embedding model)
        and run one search through it, so a server's first question is answered as fast
        as the next: loading the model takes seconds."""
        # SearchUnavailable: the mode cannot answer this text, yet it loaded all it needs
        with contextlib.suppress(SearchUnavailable):
            self.search("warm up", limit=1)

    def filters(
        self,
        identity: Identity | None,
        *,
        tenant: str | None = None,
        containers: Sequence[str] = (),
        labels: Sequence[str] = (),
    ) -> SearchFilters:
        return SearchFilters(
            tenant_id=tenant or self.settings.tenant_id,
            containers=tuple(containers),
            labels=tuple(labels),
            user=identity.user if identity else None,
            groups=identity.groups if identity else (),
            public_only=identity is not None and identity.anonymous,
        )

    def search(
        self,
        query: str,
        *,
        identity: Identity | None = PUBLIC,
        limit: int = 10,
        mode: SearchMode | None = None,
        tenant: str | None = None,
        containers: Sequence[str] = (),
        labels: Sequence[str] = (),
        expand: Expand | None = None,
        expand_tokens: int | None = None,
        tokens: int | None = None,
    ) -> list[Hit]:
        """`limit` results for `query` the identity may read, made of its best chunks
        (with `tokens`, of those that fit a context of that many tokens): passages, chunks
        or widened hits as `expand` says (None: the `search.expand` setting;
        `expand_tokens` None: its default, `ResultShape.of`). `mode` None: the
        `search.mode` setting. Raises `SearchUnavailable` when the mode cannot run on this
        collection or query."""
        shape = ResultShape.of(self.settings.search, expand, expand_tokens)
        with self._query():
            store = self._store()
            lexical = self._resources.lexical()
            needs_model = (mode or self.settings.search.mode) != "lexical" or lexical is None
            hits = search(
                store,
                self._resources.embedder() if needs_model else None,
                query,
                limit,
                self.filters(identity, tenant=tenant, containers=containers, labels=labels),
                mode=mode or self.settings.search.mode,
                lexical=lexical,
                prefetch_limit=self.settings.search.prefetch_limit,
                expand=shape.expand,
                expand_tokens=shape.expand_tokens,
                grow_tokens=shape.grow_tokens,
                tokens=tokens,
            )
            return [Hit.of(hit) for hit in hits]

    def fetch(
        self,
        item_id: str,
        *,
        identity: Identity | None = PUBLIC,
        expand: FetchExpand = "none",
        expand_tokens: int = DEFAULT_EXPAND_TOKENS,
        tenant: str | None = None,
    ) -> Hit | None:
        """A chunk (by its 64-hex `chunk_id`), widened to its neighbours or section like a
        search hit; or a whole document (by its `document_id`, or a chunk's with
        `expand="document"`). None when there is none the identity may read."""
        with self._query():
            store = self._store()
            filters = self.filters(identity, tenant=tenant)
            if _CHUNK_ID.fullmatch(item_id):
                found = store.visible_chunks(filters, chunk_ids=[item_id])
                if not found:
                    return None
                if expand == "document":
                    return self._document(store, filters, ChunkPayload.of(found[0]).document_id)
                hit = SearchHit.of(found[0])
                if expand != "none":
                    hit = expand_hits(store, [hit], expand, expand_tokens)[0]
                return Hit.of(hit)
            return self._document(store, filters, item_id)

    def _document(self, store: QdrantStore, filters: SearchFilters, document_id: str) -> Hit | None:
        """The document's chunks in order as one result (its newest version, where a
        run was interrupted between writing one and deleting the other)."""
        found = store.visible_chunks(filters, document_id=document_id)
        if not found:
            return None
        chunks = [(ChunkPayload.of(chunk), chunk) for chunk in found]
        newest, _ = max(chunks, key=lambda chunk: chunk[0].updated_at or "")
        ordered = [
            chunk
            for read, chunk in sorted(chunks, key=lambda chunk: chunk[0].ordinal)
            if read.source_version_id == newest.source_version_id
        ]
        first = SearchHit.of(ordered[0])
        whole = Hit.of(
            SearchHit(
                score=0.0,
                chunk_id=first.chunk_id,
                document_id=first.document_id,
                title=first.title,
                headings_path=[],
                source=first.source,
                md_text=joined_markdown(ordered),
                payload=first.payload,
                context=tuple(ordered),
            )
        )
        # The document's link, not its first heading's: the page, or the file's URL
        # without a PDF's page.
        page = ChunkPayload.of(first.payload).source_url
        link = page or str(whole.citation_url or "").split("#")[0]
        return replace(whole, citation_url=link or None)

    def sources(
        self, *, identity: Identity | None = PUBLIC, tenant: str | None = None
    ) -> list[SourceInfo]:
        """Each kind of source with chunks the identity may read, its containers and the
        last sync of its scopes (from the runs' source log)."""
        with self._query():
            store = self._store()
            tenant = tenant or self.settings.tenant_id
            filters = self.filters(identity, tenant=tenant)
            kinds = store.facet("source_type", filters)
            log = SourceLog.for_settings(self.settings).read(tenant)
            found = []
            for kind, chunks in sorted(kinds.items()):
                containers = store.facet(CONTAINER_FIELD, replace(filters, source_types=(kind,)))
                syncs = tuple(
                    sync.visible_part(containers) if containers else sync
                    for sync in log
                    if sync.source_type == kind
                )
                found.append(SourceInfo(kind, chunks, containers, syncs))
            return found
