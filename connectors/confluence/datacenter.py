"""Confluence Data Center / Server through REST v1 (`rest/api/...`).

- `list_refs()`: per space, pages and blog posts (`/rest/api/content?spaceKey=&type=`,
  with versions, ancestors and read restrictions expanded), the space's read permission
  (`/rest/api/space/{key}/permissions`, Data Center 9.1+; older versions do not offer
  it and the space then does not narrow access), footer comment versions (CQL
  `space = K and type = comment`) and attachments (CQL `type = attachment`, always: the
  versions of a page's pictures and diagrams are part of its own), following
  `_links.next` to the end (`start`/`limit`; servers cap `limit` silently). Any failed
  part makes the listing incomplete, so the caller deletes nothing.
- `poll(since)`: CQL `lastmodified >= "yyyy/MM/dd HH:mm"`. CQL reads that date in the
  account's own time zone, which the API does not reveal, so the window opens
  `MAX_TZ_SHIFT` earlier than `since - incremental_overlap_minutes`, and results are
  then filtered exactly on their `version.when` (which carries its offset). A comment
  changed in the window brings its page.
- `fetch()`/`fetch_many()`: the body in storage format, footer comments appended, with
  metadata and ACL, and the diagrams and pictures it shows (`child/attachment`, then
  their downloads); `fetch_many` gets pages in batches through CQL `id in (...)` (two
  requests per hundred pages instead of a hundred), one by one where the search index
  lags. A page gone since the listing raises `DocumentGone`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

from config.errors import IngestError
from connectors.base import DocumentRef, Listing, Principals, SourceDocument
from connectors.confluence.access import (
    UNKNOWN_SPACE,
    Ancestor,
    PageAccess,
    SpaceAccess,
    version_number,
)
from connectors.confluence.client import is_auth
from connectors.confluence.comments import (
    Comment,
    CommentState,
    comment_from,
    comment_states,
)
from connectors.confluence.links import ContentIndex
from connectors.confluence.shown import AttachmentInfo, showable
from connectors.confluence.source import (
    AttachmentFacts,
    ConfluenceSource,
    PageFacts,
    is_unoffered,
    iso,
    restriction_from,
    v1_comment_state,
    v1_labels,
)
from connectors.http import HttpStatusError

log = logging.getLogger(__name__)

_RESTRICTIONS = "restrictions.read.restrictions.user,restrictions.read.restrictions.group"
PAGE_EXPAND = f"body.storage,version,history,space,ancestors,metadata.labels,{_RESTRICTIONS}"
PAGE_ACL_EXPAND = f"space,ancestors,{_RESTRICTIONS}"
ATTACHMENT_EXPAND = "version,container.ancestors,space,history,metadata.labels"
LIST_EXPAND = f"version,space,ancestors,{_RESTRICTIONS}"
SEARCH_EXPAND = f"version,container,space,ancestors,{_RESTRICTIONS}"
COMMENT_EXPAND = "body.storage,version,history,ancestors"
# The `location` values of v1's comment children for each location synced.
V1_LOCATIONS = MappingProxyType({"footer": ("footer",), "inline": ("inline", "resolved")})


class DataCenterSource(ConfluenceSource):
    # --- listing -----------------------------------------------------------------------

    def list_refs(self) -> Listing:
        refs: list[DocumentRef] = []
        errors: list[str] = []
        index = ContentIndex()
        self._start_listing()
        for space in self.settings.spaces:
            try:
                self.http.get_json(f"rest/api/space/{space}")
                access = self._read_space_access(space)
            except IngestError as exc:
                errors.append(str(self.http.space_error(exc, space)))
                continue
            with self._lock:
                self._spaces[space] = access
            kinds = ["page", "blogpost"] if self.settings.include_blogposts else ["page"]
            statuses = ["current", "archived"] if self.settings.include_archived else ["current"]
            listed: list[dict[str, Any]] = []
            for kind, status in itertools.product(kinds, statuses):
                params = {
                    "spaceKey": space,
                    "type": kind,
                    "status": status,
                    "expand": LIST_EXPAND,
                    "limit": self.settings.page_size,
                }
                try:
                    for item in self.http.paged("rest/api/content", params):
                        listed.append(item)
                        index.add_page(space, item["title"], str(item["id"]))
                except IngestError as exc:
                    errors.append(
                        f"listing {status} {kind}s of space {space}: "
                        + self.http.listing_error(exc)
                    )
            if self._comment_locations:
                try:
                    self._list_comments(space)
                except IngestError as exc:
                    # Without them a page's version would not say whether its comments
                    # changed: the space's pages wait for the next listing.
                    errors.append(f"comments of space {space}: {self.http.listing_error(exc)}")
                    continue
            # Before the pages' refs: the versions of their pictures and diagrams are part
            # of theirs.
            cql = f'space = "{space}" and type = attachment'
            try:
                attachments = [
                    item
                    for item in self._search(cql, "version,container")
                    if item.get("type") == "attachment"
                ]
            except IngestError as exc:
                problem = self.http.listing_error(exc)
                errors.append(f"listing attachments of space {space}: {problem}")
                attachments = []
            infos = [_attachment_info(item) for item in attachments]
            self._record_attachments(infos, (str(item["id"]) for item in listed))
            refs += self._versioned_refs(listed)
            if self._attachments_wanted():
                apart = self._documents_apart(infos)
                for item in attachments:
                    ref = self._ref(item)
                    if ref.document_id in apart and self._wanted(ref.title or ""):
                        refs.append(ref)
                        index.attachments[(ref.parent_document_id or "", ref.title or "")] = (
                            ref.document_id
                        )
        self.index = index
        return self._finish_listing(refs, errors)

    def _read_space_access(self, space_key: str) -> SpaceAccess:
        """The space's read permission (Data Center 9.1+). A version or an account that
        is not offered it gets `UNKNOWN_SPACE`: the space does not narrow access."""
        try:
            entries = self.http.get_array(f"rest/api/space/{space_key}/permissions")
        except IngestError as exc:
            if is_unoffered(exc) and not is_auth(exc):
                log.warning(
                    "space %s: its permissions cannot be read (%s); access follows the page "
                    "restrictions only",
                    space_key,
                    exc,
                )
                return UNKNOWN_SPACE
            raise
        users: list[str] = []
        groups: list[str] = []
        for entry in entries:
            operation = entry.get("operation") or {}
            if (operation.get("operationKey"), operation.get("targetType")) != ("read", "space"):
                continue
            subject = entry.get("subject") or {}
            if subject.get("type") == "group" and subject.get("name"):
                groups.append(str(subject["name"]))
            elif subject.get("type") == "user":
                name = subject.get("username") or self._username(str(subject.get("userKey")))
                if name:
                    users.append(name)
            # Anything else (anonymous access) is left out: narrower, never wider.
        return SpaceAccess(Principals(tuple(dict.fromkeys(users)), tuple(dict.fromkeys(groups))))

    def _username(self, user_key: str) -> str | None:
        """Restrictions name users by user name; space permissions by user key."""
        data = self.http.principal_json("rest/api/user", {"key": user_key}, f"user {user_key}")
        if data is None:
            return None
        return str(data.get("username") or "") or None

    def _list_comments(self, space: str) -> None:
        cql = f'space = "{space}" and type = comment'
        found: dict[str, list[CommentState]] = {}
        for item in self._search(cql, "version,container,extensions.resolution"):
            self._listed_comment(item, found)
        with self._lock:
            self._comments.update(found)

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Pages, blog posts and attachments modified at or after `since` minus the
        safety overlap, and pages whose comments were. Raises on any failure: a partial
        poll must not pass for complete."""
        cutoff, window = self._poll_window(since)
        spaces = ", ".join(f'"{s}"' for s in self.settings.spaces)
        types = ", ".join(self._poll_types())
        cql = f'space in ({spaces}) and type in ({types}) and lastmodified >= "{window}"'
        commented: set[str] = set()  # pages whose comments or pictures changed
        pages: list[dict[str, Any]] = []
        attachments: list[dict[str, Any]] = []
        for item in self._search(cql, SEARCH_EXPAND):
            when = iso((item.get("version") or {}).get("when"))
            if when is not None and datetime.fromisoformat(when) < cutoff:
                continue
            kind = item.get("type")
            if kind == "comment":
                commented.add(str((item.get("container") or {}).get("id") or ""))
            elif kind == "attachment":
                attachments.append(item)
            else:
                pages.append(item)
        lists: dict[str, list[AttachmentInfo]] = {}
        for item in attachments:
            owner = str((item.get("container") or {}).get("id") or "")
            if not owner:
                continue
            if owner not in lists:
                lists[owner] = self._refresh_attachments(owner, "page")
            info = _attachment_info(item)
            if showable(info):
                commented.add(owner)  # its version is part of the page's
            if self._wanted(info.filename) and info.id in self._documents_apart(lists[owner]):
                yield self._ref(item)
        for item in pages:
            page_id = str(item["id"])
            commented.discard(page_id)
            if page_id not in lists:
                self._refresh_attachments(page_id, str(item.get("type") or "page"))
            yield self._ref(item)
        if commented - {""}:
            ids = ", ".join(sorted(commented - {""}))
            for item in self._search(f"id in ({ids})", SEARCH_EXPAND):
                if self._comment_locations:
                    self._refresh_comments(str(item["id"]))
                if str(item["id"]) not in lists:
                    self._refresh_attachments(str(item["id"]), str(item.get("type") or "page"))
                yield self._ref(item)

    def _refresh_comments(self, page_id: str) -> None:
        comments = self._fetch_comments(page_id, with_bodies=False)
        with self._lock:
            self._comments[page_id] = comment_states(comments)
            self._listed.add(page_id)

    # --- fetching ----------------------------------------------------------------------

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        if ref.kind == "attachment":
            return self._fetch_attachment(ref)
        path = f"rest/api/content/{ref.document_id}"
        data = self._content(path, f"{ref.kind} {ref.document_id}", {"expand": PAGE_EXPAND})
        return self._page_document(ref, data)

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        """Pages and blog posts in batches of `page_size` through CQL `id in (...)`, one by
        one where the search index lags; attachments one by one (each is a download)."""
        pages = [(i, r) for i, r in enumerate(refs) if r.kind != "attachment"]
        size = self.settings.page_size
        batches = [pages[start : start + size] for start in range(0, len(pages), size)]
        # CQL answers from the search index, which lags behind edits and new pages: a
        # page it holds an older version of is fetched alone.
        return self._fetch_in_batches(
            refs, batches, self._bodies, lambda item, ref: not _older(item, ref)
        )

    def _bodies(self, refs: Sequence[DocumentRef]) -> dict[str, dict[str, Any]]:
        ids = ", ".join(ref.document_id for ref in refs)
        return {str(item["id"]): item for item in self._search(f"id in ({ids})", PAGE_EXPAND)}

    def _page_document(self, ref: DocumentRef, item: dict[str, Any]) -> SourceDocument:
        page_id = str(item["id"])
        version = item.get("version") or {}
        history = item.get("history") or {}
        comments = self._page_comments(page_id)
        space_key = str(item["space"]["key"])
        kind = str(item.get("type", ref.kind))
        # Before its access: the versions of its pictures and diagrams are part of it.
        shown = self._shown(page_id, kind, item, space_key)
        page = PageFacts(
            kind=kind,
            author=(history.get("createdBy") or version.get("by") or {}).get("displayName"),
            updated_at=iso(version.get("when")),
            created_at=iso(history.get("createdDate")),
            labels=v1_labels(item),
            space_key=space_key,
            space_name=item["space"].get("name"),
            ancestors=_ancestors(item),
            comments=comments,
            access=self._access(item, self._comments_digest(page_id, comments)),
            shown=shown,
        )
        return self._page_source(ref, item, page)

    def _page_comments(self, page_id: str) -> list[Comment]:
        return self._fetch_comments(page_id, with_bodies=True)

    def _fetch_comments(self, page_id: str, *, with_bodies: bool) -> list[Comment]:
        """The page's comments of every synced location, in one listing: v1 names inline
        comments `inline` while open and `resolved` once resolved."""
        locations = [
            name
            for location in self._comment_locations
            if self._listed_comments(page_id, location) != 0
            for name in V1_LOCATIONS[location]
        ]
        if not locations:
            return []
        expand = COMMENT_EXPAND if with_bodies else "version,ancestors"
        params = {
            "expand": f"{expand},extensions.inlineProperties,extensions.resolution",
            "depth": "all",
            "location": locations,
            "limit": self.settings.page_size,
        }
        try:
            items = list(self.http.paged(f"rest/api/content/{page_id}/child/comment", params))
        except HttpStatusError as exc:
            raise self.http.content_error(exc, f"comments of page {page_id}") from None
        comments: list[Comment] = []
        for item in items:
            history = item.get("history") or {}
            version = item.get("version") or {}
            parents = item.get("ancestors") or []
            comments.append(
                comment_from(
                    item,
                    v1_comment_state(item),
                    author=(history.get("createdBy") or version.get("by") or {}).get("displayName"),
                    created_at=iso(history.get("createdDate") or version.get("when")),
                    reply_to=str(parents[-1]["id"]) if parents else None,
                )
            )
        return comments

    def _fetch_attachment(self, ref: DocumentRef) -> SourceDocument:
        what = f"attachment {ref.title or ref.document_id}"
        path = f"rest/api/content/{ref.document_id}"
        data = self._content(path, what, {"expand": ATTACHMENT_EXPAND})
        filename = str(data["title"])
        extensions = data.get("extensions") or {}
        self._check_size(extensions.get("fileSize"), filename)
        links = data.get("_links") or {}
        body = self._download(links["download"], filename, what)
        container = data.get("container") or {}
        page_id = str(container.get("id") or ref.parent_document_id or "")
        version = data.get("version") or {}
        space = data.get("space") or {}
        attachment = AttachmentFacts(
            filename=filename,
            number=version.get("number", version_number(ref.version)),
            mime=extensions.get("mediaType") or (data.get("metadata") or {}).get("mediaType"),
            source_url=self.http.url(links.get("webui") or links["download"]),
            author=(version.get("by") or {}).get("displayName"),
            updated_at=iso(version.get("when")),
            labels=v1_labels(data),
            owner=page_id,
            page_title=container.get("title"),
            access=self._page_access(page_id) if page_id else None,
            space_key=space.get("key"),
            space_name=space.get("name"),
            ancestors=_ancestors(container),
        )
        return self._attachment_source(ref, body, attachment)

    def _page_attachments(self, page_id: str, kind: str) -> list[AttachmentInfo]:
        path = f"rest/api/content/{page_id}/child/attachment"
        params = {"expand": "version,container", "limit": self.settings.page_size}
        try:
            return [_attachment_info(item) for item in self.http.paged(path, params)]
        except HttpStatusError as exc:
            raise self.http.content_error(exc, f"attachments of {kind} {page_id}") from None

    # --- access ------------------------------------------------------------------------

    def _access(
        self, data: dict[str, Any], comments: Sequence[CommentState] | None = None
    ) -> PageAccess:
        """The access of a page from its JSON (restrictions and ancestors expanded)."""
        page_id = str(data["id"])
        if comments is None:
            comments = self._comments_seen(page_id)
        own = restriction_from((data.get("restrictions") or {}).get("read") or {})
        with self._lock:
            self._restrictions[page_id] = own
        space_key = str((data.get("space") or {}).get("key") or "")
        return self._page_access_for(
            page_id,
            space_key,
            _ancestors(data),
            own,
            comments,
            archived=data.get("status") == "archived",
        )

    def _page_access(self, page_id: str) -> PageAccess:
        """The access of an attachment's page: from the listing, else one request."""
        known = self._known_access(page_id)
        if known is not None:
            return known
        what = f"page {page_id} (owner of the attachment)"
        return self._access(
            self._content(f"rest/api/content/{page_id}", what, {"expand": PAGE_ACL_EXPAND})
        )

    # --- HTTP --------------------------------------------------------------------------

    def _search(self, cql: str, expand: str) -> Iterator[dict[str, Any]]:
        params = {"cql": cql, "expand": expand, "limit": self.settings.page_size}
        return self.http.paged("rest/api/content/search", params)

    def _versioned_refs(self, items: list[dict[str, Any]]) -> list[DocumentRef]:
        """Refs of listed pages and blog posts whose version says who may read them, where
        they sit and which comments they have, besides the edit number. The listing
        carries every page's own read restrictions, so the ancestors' need no request."""
        with self._lock:
            for item in items:
                read = (item.get("restrictions") or {}).get("read") or {}
                self._restrictions[str(item["id"])] = restriction_from(read)
                if self._comment_locations:
                    self._listed.add(str(item["id"]))
        return [self._ref(item) for item in items]

    def _ref(self, item: dict[str, Any]) -> DocumentRef:
        """The version carries the access digest of the item (pages, blog posts) or of its
        page (attachments)."""
        kind = str(item.get("type", "page"))
        version = item.get("version") or {}
        container = item.get("container") or {}

        def digest() -> str | None:
            if kind != "attachment":
                return self._access(item).digest
            if container.get("id"):
                return self._page_access(str(container["id"])).inherited
            return None

        return DocumentRef(
            document_id=str(item["id"]),
            version=self._listed_version(version.get("number", ""), digest),
            source_type="confluence",
            title=item.get("title"),
            updated_at=iso(version.get("when")),
            parent_document_id=str(container["id"]) if container.get("id") else None,
            kind=kind,
        )


def _attachment_info(item: dict[str, Any]) -> AttachmentInfo:
    """A v1 attachment (`extensions.mediaType`/`fileSize`, `_links.download`, `container`
    expanded)."""
    extensions = item.get("extensions") or {}
    size = extensions.get("fileSize")
    return AttachmentInfo(
        id=str(item["id"]),
        filename=str(item.get("title") or ""),
        media_type=extensions.get("mediaType") or (item.get("metadata") or {}).get("mediaType"),
        version=int((item.get("version") or {}).get("number") or 0),
        size=size if isinstance(size, int) else None,
        download=str((item.get("_links") or {}).get("download") or ""),
        owner=str((item.get("container") or {}).get("id") or ""),
    )


def _ancestors(data: dict[str, Any]) -> list[Ancestor]:
    return [Ancestor(str(a["id"]), a.get("title")) for a in data.get("ancestors") or []]


def _older(item: dict[str, Any], ref: DocumentRef) -> bool:
    """The search index holds an older version than the listing saw."""
    number = str((item.get("version") or {}).get("number", ""))
    listed = version_number(ref.version)
    return number.isdigit() and listed.isdigit() and int(number) < int(listed)
