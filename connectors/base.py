"""The connector interface (after Onyx): a cheap id-and-version listing that drives change
detection and deletion, an incremental poll, and a fetch of one document's bytes.

Plain Python: no Prefect here. A full load is `list_refs()` followed by `fetch()` of each
ref whose version is new; deletion is decided only from a `Listing` with `complete=True`.

A connector is built from a `ConnectorContext` (`from_context`) and may offer
capabilities the pipeline asks for by protocol, never by class: `BatchFetch`, `Polling`,
`LinkResolver`, `HeadingCitation`, `IndexedCheck`, `IdMigration`, `ScopedDeletion`,
`Closeable`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings


@dataclass(frozen=True)
class DocumentRef:
    """One listed document: enough to decide whether it changed, nothing more."""

    document_id: str  # stable: Confluence content id / attachment id, or path relative to root
    version: str  # changes whenever the content may have changed
    source_type: str  # the chunks' `source_type` payload field (docs/chunking.md#the-chunk-record)
    title: str | None = None
    updated_at: str | None = None  # ISO 8601
    parent_document_id: str | None = None  # attachments: the page they belong to
    kind: str = "page"  # page | blogpost | attachment | file


@dataclass(frozen=True)
class Listing:
    refs: tuple[DocumentRef, ...]
    # False when any part of the listing failed: then nothing may be deleted from it.
    complete: bool
    errors: tuple[str, ...] = ()
    # What the run report should say about the source that limits nothing, once per run
    # (e.g. a space permission the ACL cannot hold, left out: access narrower, not wider).
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Principals:
    """The users and groups one level of access (a space permission, a page restriction)
    names."""

    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()

    @property
    def named(self) -> bool:
        return bool(self.users or self.groups)


@dataclass(frozen=True)
class SpaceReaders:
    """Who may read the container a document lives in (a Confluence space)."""

    key: str
    open: bool  # the readers are unknown: the space does not narrow access
    readers: Principals = Principals()


@dataclass(frozen=True)
class Access:
    """Who may read a document: the chunks' `acl` payload, which the search filter
    (indexing.qdrant_store.SearchFilters) reads. Everyone when `public`; otherwise whoever
    passes both levels: the document's read restrictions (none when not `restricted`,
    else `readers`) and, where the source has one, its space's."""

    public: bool
    readers: Principals = Principals()
    restricted: bool | None = None  # None: the source has no read restrictions
    space: SpaceReaders | None = None  # None: the source has no container level

    def payload(self) -> dict[str, Any]:
        acl: dict[str, Any] = {
            "public": self.public,
            "users": list(self.readers.users),
            "groups": list(self.readers.groups),
        }
        if self.restricted is not None:
            acl["restricted"] = self.restricted
        if self.space is not None:
            acl["space"] = self.space.key
            acl["space_open"] = self.space.open
            acl["space_users"] = list(self.space.readers.users)
            acl["space_groups"] = list(self.space.readers.groups)
        return acl


PUBLIC = Access(public=True)


@dataclass
class SourceDocument:
    """A fetched document: bytes to normalize plus what its chunks will say of it. The
    fields are what any source may know; `metadata` holds what only its source knows."""

    ref: DocumentRef
    data: bytes
    filename: str  # name with extension, for format detection and messages
    mime: str | None = None
    source_url: str | None = None
    file_path: str | None = None
    title: str | None = None
    author: str | None = None
    updated_at: str | None = None
    labels: tuple[str, ...] = ()
    # What holds the document in its source (a Confluence space, a toy shelf): what a
    # source's deletion scopes and link resolution narrow by, and a search filters by.
    container: str | None = None
    # Where the source itself finds the document, where its id does not say (a
    # Confluence page's id; an attachment's: its page's).
    locator: str | None = None
    # What the document's relative links resolve against (a Confluence site's base URL).
    base_url: str | None = None
    # Who may read it; None where it is unknown: its chunks carry no `acl`, and a search
    # filtered by user or group never returns them.
    acl: Access | None = None
    # What else the connector says of it, carried into every chunk's payload as it is
    # (a page's content type and ancestors, a file's root).
    metadata: dict[str, Any] = field(default_factory=dict)
    # The normalizer's format (normalizers.registry.FORMATS) when the connector knows it, as
    # for a Confluence page's storage XHTML; None: detected from the bytes.
    format: str | None = None
    # Where the document sits, outermost first, itself last (a space, its ancestor pages
    # and folders, the page): the chunks' `breadcrumbs` (docs/chunking.md#the-chunk-record); () for
    # its title.
    breadcrumbs: tuple[str, ...] = ()
    # What the run report should say about the document although it was read: input the
    # connector worked around (an inline comment whose text is gone, a broken tree).
    warnings: tuple[str, ...] = ()
    # Files the document shows that its normalizer reads where they stand (a Confluence
    # page's diagrams and pictures), by the name its body gives them
    # (`NormalizeContext.attachments`).
    attachments: Mapping[str, bytes] = field(default_factory=dict)


@dataclass(frozen=True)
class ConnectorContext:
    """What a connector is built from, for one run's source."""

    kind: str  # the source kind's name (config/sources.py)
    targets: tuple[str, ...]  # what the run names: containers, paths, ...
    section: Any  # the kind's settings section (its `settings_model`), or None
    limits: LimitsSettings
    state_path: Path  # a file the connector may keep between runs, one per source scope
    document_extensions: frozenset[str]  # formats the normalizers read (".pdf", ...)
    token: str | None = field(default=None, repr=False)  # the section's secret, resolved


class Connector(Protocol):
    source_type: str  # what its documents' refs carry

    def list_refs(self) -> Listing:
        """Every document of the source, ids and versions only; follows pagination to the end."""
        ...

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        """The document's bytes and metadata; raises IngestError(FETCH_FAILED, ...)."""
        ...


class DocumentGone(IngestError):
    """The document disappeared between listing and fetch (deleted, moved away, or no
    longer visible): the caller treats it as a deletion, not as a transient failure."""

    gone = True

    def __init__(self, message: str, subject: str | None = None) -> None:
        super().__init__(ErrorCode.FETCH_FAILED, message, subject=subject)

    def __reduce__(self) -> tuple[object, ...]:
        return (DocumentGone, (self.message, self.subject))


class ConnectorClass(Protocol):
    """A connector class as the registry names it."""

    # The model of the kind's settings section (config/sources.py), None: it has none.
    settings_model: type[BaseModel] | None
    # The setting holding the targets a run uses when it names none ("confluence.spaces").
    targets_setting: str
    # Targets are paths on this machine: the command line makes them absolute.
    targets_are_paths: bool
    # What its documents' chunks carry as `source_type` (`file` for the `files` kind).
    source_type: str

    def from_context(self, context: ConnectorContext) -> Connector: ...


# --- capabilities the pipeline asks a connector for ----------------------------------


@runtime_checkable
class BatchFetch(Protocol):
    """A connector that fetches a batch in fewer requests than one per document
    (Confluence: a few requests per hundred pages)."""

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        """`fetch` for a batch, in the order of `refs`, a failure in place of its document."""
        ...


def fetch_each(
    fetch: Callable[[DocumentRef], SourceDocument], refs: Sequence[DocumentRef]
) -> list[SourceDocument | IngestError]:
    """`fetch` of each ref in order, a failure in place of its document."""
    fetched: list[SourceDocument | IngestError] = []
    for ref in refs:
        try:
            fetched.append(fetch(ref))
        except IngestError as exc:
            fetched.append(exc)
    return fetched


def fetch_many(
    connector: Connector, refs: Sequence[DocumentRef]
) -> list[SourceDocument | IngestError]:
    """A batch of documents: through the connector's own `fetch_many` where it has one
    (`BatchFetch`), else one `fetch` per ref."""
    if isinstance(connector, BatchFetch):
        return connector.fetch_many(refs)
    return fetch_each(connector.fetch, refs)


@runtime_checkable
class Polling(Protocol):
    """A connector that finds what changed since a time more cheaply than a listing."""

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Documents changed since `since` (with the connector's safety overlap)."""
        ...


class LinkTarget(Protocol):
    """What a link record (normalizers.model.LinkRecord) says about its target."""

    @property
    def target_url(self) -> str: ...
    @property
    def link_type(self) -> str: ...
    @property
    def target_page_id(self) -> str | None: ...
    @property
    def target_title(self) -> str | None: ...
    @property
    def target_space_key(self) -> str | None: ...
    @property
    def target_filename(self) -> str | None: ...


class LinkResolution(Protocol):
    def __call__(self, links: Sequence[LinkTarget], source: SourceDocument) -> list[str | None]: ...


@runtime_checkable
class LinkResolver(Protocol):
    """Resolves a document's links to synced document ids (docs/chunking.md#links)."""

    def link_index(self) -> dict[str, Any]:
        """What the last listing knows of link targets, as JSON: saved with the listing,
        so batches prepared in another process resolve against it."""
        ...

    def link_resolution(self, index: dict[str, Any]) -> LinkResolution:
        """The synced document id of each link (None: external or not synced), read
        against a saved `link_index`."""
        ...


@runtime_checkable
class HeadingCitation(Protocol):
    """A connector whose documents' URLs can point at one of their headings
    (docs/sources.md#deep-links), as its own viewer builds heading anchors. Without it a chunk
    cites its document's URL (a PDF's page where known)."""

    def heading_links(self, source: SourceDocument, headings: Sequence[str]) -> list[str | None]:
        """The deep link of each of `headings` (the document's headings in order, their
        Markdown text as the chunker found them), None where one has no anchor to link
        to; its chunks then cite the document."""
        ...


class IndexView(Protocol):
    """What the index holds of one tenant's documents of the connector's source type."""

    @property
    def tenant_id(self) -> str: ...

    def field(self, name: str) -> dict[str, Any]:
        """document id -> the payload field `name` of its points."""
        ...

    def indexed(self, document_ids: Sequence[str]) -> set[str]:
        """Those of `document_ids` that have points."""
        ...


@runtime_checkable
class IndexedCheck(Protocol):
    """Refuses a run (ConfigError) that would overwrite documents the index holds for
    another source of the same kind."""

    def check_indexed(self, index: IndexView) -> None: ...


@dataclass(frozen=True)
class IdMigrationResult:
    replaced: tuple[str, ...]  # old ids whose document is indexed under its new id
    retired: frozenset[str]  # old ids whose document is no longer listed


@runtime_checkable
class IdMigration(Protocol):
    """Recognises documents indexed under an id scheme the connector no longer uses."""

    def migrate_ids(self, index: IndexView, listed: Set[str]) -> IdMigrationResult: ...


@dataclass(frozen=True)
class DeletionScope:
    """The indexed documents a complete listing speaks for: of `source_type`, in
    `container` (`SourceDocument.container`) when given, and among those `owns` accepts
    when given."""

    source_type: str
    container: str | None = None
    owns: Callable[[str], bool] | None = None


@runtime_checkable
class ScopedDeletion(Protocol):
    """A connector whose listing speaks for less than every document of its source type
    (without it, a complete listing speaks for all of them)."""

    def deletion_scopes(self, retired: frozenset[str]) -> list[DeletionScope]: ...


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None: ...
