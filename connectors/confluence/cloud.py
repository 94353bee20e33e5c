"""Confluence Cloud through REST v2 (`api/v2/...`), and REST v1 only where v2 has no
equivalent.

Atlassian removed the v1 content endpoints on Cloud (space by key, content listing and
by id, children, attachments, labels, versions answer `410 Gone` on newer sites). What
this source asks, per listing (the cheap full pass that decides changes and deletions):

- v2 `spaces?keys=` (the spaces' ids), `spaces/{id}/permissions` (who may read each),
  `spaces/{id}/pages` and `/blogposts` (ids, titles, parents, version numbers; no
  bodies), `attachments` and, where CQL is not offered, `footer-comments` (both
  site-wide: one request per 250 instead of one per page; attachments on every listing,
  as the versions of a page's pictures and diagrams are part of its own);
- v1 CQL `rest/api/search`, once per space: the read restrictions, labels and footer
  comment versions of all its content in bulk. v2 has no restrictions at all, and its
  labels and comments are per page (10,000 requests for 10,000 pages);
- v1 `rest/api/group/by-id` for the names of the groups a space permission names (v2
  names them by id only; restrictions and searches name them by name).

Per fetch: v2 `pages?id=` / `blogposts?id=` in batches with `body-format=storage` (never
the ADF default), `attachments/{id}` and the bytes through its `downloadLink`, a page's
`footer-comments` (and their `children`) where the listing saw comments, its
`attachments` and the downloads of the diagrams and pictures its body shows, its `labels`
and `ancestors` only when the listing did not run in this process, `users-bulk` for display
names (v2 gives account ids only).

When CQL is not offered (a `410 Gone` or another status that says so), nothing is
dropped: restrictions are read page by page (v1 `restriction/byOperation/read`),
comments through v2 `footer-comments`, labels per fetched page, and `poll()` compares a
full v2 listing's versions instead. Restrictions that cannot be read at all fail closed:
the page is listed (so not deleted) and its fetch fails with the reason; it is never
indexed with a guessed access. A space whose listing fails makes the listing incomplete,
with the space named in `Listing.errors`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any
from xml.sax.saxutils import escape

from config.errors import ErrorCode, IngestError
from connectors.base import DocumentRef, Listing, Principals, SourceDocument
from connectors.confluence.access import (
    Ancestor,
    PageAccess,
    SpaceAccess,
    listed_version,
    version_number,
)
from connectors.confluence.client import is_auth
from connectors.confluence.comments import (
    Comment,
    CommentState,
    Location,
    comment_from,
    comment_states,
)
from connectors.confluence.links import ContentIndex
from connectors.confluence.shown import AttachmentInfo, showable
from connectors.confluence.source import (
    PAGE_EXTENSION,
    PAGE_FORMAT,
    PAGE_MIME,
    AccessUnknown,
    AttachmentFacts,
    ConfluenceSource,
    PageFacts,
    breadcrumbs,
    is_unoffered,
    iso,
    restriction_from,
    safe_filename,
    v1_labels,
)
from connectors.http import HttpStatusError

log = logging.getLogger(__name__)

# The most ids, keys or results one v2 request takes: v2 lists always ask for it
# (`confluence.page_size` sizes v1 requests and fetch batches).
V2_MAX = 250
KIND_PATH = MappingProxyType({"page": "pages", "blogpost": "blogposts"})
COMMENT_PATH = MappingProxyType({"footer": "footer-comments", "inline": "inline-comments"})
# Content of the page tree that is no page (docs/sources.md#what-a-space-holds), by v2 path.
CONTAINER_PATH = MappingProxyType(
    {"folder": "folders", "whiteboard": "whiteboards", "database": "databases", "embed": "embeds"}
)
CONTENT_PATH = MappingProxyType({**KIND_PATH, **CONTAINER_PATH})
SEARCH_EXPAND = ",".join(
    [
        "content.restrictions.read.restrictions.user",
        "content.restrictions.read.restrictions.group",
        "content.metadata.labels",
        "content.version",
        "content.container",
        "content.extensions.resolution",
    ]
)
POLL_EXPAND = "content.version,content.container"
CONTAINER_SEARCH_EXPAND = ",".join(
    [
        "content.restrictions.read.restrictions.user",
        "content.restrictions.read.restrictions.group",
        "content.version",
        "content.ancestors",
    ]
)
# Content without a text body that `include_whiteboards` indexes as a title + link +
# breadcrumb record (docs/sources.md#what-a-space-holds), by its CQL type.
CONTAINER_LABELS = MappingProxyType(
    {"whiteboard": "Whiteboard", "database": "Database", "embed": "Smart link"}
)


class CloudSource(ConfluenceSource):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._space_ids: dict[str, str] = {}  # key -> id
        self._space_keys: dict[str, str] = {}  # id -> key
        self._space_names: dict[str, str] = {}  # key -> name
        self._groups: dict[str, str] = {}  # group id -> name
        self._names: dict[str, str] = {}  # account id -> display name
        self._names_lock = threading.Lock()
        # Filled by a listing: the v2 items, their ancestors and labels.
        self._pages: dict[str, dict[str, Any]] = {}
        self._chains: dict[str, list[Ancestor]] = {}
        self._containers: dict[str, dict[str, Any] | None] = {}  # folders etc., by id
        self._tree_warnings: dict[str, str] = {}  # item id -> what is wrong with its tree
        self._labels: dict[str, tuple[str, ...]] = {}

    # --- listing -----------------------------------------------------------------------

    def list_refs(self) -> Listing:
        refs: list[DocumentRef] = []
        errors: list[str] = []
        index = ContentIndex()
        self._start_listing()
        with self._lock:
            self._pages.clear()
            self._chains.clear()
            self._containers.clear()
            self._tree_warnings.clear()
            self._labels.clear()
        try:
            found = self._find_spaces(self.settings.spaces)
        except IngestError as exc:
            names = ", ".join(self.settings.spaces)
            return self._finish_listing([], [f"spaces {names}: {self.http.listing_error(exc)}"])
        listed: dict[str, list[dict[str, Any]]] = {}
        unsearched: list[str] = []
        for key in self.settings.spaces:
            if key not in found:
                errors.append(
                    f"{ErrorCode.FETCH_FAILED.value}: space {key}: the space does not exist, "
                    "or this account may not see it"
                )
                continue
            try:
                access = self._read_space_access(key)
            except IngestError as exc:
                errors.append(f"permissions of space {key}: {self.http.listing_error(exc)}")
                continue
            with self._lock:
                self._spaces[key] = access
            items = self._list_space(key, errors)
            for item in items:
                index.add_page(key, str(item["title"]), str(item["id"]))
            searched = self._searched(key, errors)
            if searched is None:
                continue
            if not searched:
                unsearched.append(key)
            listed[key] = items
            if self.settings.include_whiteboards:
                refs += self._list_containers(key, searched=searched, errors=errors)
        if unsearched and self._comment_locations:
            owners = {str(item["id"]) for key in unsearched for item in listed[key]}
            try:
                self._list_comments_v2(owners)
            except IngestError as exc:
                errors.append(f"comments of spaces {', '.join(unsearched)}: {exc}")
                for key in unsearched:
                    del listed[key]
        if self._comment_locations:
            with self._lock:
                self._listed.update(str(item["id"]) for items in listed.values() for item in items)
        # Before the pages' refs: the versions of their pictures and diagrams are part of theirs.
        attachments = self._list_attachments(listed, errors)
        # In parallel: where CQL is not offered, each page's restrictions are a request.
        with ThreadPoolExecutor(max_workers=self.settings.max_concurrency) as pool:
            for items in listed.values():
                refs += pool.map(self._page_ref, items)
        if self._attachments_wanted():
            refs += self._attachment_refs(attachments, index)
        self.index = index
        return self._finish_listing(refs, errors)

    def _searched(self, key: str, errors: list[str]) -> bool | None:
        """Whether the space's restrictions, labels and comments came through CQL search
        (False: it is not offered, so they are read page by page and comments through
        v2); None where the search failed otherwise (the error is recorded)."""
        try:
            self._search_space(key)
        except IngestError as exc:
            if is_auth(exc):
                raise self.http.auth_error() from None
            if not is_unoffered(exc):
                errors.append(f"restrictions and comments of space {key}: {exc}")
                return None
            log.warning(
                "space %s: CQL search is not available (%s); reading restrictions page "
                "by page and comments through REST v2",
                key,
                exc,
            )
            return False
        return True

    def _list_attachments(
        self, listed: dict[str, list[dict[str, Any]]], errors: list[str]
    ) -> list[dict[str, Any]]:
        """The listed pages' attachments (one site-wide v2 listing), their pictures' and
        diagrams' states recorded for the pages' versions."""
        owners = {str(item["id"]) for items in listed.values() for item in items}
        found: list[dict[str, Any]] = []
        try:
            for attachment in self.http.paged(
                "api/v2/attachments", {"status": "current", "limit": V2_MAX}
            ):
                if _owner(attachment)[0] in owners:
                    found.append(attachment)
        except IngestError as exc:
            spaces = ", ".join(listed)
            errors.append(f"listing attachments of spaces {spaces}: {self.http.listing_error(exc)}")
            return []
        self._record_attachments((_attachment_info(a) for a in found), owners)
        return found

    def _attachment_refs(
        self, attachments: list[dict[str, Any]], index: ContentIndex
    ) -> list[DocumentRef]:
        """The refs of the attachments that are documents of their own (of a wanted
        extension, no diagram or diagram preview), each also in `index`."""
        apart = self._documents_apart([_attachment_info(a) for a in attachments])
        refs: list[DocumentRef] = []
        for attachment in attachments:
            title = str(attachment.get("title") or "")
            if str(attachment["id"]) in apart and self._wanted(title):
                ref = self._attachment_ref(attachment)
                refs.append(ref)
                index.attachments[(_owner(attachment)[0], title)] = ref.document_id
        return refs

    def _page_attachments(self, page_id: str, kind: str) -> list[AttachmentInfo]:
        path = f"api/v2/{KIND_PATH.get(kind, 'pages')}/{page_id}/attachments"
        try:
            found = self.http.paged(path, {"status": "current", "limit": V2_MAX})
            return [_attachment_info({**a, **_owner_field(kind, page_id)}) for a in found]
        except HttpStatusError as exc:
            raise self.http.content_error(exc, f"attachments of {kind} {page_id}") from None

    def _find_spaces(self, keys: Sequence[str]) -> set[str]:
        """Look the spaces up by key (their ids); the keys found."""
        found: set[str] = set()
        for start in range(0, len(keys), V2_MAX):
            chunk = keys[start : start + V2_MAX]
            params = {"keys": ",".join(chunk), "limit": V2_MAX}
            for space in self.http.paged("api/v2/spaces", params):
                found.add(str(space["key"]))
                with self._lock:
                    self._space_ids[str(space["key"])] = str(space["id"])
                    self._space_keys[str(space["id"])] = str(space["key"])
                    self._space_names[str(space["key"])] = str(space.get("name") or "")
        return found

    def _list_space(self, key: str, errors: list[str]) -> list[dict[str, Any]]:
        """The space's current (and with `include_archived` archived) pages and blog
        posts, without bodies."""
        kinds = ["page", "blogpost"] if self.settings.include_blogposts else ["page"]
        status = "current,archived" if self.settings.include_archived else "current"
        items: list[dict[str, Any]] = []
        for kind in kinds:
            path = f"api/v2/spaces/{self._space_ids[key]}/{KIND_PATH[kind]}"
            try:
                for item in self.http.paged(path, {"status": status, "limit": V2_MAX}):
                    items.append({**item, "type": kind})
            except IngestError as exc:
                errors.append(f"listing {kind}s of space {key}: {self.http.listing_error(exc)}")
        with self._lock:
            self._pages.update((str(item["id"]), item) for item in items)
        return items

    def _search_space(self, key: str) -> None:
        """One CQL pass over the space: read restrictions and labels of its pages and blog
        posts, and the states of its comments."""
        types = "page, blogpost" + (", comment" if self._comment_locations else "")
        params = {
            "cql": f'space = "{key}" and type in ({types})',
            "expand": SEARCH_EXPAND,
            "limit": self.settings.page_size,
        }
        restrictions: dict[str, Principals] = {}
        labels: dict[str, tuple[str, ...]] = {}
        comments: dict[str, list[CommentState]] = {}
        for result in self.http.paged("rest/api/search", params):
            content = result.get("content") or {}
            content_id = str(content.get("id") or "")
            kind = content.get("type")
            if kind in ("page", "blogpost"):
                restriction = _expanded_restriction(content)
                if restriction is not None:  # else read page by page when needed
                    restrictions[content_id] = restriction
                labels[content_id] = v1_labels(content)
            elif kind == "comment":
                self._listed_comment(content, comments)
        with self._lock:
            self._restrictions.update(restrictions)
            self._labels.update(labels)
            self._comments.update(comments)

    def _list_containers(self, key: str, *, searched: bool, errors: list[str]) -> list[DocumentRef]:
        """The space's whiteboards, databases and smart links (`include_whiteboards`).
        v2 reads them by id only: CQL finds them, with their ancestors and restrictions
        expanded, so they cost no request each."""
        what = f"whiteboards, databases and smart links of space {key}"
        if not searched:
            errors.append(f"{what}: only CQL search lists them, and it is not available")
            return []
        params = {
            "cql": f'space = "{key}" and type in ({", ".join(CONTAINER_LABELS)})',
            "expand": CONTAINER_SEARCH_EXPAND,
            "limit": self.settings.page_size,
        }
        items: list[dict[str, Any]] = []
        try:
            for result in self.http.paged("rest/api/search", params):
                content = result.get("content") or {}
                if content.get("type") in CONTAINER_LABELS:
                    items.append(self._listed_container(key, content))
        except IngestError as exc:
            errors.append(f"{what}: {self.http.listing_error(exc)}")
            return []
        return [self._page_ref(item) for item in items]

    def _listed_container(self, key: str, content: dict[str, Any]) -> dict[str, Any]:
        """A v1 search result as the v2 item the rest reads, its chain and restrictions
        kept from the result."""
        content_id = str(content["id"])
        version = content.get("version") or {}
        chain = [Ancestor(str(a["id"]), a.get("title")) for a in content.get("ancestors") or []]
        restriction = _expanded_restriction(content)
        with self._lock:
            self._chains[content_id] = chain
            if restriction is not None:
                self._restrictions[content_id] = restriction
        return {
            "id": content_id,
            "type": content["type"],
            "title": content.get("title"),
            "spaceId": self._space_ids[key],
            "version": {"number": version.get("number", ""), "createdAt": version.get("when")},
        }

    def _list_comments_v2(self, owners: set[str]) -> None:
        """Comment states of `owners` through v2's site-wide listings, one per location
        (one request per 250 comments, not one per page)."""
        found: dict[str, list[CommentState]] = {}
        for location in self._comment_locations:
            path = f"api/v2/{COMMENT_PATH[location]}"
            for comment in self.http.paged(path, {"limit": V2_MAX}):
                owner = str(comment.get("pageId") or comment.get("blogPostId") or "")
                if owner in owners:
                    found.setdefault(owner, []).append(_v2_comment_state(comment, location))
        with self._lock:
            self._comments.update(found)

    def _read_space_access(self, space_key: str) -> SpaceAccess:
        if space_key not in self._space_ids:
            self._find_spaces([space_key])
        with self._lock:
            space_id = self._space_ids.get(space_key)
        if space_id is None:
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "the space does not exist, or this account may not see it",
                subject=f"space {space_key}",
            )
        users: list[str] = []
        groups: list[str] = []
        left_out: dict[tuple[str, str], None] = {}  # (kind, id), each principal once
        path = f"api/v2/spaces/{space_id}/permissions"
        for entry in self.http.paged(path, {"limit": V2_MAX}):
            operation = entry.get("operation") or {}
            if (operation.get("key"), operation.get("targetType")) != ("read", "space"):
                continue
            principal = entry.get("principal") or {}
            kind, principal_id = principal.get("type"), str(principal.get("id") or "")
            if kind == "user" and principal_id:
                users.append(principal_id)
            elif kind == "group" and principal_id:
                name = self._group_name(principal_id)
                if name:
                    groups.append(name)
            else:
                # A role or another principal whose members are unknown here: left out,
                # which narrows access (never widens it); the listing's notes say so.
                left_out[(str(kind or "principal"), principal_id)] = None
        readers = Principals(tuple(dict.fromkeys(users)), tuple(dict.fromkeys(groups)))
        return SpaceAccess(readers, left_out=tuple(kind for kind, _ in left_out))

    def _group_name(self, group_id: str) -> str | None:
        with self._lock:
            known = self._groups.get(group_id)
        if known is not None:
            return known
        data = self.http.principal_json(
            "rest/api/group/by-id", {"id": group_id}, f"group {group_id}"
        )
        if data is None:
            return None
        name = str(data.get("name") or "") or None
        if name:
            with self._lock:
                self._groups[group_id] = name
        return name

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Pages, blog posts and attachments modified at or after `since` minus the
        safety overlap, and pages whose comments were, found by CQL and versioned by v2
        as the listing versions them. Without CQL: a listing compared with the last.
        Raises on any other failure: a partial poll must not pass for complete."""
        cutoff, window = self._poll_window(since)
        spaces = ", ".join(f'"{s}"' for s in self.settings.spaces)
        types = ", ".join(self._poll_types())
        params = {
            "cql": f'space in ({spaces}) and type in ({types}) and lastmodified >= "{window}"',
            "expand": POLL_EXPAND,
            "limit": self.settings.page_size,
        }
        try:
            results = list(self.http.paged("rest/api/search", params))
        except IngestError as exc:
            if is_auth(exc):
                raise self.http.auth_error() from None
            if not is_unoffered(exc):
                raise
            yield from self._poll_by_listing(cutoff, exc)
            return
        pages: dict[str, str] = {}  # id -> kind
        changed: dict[str, tuple[str, str]] = {}  # attachment id -> its page's id and kind
        for result in results:
            content = result.get("content") or {}
            when = iso((content.get("version") or {}).get("when") or result.get("lastModified"))
            if when is not None and datetime.fromisoformat(when) < cutoff:
                continue
            kind, content_id = content.get("type"), str(content.get("id") or "")
            container = content.get("container") or {}
            if kind in KIND_PATH:
                pages[content_id] = str(kind)
            elif container.get("id") and container.get("type") in KIND_PATH:
                owner = (str(container["id"]), str(container["type"]))
                if kind == "comment":
                    pages.update([owner])
                elif kind == "attachment":
                    changed[content_id] = owner
        attachments, refreshed = self._changed_attachments(changed, pages)
        for kind in KIND_PATH:
            for item in self._items(kind, [i for i, k in pages.items() if k == kind], body=False):
                page_id = str(item["id"])
                with self._lock:
                    self._pages[page_id] = item
                    self._chains.pop(page_id, None)  # it may have moved
                if self._comment_locations:
                    self._refresh_comments(item)  # the listing's may be older
                if page_id not in refreshed:
                    self._refresh_attachments(page_id, kind)  # the listing's may be older
                yield self._page_ref(item)
        for attachment_id in attachments:
            try:
                data = self.http.get_json(f"api/v2/attachments/{attachment_id}")
            except HttpStatusError as exc:
                if exc.status == 404:
                    continue  # deleted since: the next complete listing says so
                raise self.http.content_error(exc, f"attachment {attachment_id}") from None
            yield self._attachment_ref(data)

    def _changed_attachments(
        self, changed: dict[str, tuple[str, str]], pages: dict[str, str]
    ) -> tuple[list[str], set[str]]:
        """Of the attachments changed in the poll's window: those that are documents of
        their own (wanted, no diagram or preview), and the pages whose attachments were
        asked anew. A changed picture or diagram adds its page to `pages`: its version
        is part of the page's."""
        lists: dict[str, list[AttachmentInfo]] = {}
        apart: list[str] = []
        for attachment_id, (owner, kind) in changed.items():
            if owner not in lists:
                lists[owner] = self._refresh_attachments(owner, kind)
            info = next((i for i in lists[owner] if i.id == attachment_id), None)
            if info is None:
                continue  # deleted since: the next complete listing says so
            if showable(info):
                pages[owner] = kind
            if self._wanted(info.filename) and info.id in self._documents_apart(lists[owner]):
                apart.append(attachment_id)
        return apart, set(lists)

    def _poll_by_listing(self, cutoff: datetime, reason: IngestError) -> Iterator[DocumentRef]:
        """Change detection without CQL: the full listing, its versions compared with the
        previous listing's (which see restriction, move and comment changes too), or,
        with none before, the edit times."""
        log.warning(
            "the incremental search is not available (%s): comparing a full listing instead",
            reason,
        )
        with self._lock:
            previous = dict(self._last_versions)
        listing = self.list_refs()
        if not listing.complete:
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "the listing that stands in for the incremental search is incomplete: "
                + "; ".join(listing.errors),
                transient=True,
            )
        for ref in listing.refs:
            edited = ref.updated_at is not None and datetime.fromisoformat(ref.updated_at) >= cutoff
            if edited or (previous and previous.get(ref.document_id) != ref.version):
                yield ref

    # --- refs and access ---------------------------------------------------------------

    def _page_ref(self, item: dict[str, Any]) -> DocumentRef:
        version = item.get("version") or {}
        return DocumentRef(
            document_id=str(item["id"]),
            version=self._listed_version(
                version.get("number", ""), lambda: self._item_access(item).digest
            ),
            source_type="confluence",
            title=item.get("title"),
            updated_at=iso(version.get("createdAt")),
            kind=str(item.get("type") or "page"),
        )

    def _attachment_ref(self, attachment: dict[str, Any]) -> DocumentRef:
        owner, kind = _owner(attachment)
        version = attachment.get("version") or {}
        return DocumentRef(
            document_id=str(attachment["id"]),
            version=self._listed_version(
                version.get("number", ""),
                lambda: self._owner_access(owner, kind).inherited if owner else None,
            ),
            source_type="confluence",
            title=attachment.get("title"),
            updated_at=iso(version.get("createdAt")),
            parent_document_id=owner or None,
            kind="attachment",
        )

    def _item_access(
        self, item: dict[str, Any], comments: Sequence[CommentState] | None = None
    ) -> PageAccess:
        page_id = str(item["id"])
        if comments is None:
            comments = self._comments_seen(page_id)
        space_key = self._space_key(str(item.get("spaceId") or ""))
        return self._page_access_for(
            page_id,
            space_key,
            self._ancestors(item),
            None,
            comments,
            archived=item.get("status") == "archived",
        )

    def _owner_access(self, owner_id: str, kind: str) -> PageAccess:
        """The access of an attachment's page or blog post: from the listing, else asked."""
        known = self._known_access(owner_id)
        if known is not None:
            return known
        what = f"{kind} {owner_id} (owner of the attachment)"
        item = self._content(f"api/v2/{KIND_PATH[kind]}/{owner_id}", what)
        item = {**item, "type": kind}
        with self._lock:
            self._pages[owner_id] = item
        return self._item_access(item)

    def _ancestors(self, item: dict[str, Any]) -> list[Ancestor]:
        """The item's ancestors, root first, folders included: up its parents (listed
        pages; folders and other containers read once per listing), else asked of v2."""
        item_id = str(item["id"])
        if item.get("type") == "blogpost":
            return []
        with self._lock:
            chain = self._chains.get(item_id)
        if chain is None:
            chain = self._chain_from_parents(item)
        if chain is None:
            chain = self._ancestors_from_api(item)
        with self._lock:
            self._chains[item_id] = chain
        return chain

    def _chain_from_parents(self, item: dict[str, Any]) -> list[Ancestor] | None:
        """Ancestors up the `parentId`s; None where a parent page is not listed. A loop
        (Confluence's tree has none, a broken answer might) or a folder that cannot be
        read ends the chain there, with a warning for the item."""
        chain: list[Ancestor] = []
        seen = {str(item["id"])}
        current = item
        while current.get("parentId"):
            parent_id, kind = str(current["parentId"]), str(current.get("parentType") or "page")
            if parent_id in seen:
                self._tree_warning(
                    item, f"its ancestors loop back to {kind} {parent_id}: breadcrumbs end there"
                )
                break
            seen.add(parent_id)
            parent = self._parent(parent_id, kind)
            if parent is None and kind == "page":
                return None
            if parent is None:
                self._tree_warning(
                    item,
                    f"its ancestor {kind} {parent_id} cannot be read (deleted or not visible): "
                    "breadcrumbs start below it",
                )
                break
            chain.append(Ancestor(parent_id, parent.get("title")))
            current = parent
        return chain[::-1]

    def _parent(self, parent_id: str, kind: str) -> dict[str, Any] | None:
        """A parent: a listed page, or a container (folder, whiteboard, database, smart
        link) read once per listing; None where it is neither."""
        if kind == "page":
            with self._lock:
                return self._pages.get(parent_id)
        with self._lock:
            if parent_id in self._containers:
                return self._containers[parent_id]
        container: dict[str, Any] | None = None
        if kind in CONTAINER_PATH:
            try:
                data = self.http.get_json(f"api/v2/{CONTAINER_PATH[kind]}/{parent_id}")
                container = {**data, "type": kind}
            except HttpStatusError as exc:
                if exc.status not in (403, 404):
                    raise self._ancestry_unknown(parent_id, exc) from None
            except IngestError as exc:
                raise self._ancestry_unknown(parent_id, exc) from None
        with self._lock:
            self._containers[parent_id] = container
        return container

    def _tree_warning(self, item: dict[str, Any], problem: str) -> None:
        what = f"{item.get('type') or 'page'} {item['id']}"
        log.warning("%s: %s", what, problem)
        with self._lock:
            self._tree_warnings[str(item["id"])] = f"{what}: {problem}"

    def _ancestors_from_api(self, item: dict[str, Any]) -> list[Ancestor]:
        item_id, kind = str(item["id"]), str(item.get("type") or "page")
        path = f"api/v2/{CONTENT_PATH.get(kind, 'pages')}/{item_id}/ancestors"
        try:
            data = self.http.get_json(path, {"limit": V2_MAX})
            chain = [
                (str(a["id"]), str(a.get("type") or "page")) for a in data.get("results") or []
            ]
            with self._lock:
                titles = {i: self._pages[i].get("title") for i, _ in chain if i in self._pages}
            unknown = [i for i, kind in chain if kind == "page" and i not in titles]
            if unknown:
                titles.update(
                    (str(it["id"]), it.get("title"))
                    for it in self._items("page", unknown, body=False)
                )
            for i, kind in chain:
                if kind != "page":
                    titles[i] = (self._parent(i, kind) or {}).get("title")
        except AccessUnknown:
            raise
        except IngestError as exc:
            raise self._ancestry_unknown(item_id, exc) from None
        return [Ancestor(i, titles.get(i)) for i, _ in chain]

    def _ancestry_unknown(self, content_id: str, exc: IngestError) -> IngestError:
        if is_auth(exc):
            return self.http.auth_error()
        return AccessUnknown(
            f"cannot read the ancestors of {content_id} ({exc}), so who may read it is "
            "unknown: it is not indexed until they can be read",
            subject=content_id,
            transient=exc.transient,
        )

    def _space_key(self, space_id: str) -> str:
        with self._lock:
            key = self._space_keys.get(space_id)
        if key is None:
            space = self.http.get_json(f"api/v2/spaces/{space_id}")
            key = str(space["key"])
            with self._lock:
                self._space_keys[space_id] = key
                self._space_ids[key] = space_id
                self._space_names[key] = str(space.get("name") or "")
        return key

    # --- fetching ----------------------------------------------------------------------

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        if ref.kind == "attachment":
            return self._fetch_attachment(ref)
        if ref.kind in CONTAINER_LABELS:
            return self._fetch_container(ref)
        kind = ref.kind if ref.kind in KIND_PATH else "page"
        params = {"body-format": "storage", "include-labels": "true"}
        path = f"api/v2/{KIND_PATH[kind]}/{ref.document_id}"
        item = self._content(path, f"{kind} {ref.document_id}", params)
        return self._page_document(ref, {**item, "type": kind})

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        """Pages and blog posts in batches through v2 `pages?id=` (one request per
        `page_size` pages), one by one where a batch lacks one (only the page itself may
        say it is gone); attachments one by one (each is a download)."""
        size = min(self.settings.page_size, V2_MAX)
        batches = [
            group[start : start + size]
            for kind in KIND_PATH
            if (group := [(i, r) for i, r in enumerate(refs) if r.kind == kind])
            for start in range(0, len(group), size)
        ]
        return self._fetch_in_batches(refs, batches, self._bodies)

    def _bodies(self, refs: Sequence[DocumentRef]) -> dict[str, dict[str, Any]]:
        """Pages or blog posts (one kind) with their bodies, by id, and their authors'
        names looked up together."""
        found = {
            str(item["id"]): item
            for item in self._items(refs[0].kind, [r.document_id for r in refs], body=True)
        }
        self._display_names(item.get("authorId") for item in found.values())
        return found

    def _items(self, kind: str, ids: Sequence[str], *, body: bool) -> Iterator[dict[str, Any]]:
        """Pages or blog posts by id, `V2_MAX` per request."""
        for start in range(0, len(ids), V2_MAX):
            chunk = ids[start : start + V2_MAX]
            params: dict[str, Any] = {"id": ",".join(chunk), "limit": len(chunk)}
            if body:
                params["body-format"] = "storage"
            for item in self.http.paged(f"api/v2/{KIND_PATH[kind]}", params):
                yield {**item, "type": kind}

    def _page_document(self, ref: DocumentRef, item: dict[str, Any]) -> SourceDocument:
        page_id = str(item["id"])
        kind = str(item["type"])
        with self._lock:  # its attachments' fetches name it (without its body)
            self._pages.setdefault(page_id, {k: v for k, v in item.items() if k != "body"})
        comments = self._page_comments(page_id, kind)
        space_key = self._space_key(str(item.get("spaceId") or ""))
        # Before its access: the versions of its pictures and diagrams are part of it.
        shown = self._shown(page_id, kind, item, space_key)
        access = self._item_access(item, self._comments_digest(page_id, comments))
        ancestors = self._ancestors(item)
        with self._lock:
            tree = self._tree_warnings.get(page_id)
        author_id = str(item.get("authorId"))
        page = PageFacts(
            kind=kind,
            author=self._display_names([item.get("authorId")]).get(author_id),
            updated_at=iso((item.get("version") or {}).get("createdAt")),
            created_at=iso(item.get("createdAt")),
            labels=self._labels_of(page_id, kind, item),
            space_key=access.space_key,
            space_name=self._space_name(access.space_key),
            ancestors=ancestors,
            comments=comments,
            access=access,
            shown=shown,
            warnings=(tree,) if tree else (),
        )
        return self._page_source(ref, item, page)

    def _space_name(self, key: str | None) -> str | None:
        with self._lock:
            return self._space_names.get(key or "")

    def _labels_of(self, page_id: str, kind: str, item: dict[str, Any]) -> tuple[str, ...]:
        included = item.get("labels")
        if isinstance(included, dict):
            return tuple(str(label.get("name")) for label in included.get("results") or [])
        with self._lock:
            known = self._labels.get(page_id)
        if known is not None:
            return known
        path = f"api/v2/{KIND_PATH[kind]}/{page_id}/labels"
        try:
            labels = self.http.paged(path, {"limit": V2_MAX})
            return tuple(str(label.get("name")) for label in labels)
        except HttpStatusError as exc:
            raise self.http.content_error(exc, f"labels of {kind} {page_id}") from None

    def _page_comments(self, page_id: str, kind: str) -> list[Comment]:
        return self._fetch_comments(page_id, kind, with_bodies=True)

    def _refresh_comments(self, item: dict[str, Any]) -> None:
        page_id = str(item["id"])
        comments = self._fetch_comments(page_id, str(item["type"]), with_bodies=False)
        with self._lock:
            self._comments[page_id] = comment_states(comments)
            self._listed.add(page_id)

    def _fetch_comments(self, page_id: str, kind: str, *, with_bodies: bool) -> list[Comment]:
        """The page's comments of every synced location; none asked for where the
        listing saw none."""
        found: list[Comment] = []
        for location in self._comment_locations:
            expected = self._listed_comments(page_id, location)
            if expected != 0:
                found += self._fetch_thread(page_id, kind, location, expected, with_bodies)
        return found

    def _fetch_thread(
        self, page_id: str, kind: str, location: Location, expected: int | None, bodies: bool
    ) -> list[Comment]:
        """The comments of one location: the top-level ones, then replies (v2 lists them
        per comment) while the listing saw more than found, or did not see the page."""
        params: dict[str, Any] = {"limit": V2_MAX}
        if bodies:
            params["body-format"] = "storage"
        path = COMMENT_PATH[location]
        try:
            found: list[tuple[dict[str, Any], str | None]] = [
                (c, None)
                for c in self.http.paged(f"api/v2/{KIND_PATH[kind]}/{page_id}/{path}", params)
            ]
            queue = [str(c["id"]) for c, _ in found]
            while queue and (expected is None or len(found) < expected):
                parent = queue.pop(0)
                for child in self.http.paged(f"api/v2/{path}/{parent}/children", params):
                    found.append((child, parent))
                    queue.append(str(child["id"]))
        except HttpStatusError as exc:
            raise self.http.content_error(exc, f"{location} comments of {kind} {page_id}") from None
        names = self._display_names((c.get("version") or {}).get("authorId") for c, _ in found)
        comments: list[Comment] = []
        for comment, answered in found:
            version = comment.get("version") or {}
            comments.append(
                comment_from(
                    comment,
                    _v2_comment_state(comment, location),
                    author=names.get(str(version.get("authorId"))),
                    created_at=iso(version.get("createdAt")),
                    reply_to=str(comment.get("parentCommentId") or answered or "") or None,
                )
            )
        return comments

    def _fetch_attachment(self, ref: DocumentRef) -> SourceDocument:
        what = f"attachment {ref.title or ref.document_id}"
        path = f"api/v2/attachments/{ref.document_id}"
        data = self._content(path, what, {"include-labels": "true"})
        filename = str(data["title"])
        self._check_size(data.get("fileSize"), filename)
        links = data.get("_links") or {}
        link = data.get("downloadLink") or links.get("download")
        if not link:
            raise IngestError(
                ErrorCode.FETCH_FAILED, "the attachment has no download link", subject=filename
            )
        body = self._download(str(link), filename, what)
        owner, kind = _owner(data)
        owner = owner or (ref.parent_document_id or "")
        access = self._owner_access(owner, kind) if owner else None
        version = data.get("version") or {}
        with self._lock:
            page = dict(self._pages.get(owner) or {})
        author_id = str(version.get("authorId"))
        space_key = access.space_key if access else None
        attachment = AttachmentFacts(
            filename=filename,
            number=version.get("number", version_number(ref.version)),
            mime=data.get("mediaType"),
            source_url=self.http.url(data.get("webuiLink") or links.get("webui") or str(link)),
            author=self._display_names([author_id]).get(author_id),
            updated_at=iso(version.get("createdAt")),
            labels=tuple(
                str(label.get("name")) for label in (data.get("labels") or {}).get("results") or []
            ),
            owner=owner,
            page_title=page.get("title"),
            access=access,
            space_key=space_key,
            space_name=self._space_name(space_key),
            ancestors=self._ancestors({**page, "type": kind}) if page else [],
        )
        return self._attachment_source(ref, body, attachment)

    def _fetch_container(self, ref: DocumentRef) -> SourceDocument:
        """A whiteboard, database or smart link: the API gives no text body, so its record
        is its title, where it sits and its link, for a search for its name to find."""
        what = f"{ref.kind} {ref.document_id}"
        data = self._content(f"api/v2/{CONTAINER_PATH[ref.kind]}/{ref.document_id}", what)
        item = {**data, "type": ref.kind}
        access = self._item_access(item)
        title = str(item.get("title") or "")
        version = item.get("version") or {}
        updated_at = iso(version.get("createdAt") or item.get("createdAt"))
        url = self.http.url((item.get("_links") or {}).get("webui", ""))
        trail = breadcrumbs(self._space_name(access.space_key), self._ancestors(item), title)
        with self._lock:
            tree = self._tree_warnings.get(ref.document_id)
        number = version.get("number", version_number(ref.version))
        return SourceDocument(
            ref=replace(
                ref,
                version=listed_version(number, access.digest),
                title=title,
                updated_at=updated_at,
            ),
            data=container_record(CONTAINER_LABELS[ref.kind], trail, url).encode("utf-8"),
            filename=safe_filename(title) + PAGE_EXTENSION,
            mime=PAGE_MIME,
            format=PAGE_FORMAT,
            source_url=url,
            title=title,
            author=self._display_names([item.get("authorId")]).get(str(item.get("authorId"))),
            updated_at=updated_at,
            container=access.space_key,
            locator=ref.document_id,
            acl=access.acl,
            base_url=self.http.base_url,
            metadata={"content_type": ref.kind},
            breadcrumbs=trail,
            warnings=(tree,) if tree else (),
        )

    def _display_names(self, account_ids: Iterable[object]) -> dict[str, str]:
        """Display names by account id (v2 content names its authors by id only), looked
        up in bulk once per connector. Names are optional metadata: a failed lookup is
        logged, not raised."""
        wanted = {str(a) for a in account_ids if a}
        with self._names_lock:  # concurrent batches wait for one lookup, not make their own
            with self._lock:
                missing = sorted(a for a in wanted if a not in self._names)
            for start in range(0, len(missing), V2_MAX):
                chunk = missing[start : start + V2_MAX]
                try:
                    data = self.http.post_json("api/v2/users-bulk", {"accountIds": chunk})
                except IngestError as exc:
                    if is_auth(exc):
                        raise self.http.auth_error() from None
                    log.warning("author names are not available: %s", exc)
                    break
                with self._lock:
                    for user in data.get("results") or []:
                        name = user.get("displayName") or user.get("publicName")
                        if user.get("accountId") and name:
                            self._names[str(user["accountId"])] = str(name)
        with self._lock:
            return {a: self._names[a] for a in wanted if a in self._names}


def container_record(label: str, trail: Sequence[str], url: str) -> str:
    """The storage body of a whiteboard's (database's, smart link's) record: what it is,
    its title, where it sits, and its link."""
    *where, title = trail
    place = f" in {escape(' › '.join(where))}" if where else ""
    link = escape(url, {'"': "&quot;"})
    return (
        f"<p>{label} <strong>{escape(title)}</strong>{place}. Confluence gives no text of it "
        f'through its API: <a href="{link}">open it in Confluence</a>.</p>'
    )


def _attachment_info(attachment: dict[str, Any]) -> AttachmentInfo:
    """A v2 attachment (`title`, `mediaType`, `fileSize`, `downloadLink`)."""
    version = attachment.get("version") or {}
    size = attachment.get("fileSize")
    return AttachmentInfo(
        id=str(attachment["id"]),
        filename=str(attachment.get("title") or ""),
        media_type=attachment.get("mediaType"),
        version=int(version.get("number") or 0),
        size=size if isinstance(size, int) else None,
        download=str(
            attachment.get("downloadLink") or (attachment.get("_links") or {}).get("download") or ""
        ),
        owner=_owner(attachment)[0],
    )


def _owner_field(kind: str, page_id: str) -> dict[str, str]:
    """The owner field of an attachment on `kind` `page_id`, as v2 names it."""
    return {"blogPostId" if kind == "blogpost" else "pageId": page_id}


def _owner(attachment: dict[str, Any]) -> tuple[str, str]:
    """The page or blog post an attachment is on, and which of the two."""
    if attachment.get("blogPostId"):
        return str(attachment["blogPostId"]), "blogpost"
    return str(attachment.get("pageId") or ""), "page"


def _expanded_restriction(content: dict[str, Any]) -> Principals | None:
    """The read restrictions a search result carries, or None where they are not (fully)
    there: the page's are then read on their own rather than taken as none."""
    read = (content.get("restrictions") or {}).get("read") or {}
    inner = read.get("restrictions") or {}
    for kind in ("user", "group"):
        part = inner.get(kind)
        if not isinstance(part, dict) or (part.get("_links") or {}).get("next"):
            return None
    return restriction_from(read)


def _v2_comment_state(comment: dict[str, Any], location: Location) -> CommentState:
    return CommentState(
        str(comment["id"]),
        int((comment.get("version") or {}).get("number") or 0),
        location,
        str(comment.get("resolutionStatus") or "") if location == "inline" else "",
    )
