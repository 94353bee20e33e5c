"""What Confluence Cloud (REST v2, connectors/confluence/cloud.py) and Data Center (REST
v1, connectors/confluence/datacenter.py) share: the caches a listing fills for the
fetches after it, read restrictions (REST v1 on both: v2 has none), effective access,
comments in the page body, the diagrams and pictures a body shows
(connectors/confluence/shown.py), attachment downloads.

A listing fills the caches (restrictions, ancestors, comments and labels of every page);
a fetch in the same process uses them, so a fetched page's version agrees with the
listed one. A fetch in a process that did not list (a Dask worker) asks the API for what
it lacks, page by page.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import PurePath
from typing import Any
from urllib.parse import quote

from config.errors import ErrorCode, IngestError
from connectors.base import DocumentRef, Listing, Principals, SourceDocument, fetch_each
from connectors.confluence.access import (
    Ancestor,
    PageAccess,
    SpaceAccess,
    effective_acl,
    listed_version,
    page_access,
    version_number,
)
from connectors.confluence.anchors import match_headings, page_headings
from connectors.confluence.client import ConfluenceHttp, is_status
from connectors.confluence.comments import (
    COMMENTS_HEADING,
    COMMENTS_OPENING,
    Comment,
    CommentState,
    Location,
    comment_states,
    comments_section,
    lost_anchors,
    marked_texts,
    storage_body,
)
from connectors.confluence.links import ContentIndex
from connectors.confluence.settings import ConfluenceSettings
from connectors.confluence.shown import (
    AttachmentInfo,
    Shown,
    rendered_in_page,
    shown_attachments,
    shown_states,
)
from connectors.http import HttpStatusError

log = logging.getLogger(__name__)

PAGE_MIME = "application/vnd.atlassian.confluence.storage+xml"
PAGE_EXTENSION = ".confluence"
PAGE_FORMAT = "confluence"  # normalizers.registry.FORMATS: storage XHTML
PAGE_KINDS = frozenset({"page", "blogpost"})  # content with a body (and headings)
RESTRICTION_EXPAND = "restrictions.user,restrictions.group"
CQL_DATE_FORMAT = "%Y/%m/%d %H:%M"
# Time zones run from UTC-12 to UTC+14: a CQL date read in any of them starts no later
# than the same wall-clock time read in UTC plus 12 hours.
MAX_TZ_SHIFT = timedelta(hours=14)
# Statuses that say an endpoint or a query is not offered (rather than overloaded):
# the connector then takes another way to the same facts.
UNOFFERED = (400, 403, 404, 405, 410, 501)
_UNSAFE_FILENAME = re.compile(r'[\\/:*?"<>|\x00-\x1f]')


class AccessUnknown(IngestError):
    """The read restrictions of a page (or of an ancestor) cannot be read: the page is
    reported with this error and never indexed with a guessed, wider access."""

    def __init__(self, message: str, subject: str | None = None, transient: bool = False) -> None:
        super().__init__(ErrorCode.FETCH_FAILED, message, subject=subject, transient=transient)

    def __reduce__(self) -> tuple[object, ...]:
        return (AccessUnknown, (self.message, self.subject, self.transient))


@dataclass(frozen=True)
class PageFacts:
    """What Cloud (v2) and Data Center (v1) tell of a page or blog post in shapes of their
    own, read by each source for the shared builder (`ConfluenceSource._page_source`)."""

    kind: str  # page | blogpost: the payload's `content_type`
    author: str | None
    updated_at: str | None
    created_at: str | None
    labels: tuple[str, ...]
    space_key: str | None
    space_name: str | None
    ancestors: Sequence[Ancestor]
    comments: Sequence[Comment]
    access: PageAccess
    shown: ShownAttachments
    warnings: tuple[str, ...] = ()  # what is wrong with its place in the tree


@dataclass(frozen=True)
class ShownAttachments:
    """The bytes of the attachments a page's body shows, by `Shown.key`, and what the run
    report says of those that could not be read."""

    data: dict[str, bytes]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class AttachmentFacts:
    """What Cloud and Data Center tell of an attachment, and of the page it is on, for
    the shared builder (`ConfluenceSource._attachment_source`)."""

    filename: str
    number: object  # its version number, as the API gives it
    mime: str | None
    source_url: str
    author: str | None
    updated_at: str | None
    labels: tuple[str, ...]
    owner: str  # the page or blog post it is on ("" where the API does not say)
    page_title: str | None
    access: PageAccess | None  # its page's; None without a page
    space_key: str | None
    space_name: str | None
    ancestors: Sequence[Ancestor]  # its page's


class ConfluenceSource(ABC):
    def __init__(
        self,
        settings: ConfluenceSettings,
        http: ConfluenceHttp,
        attachment_extensions: Collection[str],
    ) -> None:
        self.settings = settings
        self.http = http
        self.attachment_extensions = frozenset(e.lower() for e in attachment_extensions)
        self.index = ContentIndex()
        self._lock = threading.Lock()
        self._fetching: dict[str, threading.Lock] = {}
        # Filled by a listing, read by the fetches after it.
        self._restrictions: dict[str, Principals] = {}
        self._spaces: dict[str, SpaceAccess] = {}
        self._accesses: dict[str, PageAccess] = {}
        self._comments: dict[str, list[CommentState]] = {}
        self._listed: set[str] = set()  # pages whose comments the listing saw
        # The ids and versions of the pictures and diagrams on each page
        # (`shown_states`), and the pages whose attachments the listing saw.
        self._shown_states: dict[str, list[tuple[str, int]]] = {}
        self._attachments_listed: set[str] = set()
        self._last_versions: dict[str, str] = {}

    # --- the connector's surface -------------------------------------------------------

    @abstractmethod
    def list_refs(self) -> Listing: ...

    @abstractmethod
    def poll(self, since: datetime) -> Iterator[DocumentRef]: ...

    @abstractmethod
    def fetch(self, ref: DocumentRef) -> SourceDocument: ...

    @abstractmethod
    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]: ...

    @abstractmethod
    def _page_document(self, ref: DocumentRef, item: dict[str, Any]) -> SourceDocument:
        """A page or blog post from the API's answer for it (body included)."""

    @abstractmethod
    def _read_space_access(self, space_key: str) -> SpaceAccess:
        """Who may read the space, from the API."""

    @abstractmethod
    def _page_attachments(self, page_id: str, kind: str) -> list[AttachmentInfo]:
        """The attachments of a page or blog post (one listing request), without bytes."""

    # --- listing state -----------------------------------------------------------------

    def _start_listing(self) -> None:
        with self._lock:
            self._restrictions.clear()
            self._spaces.clear()
            self._accesses.clear()
            self._comments.clear()
            self._listed.clear()
            self._shown_states.clear()
            self._attachments_listed.clear()
            self._fetching.clear()

    def _finish_listing(self, refs: list[DocumentRef], errors: list[str]) -> Listing:
        for error in errors:
            log.warning("Confluence listing incomplete: %s", error)
        with self._lock:
            self._last_versions = {ref.document_id: ref.version for ref in refs}
            spaces = sorted(self._spaces.items())
        notes = tuple(note for key, access in spaces if (note := access.note(key)))
        return Listing(refs=tuple(refs), complete=not errors, errors=tuple(errors), notes=notes)

    def _poll_window(self, since: datetime) -> tuple[datetime, str]:
        """The exact cutoff, and the CQL date that opens the window before it in every
        time zone (CQL reads dates in the account's zone, which the API does not say)."""
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        cutoff = since - timedelta(minutes=self.settings.incremental_overlap_minutes)
        window = (cutoff - MAX_TZ_SHIFT).astimezone(UTC).strftime(CQL_DATE_FORMAT)
        return cutoff, window

    def _poll_types(self) -> list[str]:
        types = ["page"]
        if self.settings.include_blogposts:
            types.append("blogpost")
        types.append("attachment")  # documents, or pictures and diagrams pages show
        if self._comment_locations:
            types.append("comment")
        return types

    @property
    def _comment_locations(self) -> tuple[Location, ...]:
        """The comments synced: footer (`include_comments`), inline
        (`include_inline_comments`)."""
        wanted: tuple[tuple[Location, bool], ...] = (
            ("footer", self.settings.include_comments),
            ("inline", self.settings.include_inline_comments),
        )
        return tuple(location for location, on in wanted if on)

    # --- access ------------------------------------------------------------------------

    def _space_access(self, space_key: str) -> SpaceAccess:
        with self._lock:
            known = self._spaces.get(space_key)
        if known is None:
            known = self._read_space_access(space_key)
            with self._lock:
                self._spaces[space_key] = known
        return known

    def _page_access_for(
        self,
        page_id: str,
        space_key: str,
        ancestors: Sequence[Ancestor],
        own: Principals | None,
        comments: Sequence[CommentState],
        *,
        archived: bool = False,
    ) -> PageAccess:
        """The page's access from its space, the restrictions of its ancestors and its
        own (`own`: known already, else read), its comments and whether it is archived.
        Restrictions that cannot be read raise: a page is never indexed with access wider
        than it has."""
        # An ancestor deleted since the listing restricts nothing any more (its children
        # moved up to its parent); the next listing sees the page's new place.
        levels = [level for a in ancestors if (level := self._restriction(a.id)) is not None]
        mine = own if own is not None else self._restriction(page_id)
        if mine is None:
            raise AccessUnknown(
                f"page {page_id} was deleted while it was being read",
                subject=f"page {page_id}",
                transient=True,
            )
        levels.append(mine)
        acl = effective_acl(space_key, self._space_access(space_key), levels)
        with self._lock:
            shown = list(self._shown_states.get(page_id, []))
        access = page_access(acl, ancestors, comments, archived=archived, shown=shown)
        with self._lock:
            self._accesses[page_id] = access
        return access

    def _restriction(self, content_id: str) -> Principals | None:
        """Read restrictions of one page, from the listing or fetched once per listing
        cycle (the per-id lock keeps concurrent batches from fetching the same one);
        None where the page no longer exists."""
        with self._lock:
            cached = self._restrictions.get(content_id)
            key_lock = self._fetching.setdefault(content_id, threading.Lock())
        if cached is not None:
            return cached
        with key_lock:
            with self._lock:
                cached = self._restrictions.get(content_id)
            return cached if cached is not None else self._fetch_restriction(content_id)

    def _fetch_restriction(self, content_id: str) -> Principals | None:
        try:
            data = self.http.get_json(
                f"rest/api/content/{content_id}/restriction/byOperation/read",
                {"expand": RESTRICTION_EXPAND},
            )
        except IngestError as exc:
            status = exc.status if isinstance(exc, HttpStatusError) else None
            if status == 401:
                raise self.http.auth_error() from None
            if status == 404:
                return None
            reason = self.http.gone_message(exc) if status == 410 else str(exc)
            # Without them the page might be shown too widely: it is not indexed.
            raise AccessUnknown(
                f"cannot read the read restrictions of page {content_id} ({reason}), so who "
                "may read it is unknown: it is not indexed until they can be read",
                subject=f"page {content_id}",
                transient=status is None,
            ) from None
        restriction = restriction_from(data)
        with self._lock:
            self._restrictions[content_id] = restriction
        return restriction

    def _known_access(self, page_id: str) -> PageAccess | None:
        with self._lock:
            return self._accesses.get(page_id)

    # --- comments and content ----------------------------------------------------------

    def _comments_seen(self, page_id: str) -> list[CommentState]:
        """The comment states the listing saw under a page."""
        with self._lock:
            return list(self._comments.get(page_id, []))

    def _comments_digest(self, page_id: str, fetched: Sequence[Comment]) -> list[CommentState]:
        """The comment states that go into a fetched page's version: the listing's when
        it saw the page (so fetch and listing agree), else those just fetched."""
        with self._lock:
            if page_id in self._listed:
                return list(self._comments.get(page_id, []))
        return comment_states(fetched)

    def _listed_comment(
        self, content: dict[str, Any], found: dict[str, list[CommentState]]
    ) -> None:
        """A comment a v1 search listed, added under its page to `found` where its
        location is synced."""
        state = v1_comment_state(content)
        if state.location in self._comment_locations:
            owner = str((content.get("container") or {}).get("id") or "")
            found.setdefault(owner, []).append(state)

    def _listed_comments(self, page_id: str, location: Location) -> int | None:
        """How many comments of `location` the listing saw on the page; None where it did
        not see the page (a fetch in a process that did not list)."""
        with self._lock:
            if page_id not in self._listed:
                return None
            return sum(1 for c in self._comments.get(page_id, []) if c.location == location)

    def _page_content(
        self, body: str, title: str, comments: Sequence[Comment]
    ) -> tuple[bytes, tuple[str, ...]]:
        """The page's storage with its comments section, and what the run report should
        say about it (headings without an anchor, inline comments whose text is gone)."""
        marked = marked_texts(body)
        data = (body + comments_section(comments, marked)).encode("utf-8")
        return data, (*self._heading_warnings(body, title), *lost_anchors(comments, marked))

    # --- diagrams and pictures ----------------------------------------------------------

    def _record_attachments(self, infos: Iterable[AttachmentInfo], pages: Iterable[str]) -> None:
        """What a listing saw of the attachments of `pages`: the states of their pictures
        and diagrams, which go into the pages' versions."""
        found: dict[str, list[AttachmentInfo]] = {page: [] for page in pages}
        for info in infos:
            if info.owner in found:
                found[info.owner].append(info)
        with self._lock:
            for page, own in found.items():
                self._shown_states[page] = shown_states(own)
            self._attachments_listed.update(found)

    def _refresh_attachments(self, page_id: str, kind: str) -> list[AttachmentInfo]:
        """The page's attachments asked anew (an incremental poll saw one change), their
        states replacing the listing's."""
        infos = self._page_attachments(page_id, kind)
        self._record_attachments(infos, [page_id])
        return infos

    @staticmethod
    def _documents_apart(infos: Sequence[AttachmentInfo]) -> set[str]:
        """The ids of the attachments that are documents of their own: all but diagrams
        and the previews beside them, which their pages render."""
        by_owner: dict[str, list[AttachmentInfo]] = {}
        for info in infos:
            by_owner.setdefault(info.owner, []).append(info)
        return {info.id for info in infos if not rendered_in_page(info, by_owner[info.owner])}

    def _shown(
        self, page_id: str, kind: str, item: dict[str, Any], space_key: str
    ) -> ShownAttachments:
        """The attachments the body of `item` (either API's answer) shows, downloaded
        (whatever `attachment_extensions` says, within `attachment_max_bytes`): one
        listing of the page's attachments, one of each other page a diagram or picture is
        shown from, then only the files named.
        Also records the page's attachment states where the listing did not see them. A
        file that cannot be read is left out with a warning: the page still indexes."""
        wanted = shown_attachments(storage_body(item), page_id, space_key)
        with self._lock:
            listed = page_id in self._attachments_listed
        if not wanted and listed:
            return ShownAttachments({})
        lists: dict[str, list[AttachmentInfo] | IngestError] = {}

        def attachments_of(holder: str, holder_kind: str) -> list[AttachmentInfo] | IngestError:
            if holder not in lists:
                try:
                    lists[holder] = self._page_attachments(holder, holder_kind)
                except IngestError as exc:
                    lists[holder] = exc
            return lists[holder]

        own = attachments_of(page_id, kind)
        if isinstance(own, IngestError) and not listed:
            raise own  # without them the page's version cannot be told
        if not listed and not isinstance(own, IngestError):
            with self._lock:
                self._shown_states[page_id] = shown_states(own)
        data: dict[str, bytes] = {}
        warnings: list[str] = []
        for shown in wanted:
            holder = self._holder(shown, page_id, str(item.get("title") or ""), space_key)
            found = attachments_of(holder, "page") if holder else None
            try:
                data[shown.key] = self._shown_bytes(shown, found)
            except IngestError as exc:
                warnings.append(
                    f"attachment {shown.filename!r} the page shows cannot be read "
                    f"({exc.code.value}: {exc.message}): the page shows its name instead"
                )
        return ShownAttachments(data, tuple(warnings))

    def _holder(self, shown: Shown, page_id: str, title: str, space_key: str) -> str | None:
        """The id of the page holding a shown attachment (the page `page_id`, titled
        `title`, or another); None where a title names a page the listing in this process
        does not know."""
        if shown.page_id:
            return shown.page_id
        if shown.page_title and (shown.page_title, shown.space_key) != (title, space_key):
            return self.index.page_by_title(shown.space_key or "", shown.page_title)
        return page_id

    def _shown_bytes(self, shown: Shown, infos: list[AttachmentInfo] | IngestError | None) -> bytes:
        if infos is None:
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                f"the page {shown.page_title!r} it is on is not synced, or does not exist",
                subject=shown.filename,
            )
        if isinstance(infos, IngestError):
            raise infos
        info = next((i for i in infos if i.filename == shown.filename), None)
        if info is None:
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "no such attachment (deleted, renamed, or not visible to this account)",
                subject=shown.filename,
            )
        self._check_size(info.size, info.filename)
        return self._download(info.download, info.filename, f"attachment {info.filename}")

    # --- citations ---------------------------------------------------------------------

    def heading_links(self, source: SourceDocument, headings: Sequence[str]) -> list[str | None]:
        """Each heading's link on its page (connectors/confluence/anchors.py); None for
        the comments section and anything else the page itself does not show."""
        if source.ref.kind not in PAGE_KINDS or not source.source_url:
            return [None] * len(headings)
        body, comments, _ = source.data.decode("utf-8", "replace").partition(COMMENTS_OPENING)
        page = page_headings(body, cloud=self.http.cloud, title=source.title or "")
        anchors = match_headings(page, headings)
        if comments:
            # The appended section's heading is the first "Comments" no page heading
            # matched: it and every heading after it (in comment bodies) cite the page.
            cut = next(
                (
                    i
                    for i, (text, anchor) in enumerate(zip(headings, anchors, strict=True))
                    if anchor is None and text.strip() == COMMENTS_HEADING
                ),
                len(anchors),
            )
            anchors[cut:] = [None] * (len(anchors) - cut)
        return [f"{source.source_url}#{quote(a, safe='')}" if a else None for a in anchors]

    def _heading_warnings(self, body: str, title: str) -> list[str]:
        return [
            f"heading {heading.text!r} has no letter or digit, so Confluence gives it no "
            "anchor a link can rely on: its chunks link to the page"
            for heading in page_headings(body, cloud=self.http.cloud, title=title)
            if heading.anchor is None and heading.text
        ]

    def _attachments_wanted(self) -> bool:
        return self.settings.include_attachments and bool(self.attachment_extensions)

    def _wanted(self, filename: str) -> bool:
        return PurePath(filename).suffix.lower() in self.attachment_extensions

    def _check_size(self, size: object, filename: str) -> None:
        limit = self.settings.attachment_max_bytes
        if isinstance(size, int) and size > limit:
            raise IngestError(
                ErrorCode.TOO_LARGE,
                f"{size} bytes, over confluence.attachment_max_bytes ({limit})",
                subject=filename,
            )

    def _content(
        self, path: str, what: str, params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """One content item from the API; a failure names it (`what`), and says it is
        gone only where the API says so."""
        try:
            return self.http.get_json(path, params)
        except HttpStatusError as exc:
            raise self.http.content_error(exc, what) from None

    def _download(self, link: str, filename: str, what: str) -> bytes:
        try:
            return self.http.download(
                link, max_bytes=self.settings.attachment_max_bytes, subject=filename
            )
        except HttpStatusError as exc:
            raise self.http.content_error(exc, what) from None

    # --- documents ---------------------------------------------------------------------

    def _fetch_in_batches(
        self,
        refs: Sequence[DocumentRef],
        batches: Iterable[Sequence[tuple[int, DocumentRef]]],
        read: Callable[[Sequence[DocumentRef]], dict[str, dict[str, Any]]],
        usable: Callable[[dict[str, Any], DocumentRef], bool] = lambda item, ref: True,
    ) -> list[SourceDocument | IngestError]:
        """`fetch_many`: the pages of each batch (positions in `refs` and refs) read in a
        few requests (`read`: id -> the API's answer), each built from that answer where
        the answer has it and it is `usable`, else fetched alone (only the page itself may
        say it is gone); what no batch holds (attachments: each is a download) fetched
        one by one."""
        results: dict[int, SourceDocument | IngestError] = {}
        for batch in batches:
            try:
                found = read([ref for _, ref in batch])
            except IngestError as exc:
                for i, ref in batch:
                    results[i] = self.http.batch_error(exc, f"{ref.kind} {ref.document_id}")
                continue
            for i, ref in batch:
                item = found.get(ref.document_id)
                build = self.fetch
                if item is not None and usable(item, ref):
                    build = functools.partial(self._page_document, item=item)
                results[i] = fetch_each(build, [ref])[0]
        rest = [(i, ref) for i, ref in enumerate(refs) if i not in results]
        fetched = fetch_each(self.fetch, [ref for _, ref in rest])
        results.update((i, result) for (i, _), result in zip(rest, fetched, strict=True))
        return [results[i] for i in range(len(refs))]

    def _page_source(
        self, ref: DocumentRef, item: dict[str, Any], page: PageFacts
    ) -> SourceDocument:
        """A page or blog post as a document: its storage body with its comments section.
        What both APIs name alike is read from `item` (`id`, `title`, `version.number`,
        `body.storage.value`, `_links.webui`); `page` holds what each reads its own way."""
        page_id = str(item["id"])
        title = str(item.get("title") or "")
        number = (item.get("version") or {}).get("number", version_number(ref.version))
        data, warnings = self._page_content(storage_body(item), title, page.comments)
        return SourceDocument(
            ref=replace(
                ref,
                version=listed_version(number, page.access.digest),
                title=title,
                updated_at=page.updated_at,
            ),
            data=data,
            filename=safe_filename(title) + PAGE_EXTENSION,
            mime=PAGE_MIME,
            format=PAGE_FORMAT,
            source_url=self.http.url((item.get("_links") or {}).get("webui", "")),
            title=title,
            author=page.author,
            updated_at=page.updated_at,
            labels=page.labels,
            container=page.space_key,
            locator=page_id,
            acl=page.access.acl,
            base_url=self.http.base_url,
            metadata={
                "content_type": page.kind,
                "ancestors": [{"id": a.id, "title": a.title} for a in page.ancestors],
                "created_at": page.created_at,
                **archived_extra(page.access),
            },
            breadcrumbs=breadcrumbs(page.space_name, page.ancestors, title),
            warnings=(*warnings, *page.warnings, *page.shown.warnings),
            attachments=page.shown.data,
        )

    def _attachment_source(
        self, ref: DocumentRef, data: bytes, attachment: AttachmentFacts
    ) -> SourceDocument:
        """An attachment as a document: its bytes, under its page's access and place."""
        access, owner = attachment.access, attachment.owner
        return SourceDocument(
            ref=replace(
                ref,
                version=listed_version(attachment.number, access.inherited if access else None),
                title=attachment.filename,
                updated_at=attachment.updated_at,
                parent_document_id=owner or ref.parent_document_id,
            ),
            data=data,
            filename=attachment.filename,
            mime=attachment.mime,
            source_url=attachment.source_url,
            title=attachment.filename,
            author=attachment.author,
            updated_at=attachment.updated_at,
            labels=attachment.labels,
            container=attachment.space_key,
            locator=owner,
            acl=access.acl if access else None,
            metadata={"content_type": "attachment", "page_title": attachment.page_title}
            | archived_extra(access),
            breadcrumbs=breadcrumbs(
                attachment.space_name,
                attachment.ancestors,
                str(attachment.page_title or ""),
                attachment.filename,
            ),
        )

    def _listed_version(self, number: object, digest: Callable[[], str | None]) -> str:
        """The listed version of a page or attachment, `digest` telling its access. One
        whose access cannot be read stays listed (so it is not deleted) with a version no
        fetched document has, so that its next fetch tries again, and fails closed while
        the access stays unreadable."""
        try:
            return listed_version(number, digest())
        except AccessUnknown as exc:
            log.warning("%s", exc)
            return listed_version(number, "unreadable")


def archived_extra(access: PageAccess | None) -> dict[str, bool]:
    """The payload's `archived: true` of an archived page and its attachments."""
    return {"archived": True} if access is not None and access.archived else {}


def breadcrumbs(
    space_name: str | None, ancestors: Sequence[Ancestor], *own: str
) -> tuple[str, ...]:
    """Space name, ancestor titles (folders included), then the document's own names."""
    names = [space_name, *(a.title for a in ancestors), *own]
    return tuple(name for name in names if name)


def restriction_from(read: dict[str, Any]) -> Principals:
    """Principals of a v1 read restriction (`restrictions.user/group.results`): users by
    account id (Cloud) or user name (Data Center), groups by name."""
    inner = read.get("restrictions") or {}
    users = ((inner.get("user") or {}).get("results")) or []
    groups = ((inner.get("group") or {}).get("results")) or []
    return Principals(
        users=tuple(
            str(u.get("accountId") or u.get("username") or u.get("userKey")) for u in users
        ),
        groups=tuple(str(g.get("name")) for g in groups),
    )


def v1_comment_state(content: dict[str, Any]) -> CommentState:
    """A v1 comment's state (a search result's or a child's): `extensions` carry where
    it is and, expanded, an inline comment's resolution."""
    extensions = content.get("extensions") or {}
    inline = extensions.get("location") == "inline"
    return CommentState(
        str(content["id"]),
        int((content.get("version") or {}).get("number") or 0),
        "inline" if inline else "footer",
        str((extensions.get("resolution") or {}).get("status") or "") if inline else "",
    )


def v1_labels(content: dict[str, Any]) -> tuple[str, ...]:
    """Label names of v1 content with `metadata.labels` expanded."""
    labels = ((content.get("metadata") or {}).get("labels") or {}).get("results") or []
    return tuple(str(label.get("name")) for label in labels)


def is_unoffered(exc: IngestError) -> bool:
    return is_status(exc, *UNOFFERED)


def iso(value: Any) -> str | None:
    """Confluence timestamps (`...Z` on Cloud, `+03:00` on DC) as ISO 8601 in UTC."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC).isoformat()


def safe_filename(title: str) -> str:
    return _UNSAFE_FILENAME.sub("_", title).strip()[:150] or "untitled"
