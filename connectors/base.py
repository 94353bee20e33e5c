"""The connector interface (after Onyx): a cheap id-and-version listing that drives change
detection and deletion, an incremental poll, and a fetch of one document's bytes.

Plain Python: no Prefect here. A full load is `list_refs()` followed by `fetch()` of each
ref whose version is new; deletion is decided only from a `Listing` with `complete=True`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

from config.errors import ErrorCode, IngestError

SourceType = Literal["confluence", "file"]


@dataclass(frozen=True)
class DocumentRef:
    """One listed document: enough to decide whether it changed, nothing more."""

    document_id: str  # stable: Confluence content id / attachment id, or path relative to root
    version: str  # changes whenever the content may have changed
    source_type: SourceType
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


@dataclass
class SourceDocument:
    """A fetched document: bytes to normalize plus the metadata chunks will carry."""

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
    space_key: str | None = None
    page_id: str | None = None
    # Who may read it (SPEC: `acl` payload): {"public": bool, "users": [...], "groups": [...]}
    acl: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Connector(Protocol):
    source_type: SourceType

    def list_refs(self) -> Listing:
        """Every document of the source, ids and versions only; follows pagination to the end."""
        ...

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Documents changed since `since` (with the connector's safety overlap)."""
        ...

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        """The document's bytes and metadata; raises IngestError(FETCH_FAILED, ...)."""
        ...

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        """`fetch` for a batch, in the order of `refs`, a failure in place of its document;
        Confluence fetches a batch of pages in a few requests instead of one per page."""
        ...


class DocumentGone(IngestError):
    """The document disappeared between listing and fetch (deleted, moved away, or no
    longer visible): the caller treats it as a deletion, not as a transient failure."""

    gone = True

    def __init__(self, message: str, subject: str | None = None) -> None:
        super().__init__(ErrorCode.FETCH_FAILED, message, subject=subject)

    def __reduce__(self) -> tuple[object, ...]:
        return (DocumentGone, (self.message, self.subject))
