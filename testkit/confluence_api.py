"""A local Confluence REST API on 127.0.0.1 for tests and benchmarks.

A real HTTP server (stdlib `ThreadingHTTPServer` in a thread) with the JSON shapes of
Confluence Cloud (REST v2, plus the v1 endpoints v2 has no equivalent for) and of Data
Center (REST v1).

`layout="cloud"`: context path `/wiki`, basic auth (e-mail + API token), users by
`accountId`, groups by id in v2 and by name and id in v1. It serves REST v2:

    GET  {ctx}/api/v2/spaces?keys=                       GET {ctx}/api/v2/spaces/{id}/permissions
    GET  {ctx}/api/v2/spaces/{id}/pages|blogposts[?status=current,archived]
    GET  {ctx}/api/v2/pages|blogposts?id=
    GET  {ctx}/api/v2/pages|blogposts/{id}[/labels|/attachments|/footer-comments|/inline-comments]
    GET  {ctx}/api/v2/pages/{id}/ancestors               GET {ctx}/api/v2/attachments[/{id}]
    GET  {ctx}/api/v2/footer-comments|inline-comments[/{id}/children]
    GET  {ctx}/api/v2/folders|whiteboards|databases|embeds/{id}[/ancestors]
    POST {ctx}/api/v2/users-bulk

cursor-paginated: `limit` 1..250 (above 250 is a 400, as the reference says; the server
then serves at most `v2_max_limit`), the next page in `_links.next` and in the `Link`
header, both relative to the host (`/wiki/api/v2/...`; `next_in_body = False` leaves
only the header). Of v1 it serves what v2 lacks:
CQL `GET {ctx}/rest/api/search` (and `/rest/api/content/search`), read restrictions
`GET {ctx}/rest/api/content/{id}/restriction/byOperation/read`, groups
`GET {ctx}/rest/api/group/by-id`, and downloads. The v1 endpoints Atlassian removed on
Cloud (space by key, content listing, content by id, children, attachments, labels,
versions, comments) answer `410 Gone`; each such call is counted in `requests["removed"]`
and kept in `removed_calls`, so a test can assert that none was made.

`layout="dc"`: no context path (or `context=`), a personal access token as bearer or user
+ password as basic auth, users by `username`, `start`/`limit` pagination, REST v1 only:

    GET {ctx}/rest/api/space/{key}                GET {ctx}/rest/api/space/{key}/permissions
    GET {ctx}/rest/api/content?spaceKey=&type=    GET {ctx}/rest/api/content/search?cql=
    GET {ctx}/rest/api/content/{id}[/child/attachment|/child/comment|/restriction/...]
    GET {ctx}/rest/api/user?key=                  GET {ctx}/download/attachments/{page}/{file}

(space permissions as Data Center 9.1+ serves them; `space_permissions_api = False`
answers 404, as older versions do). v1 lists cap `limit` at `max_limit` silently, like
the real servers. Every layout honours `expand` and answers a wrong token with 401.

Inline comments (`add_comment(..., inline=True, selection=...)`) put their marker
(`ac:inline-comment-marker ac:ref=...`) around the selection in the page body and come in
Atlassian's shapes: v2 `resolutionStatus` and `properties.inlineMarkerRef` /
`inlineOriginalSelection`, v1 `extensions.inlineProperties` and `extensions.resolution`
(v1 lists open ones under location `inline`, resolved ones under `resolved`); `resolve()`
changes no version, and a comment whose marked text left the page is `dangling`. Folders,
whiteboards, databases and smart links (`add_folder`, `add_whiteboard`) sit in the page
tree (`parentType`, ancestors) without a body; CQL finds them by type. `archive()` makes
a page archived: listed only when asked for (`status`), never searched. A page's rendered
view (v2 `body-format=view`, v1 `expand=body.view`) gives every heading the id Confluence
gives it and every anchor macro its id (`render_view`), for tests to check deep links
against (`rendered_anchors`).
Answers can say `X-RateLimit-NearLimit: true` (`near_limit(n)`), and a fault can carry
Cloud's rate-limit headers (`fail(..., headers=...)`).

CQL dates are read in the account's time zone (`cql_tz`, default UTC+3) as Confluence
does, not in UTC. Spaces are readable by the group `confluence-users` unless
`grant_space` says otherwise.

Fault switches count requests: `fail(n, status, retry_after=..., headers=...)`, `reset(n)`,
`near_limit(n)` (answers saying `X-RateLimit-NearLimit: true`),
`truncate(n)`, `slow(n, seconds)`, each optionally limited to paths containing `path`;
`storm(seconds, status, retry_after=...)` answers every request with the status for a
while (Confluence overloaded); `retire(prefix)` makes the endpoints under a path prefix
answer `410 Gone` (an endpoint Atlassian removed since);
`delete_after_listing(id)` and `edit_after_listing(id)` change content right after the
next listing request is answered (a page deleted / edited mid-run); `hide_from_search(id)`
keeps content out of CQL results (the search index lags behind new pages).

Diagrams and pictures on pages (`drawio_macro`, `gliffy_macro`, `image_markup` write
the storage format the apps write; `add_attachment` with the media types below). The
shapes, as Atlassian's reference and the draw.io and Gliffy apps give them:

- an attachment: v2 `{id: "att…", title, mediaType, fileSize, version: {number,
  createdAt, …}, pageId | blogPostId, downloadLink, webuiLink, _links: {download,
  webui}}`; v1 `{id, type: "attachment", title, version, container (expanded),
  extensions: {mediaType, fileSize}, metadata: {mediaType}, _links: {download, webui}}`,
  the download link `/download/attachments/{page}/{file}?version=N&modificationDate=…&api=v2`
  (relative to the context path); a page's attachments: v2
  `pages/{id}/attachments`, v1 `content/{id}/child/attachment`;
- draw.io keeps a diagram in an attachment named `diagramName` (no extension on Data
  Center, often `….drawio` on Cloud), media type `application/vnd.jgraph.mxfile`, with a
  PNG preview `<diagramName>.png` beside it; its macro `drawio` carries `diagramName`,
  `diagramDisplayName`, `revision`, `pageId`, `baseUrl` (Cloud also `custContentId`,
  `contentVer`, `mVer`, `zoom`, `lbox`…); `inc-drawio` shows another page's diagram
  (`diagramName`, `pageId` of that page, `includedDiagram` 1);
- Gliffy keeps its JSON in an attachment named `name` (`application/gliffy+json`) with
  a `<name>.png` preview; its macro `gliffy` carries `name`, `displayName`, `pagePin`
  (the version), on Cloud `containerId`, `diagramAttachmentId`, `imageAttachmentId`, on
  Data Center `pageid` where the diagram is on another page;
- a picture: `<ac:image ac:alt=…><ri:attachment ri:filename=…/></ac:image>`, the
  attachment of another page with `<ri:page ri:content-title=… ri:space-key=…/>` or
  (Cloud) `<ri:content-entity ri:content-id=…/>` inside `ri:attachment`.

Use `confluence_api` (a pytest fixture factory) or `with FakeConfluence(...) as api:`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import html
import json
import re
import socket
import struct
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, quote, quote_plus, unquote, urlencode, urlsplit

import pytest

Layout = Literal["cloud", "dc"]
ContentType = Literal[
    "page", "blogpost", "attachment", "comment", "folder", "whiteboard", "database", "embed"
]
# Cloud content of the page tree without a body in the API, by its v2 path.
CONTAINER_PATHS = {
    "folders": "folder",
    "whiteboards": "whiteboard",
    "databases": "database",
    "embeds": "embed",
}
# Content that has a place in the page tree (a parent, ancestors).
TREE_TYPES = ("page", *CONTAINER_PATHS.values())

DEFAULT_USER = "ingest-bot@example.com"
DEFAULT_TOKEN = "test-token-0f1e2d3c"
DEFAULT_PASSWORD = "test-password"
DEFAULT_READERS = "confluence-users"
CQL_TZ = timezone(timedelta(hours=3))
V2_LIMIT = 250
# Cloud v1 endpoints that v2 has no equivalent for: still served.
_CLOUD_V1_ALIVE = re.compile(
    r"/rest/api/(search|content/search|group/by-id|content/[^/]+/restriction(/.*)?)"
)


def group_id(name: str) -> str:
    """A group's id on Cloud (a UUID): v2 names groups by id only."""
    digest = hashlib.sha1(name.encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


@dataclass
class FakeUser:
    username: str
    display_name: str

    @property
    def account_id(self) -> str:
        return "5b10ac8d" + hashlib.sha1(self.username.encode()).hexdigest()[:16]

    @property
    def user_key(self) -> str:
        return "ff80808" + hashlib.sha1(self.username.encode()).hexdigest()[:25]


@dataclass
class FakeContent:
    id: str
    type: ContentType
    space_key: str
    title: str
    body: str = ""
    version: int = 1
    when: datetime = field(default_factory=lambda: datetime.now(UTC))
    created: datetime = field(default_factory=lambda: datetime.now(UTC))
    author: str = "alice"
    # pages: the parent page; attachments and comments: the page or blog post they are on
    parent_id: str | None = None
    labels: list[str] = field(default_factory=list)
    read_users: list[str] = field(default_factory=list)
    read_groups: list[str] = field(default_factory=list)
    data: bytes = b""
    media_type: str = "application/octet-stream"
    forbidden: bool = False  # the bot account may not read it (403 on v1, 404 on v2)
    reply_to: str | None = None  # comments: the comment answered
    location: Literal["footer", "inline"] = "footer"  # comments
    marker: str | None = None  # inline comments: the `ac:ref` of their marker in the page
    selection: str | None = None  # inline comments: the text they were made on
    resolved: bool = False  # inline comments
    status: Literal["current", "archived"] = "current"  # pages and blog posts


@dataclass
class _Fault:
    kind: Literal["status", "reset", "truncate", "slow"]
    remaining: int
    path: str | None = None
    status: int = 503
    retry_after: str | None = None
    seconds: float = 0.0
    until: float | None = None  # a storm: every request until then (monotonic clock)
    headers: dict[str, str] = field(default_factory=dict)  # sent with the status


@dataclass
class _Answer:
    route: str
    payload: Any  # JSON, or bytes for a download
    headers: dict[str, str] = field(default_factory=dict)


class FakeConfluence:
    def __init__(
        self,
        layout: Layout = "cloud",
        *,
        username: str = DEFAULT_USER,
        token: str = DEFAULT_TOKEN,
        password: str = DEFAULT_PASSWORD,
        max_limit: int = 100,
        v2_max_limit: int = V2_LIMIT,
        context: str | None = None,
        cql_tz: timezone = CQL_TZ,
    ) -> None:
        self.layout = layout
        self.username = username
        self.token = token
        self.password = password
        self.max_limit = max_limit
        self.v2_max_limit = v2_max_limit
        self.context = context if context is not None else ("/wiki" if layout == "cloud" else "")
        self.cql_tz = cql_tz
        self.spaces: dict[str, str] = {}
        self.space_ids: dict[str, str] = {}
        # space key -> (users, groups) with the space's read ("View") permission
        self.space_readers: dict[str, tuple[list[str], list[str]]] = {}
        # space key -> ids of the Cloud space roles with its read permission (v2 names a
        # role principal by id only, not its members)
        self.space_roles: dict[str, list[str]] = {}
        self.space_permissions_api = True  # Data Center 9.1+ serves them
        self.next_in_body = True  # v2: the next link in `_links.next` too, not only `Link`
        self.content: dict[str, FakeContent] = {}
        self.users: dict[str, FakeUser] = {
            "alice": FakeUser("alice", "Alice Liddell"),
            "bob": FakeUser("bob", "Bob Builder"),
            "ivan": FakeUser("ivan", "Иван Петров"),
        }
        self.requests: Counter[str] = Counter()  # route name -> count
        self.paths: list[str] = []  # every request path (no query), in order
        self.removed_calls: list[str] = []  # v1 endpoints removed on Cloud that were called
        self._retired: list[str] = []
        self._faults: list[_Fault] = []
        self._after_listing: list[Callable[[], None]] = []
        self._unindexed: set[str] = set()
        self._near_limit = 0
        self._next_id = 10000
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.host_url = ""

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> str:
        """Serve on a free port of 127.0.0.1; returns the base URL (with context path)."""
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.host_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        # A short poll interval: shutdown() waits up to one interval.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeConfluence:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return self.host_url + self.context

    def v1_paths(self) -> set[str]:
        """The REST v1 paths requested so far (ids replaced by `{id}`)."""
        with self._lock:
            paths = [p[len(self.context) :] for p in self.paths if "/rest/api/" in p]
        return {re.sub(r"/(att)?\d+(?=/|$)", "/{id}", p) for p in paths}

    # --- data --------------------------------------------------------------------------

    def add_space(self, key: str, name: str | None = None) -> str:
        with self._lock:
            self.spaces[key] = name or f"Space {key}"
            self.space_ids[key] = str(98000 + len(self.space_ids) * 17)
            self.space_readers[key] = ([], [DEFAULT_READERS])
        return key

    def grant_space(
        self,
        key: str,
        *,
        users: Iterable[str] = (),
        groups: Iterable[str] = (),
        roles: Iterable[str] = (),
    ) -> None:
        """Who may read (view) the space: replaces the default `confluence-users`.
        `roles` (Cloud): ids of space roles granted it too."""
        with self._lock:
            self.space_readers[key] = (list(users), list(groups))
            self.space_roles[key] = list(roles)

    def add_page(
        self,
        space: str,
        title: str,
        body: str = "<p>text</p>",
        *,
        parent: str | None = None,
        labels: Iterable[str] = (),
        when: datetime | None = None,
        author: str = "alice",
        kind: Literal["page", "blogpost"] = "page",
    ) -> str:
        with self._lock:
            if space not in self.spaces:
                raise KeyError(f"no space {space}")
            content_id = self._new_id()
            stamp = when or datetime.now(UTC)
            self.content[content_id] = FakeContent(
                content_id,
                kind,
                space,
                title,
                body,
                when=stamp,
                created=stamp,
                author=author,
                parent_id=parent,
                labels=list(labels),
            )
            return content_id

    def add_folder(self, space: str, title: str, *, parent: str | None = None) -> str:
        """A Cloud folder: in the page tree, with no body."""
        return self._add_tree_item(space, title, "folder", parent)

    def add_whiteboard(
        self,
        space: str,
        title: str,
        *,
        parent: str | None = None,
        kind: Literal["whiteboard", "database", "embed"] = "whiteboard",
    ) -> str:
        """A Cloud whiteboard, database or smart link (`embed`): a title in the page tree,
        no text body in the API."""
        return self._add_tree_item(space, title, kind, parent)

    def _add_tree_item(self, space: str, title: str, kind: ContentType, parent: str | None) -> str:
        with self._lock:
            content_id = self._new_id()
            stamp = datetime.now(UTC) - timedelta(days=3)
            self.content[content_id] = FakeContent(
                content_id, kind, space, title, when=stamp, created=stamp, parent_id=parent
            )
            return content_id

    def add_blogpost(self, space: str, title: str, body: str = "<p>post</p>", **kw: Any) -> str:
        return self.add_page(space, title, body, kind="blogpost", **kw)

    def add_attachment(
        self,
        page_id: str,
        filename: str,
        data: bytes,
        media_type: str = "application/octet-stream",
        *,
        when: datetime | None = None,
    ) -> str:
        with self._lock:
            page = self.content[page_id]
            content_id = "att" + self._new_id()
            stamp = when or datetime.now(UTC)
            self.content[content_id] = FakeContent(
                content_id,
                "attachment",
                page.space_key,
                filename,
                when=stamp,
                created=stamp,
                parent_id=page_id,
                data=data,
                media_type=media_type,
            )
            return content_id

    def add_comment(
        self,
        page_id: str,
        body: str,
        *,
        author: str = "bob",
        reply_to: str | None = None,
        inline: bool = False,
        selection: str | None = None,
        when: datetime | None = None,
    ) -> str:
        """A footer comment on a page or blog post (`reply_to`: an answer to another
        comment), or with `inline` an inline comment on `selection` (its first occurrence
        in the page's body gets the comment's marker, as Confluence does, without a new
        version of the page)."""
        with self._lock:
            page = self.content[page_id]
            content_id = self._new_id()
            stamp = when or datetime.now(UTC)
            marker = None
            if inline and reply_to is None and selection:
                marker = str(uuid.uuid5(uuid.NAMESPACE_URL, content_id))
                page.body = page.body.replace(
                    selection,
                    f'<ac:inline-comment-marker ac:ref="{marker}">{selection}'
                    "</ac:inline-comment-marker>",
                    1,
                )
            self.content[content_id] = FakeContent(
                content_id,
                "comment",
                page.space_key,
                f"Re: {page.title}",
                body,
                when=stamp,
                created=stamp,
                author=author,
                parent_id=page_id,
                reply_to=reply_to,
                location="inline" if inline else "footer",
                marker=marker,
                selection=selection,
            )
            return content_id

    def resolve(self, comment_id: str, resolved: bool = True) -> None:
        """Resolve (or reopen) an inline comment: its resolution changes, its version
        does not."""
        with self._lock:
            self.content[comment_id].resolved = resolved

    def resolution(self, comment: FakeContent) -> str:
        """open | reopened | resolved, or dangling once its marked text left the page."""
        page = self.content.get(comment.parent_id or "")
        if comment.marker and (page is None or comment.marker not in page.body):
            return "dangling"
        return "resolved" if comment.resolved else "open"

    def edit(
        self,
        content_id: str,
        *,
        body: str | None = None,
        title: str | None = None,
        data: bytes | None = None,
        when: datetime | None = None,
    ) -> None:
        """A new version, last modified now (or `when`)."""
        with self._lock:
            item = self.content[content_id]
            if body is not None:
                item.body = body
            if title is not None:
                item.title = title
            if data is not None:
                item.data = data
            item.version += 1
            item.when = when or datetime.now(UTC)

    def delete(self, content_id: str) -> None:
        """Like Confluence: the page's attachments and comments go with it, its child pages
        move up to its parent; a comment's replies go with it."""
        with self._lock:
            gone = self.content.pop(content_id)
            for child in [c.id for c in self.content.values() if c.parent_id == content_id]:
                if self.content[child].type in ("attachment", "comment"):
                    self.content.pop(child)
                else:
                    self.content[child].parent_id = gone.parent_id
            for reply in [c.id for c in self.content.values() if c.reply_to == content_id]:
                self.delete(reply)

    def archive(self, content_id: str, archived: bool = True) -> None:
        """Archive a page (or bring it back): its status changes, its version does not."""
        with self._lock:
            self.content[content_id].status = "archived" if archived else "current"

    def move(self, content_id: str, parent_id: str | None) -> None:
        """Move a page under another (None: to the space root); no new version, as in
        Confluence."""
        with self._lock:
            self.content[content_id].parent_id = parent_id

    def restrict(
        self, content_id: str, *, users: Iterable[str] = (), groups: Iterable[str] = ()
    ) -> None:
        with self._lock:
            item = self.content[content_id]
            item.read_users = list(users)
            item.read_groups = list(groups)

    def forbid(self, content_id: str) -> None:
        """The bot account loses read access to it: fetching it answers 403 (v1) or 404
        (v2, which does not tell the two apart)."""
        with self._lock:
            self.content[content_id].forbidden = True

    # --- fault switches ----------------------------------------------------------------

    def fail(
        self,
        count: int,
        status: int = 503,
        *,
        retry_after: str | None = None,
        headers: dict[str, str] | None = None,
        path: str | None = None,
    ) -> None:
        """The next `count` requests (to paths containing `path`) answer `status`, with
        `Retry-After: retry_after` and `headers` (Cloud's `X-RateLimit-Reset`,
        `Beta-Retry-After`, `X-Beta-RateLimit-Reset`)."""
        self._add_fault(
            _Fault(
                "status", count, path, status=status, retry_after=retry_after, headers=headers or {}
            )
        )

    def near_limit(self, count: int) -> None:
        """The next `count` answers say `X-RateLimit-NearLimit: true`, as Cloud does when
        a client is about to be throttled."""
        with self._lock:
            self._near_limit += count

    def storm(self, seconds: float, status: int = 503, *, retry_after: str | None = None) -> None:
        """Answer every request with `status` for `seconds` from now; `calm()` ends it."""
        until = time.monotonic() + seconds
        self._add_fault(_Fault("status", 0, None, status, retry_after, until=until))

    def calm(self) -> None:
        with self._lock:
            self._faults = [f for f in self._faults if f.until is None]

    def reset(self, count: int, *, path: str | None = None) -> None:
        self._add_fault(_Fault("reset", count, path))

    def truncate(self, count: int, *, path: str | None = None) -> None:
        self._add_fault(_Fault("truncate", count, path))

    def slow(self, count: int, seconds: float, *, path: str | None = None) -> None:
        self._add_fault(_Fault("slow", count, path, seconds=seconds))

    def retire(self, prefix: str) -> None:
        """Endpoints under `prefix` (after the context path, e.g. `/rest/api/search`)
        answer 410 Gone from now on."""
        with self._lock:
            self._retired.append(prefix)

    def hide_from_search(self, content_id: str) -> None:
        """Not in the search index yet (CQL lags behind new content); /content has it."""
        with self._lock:
            self._unindexed.add(content_id)

    def delete_after_listing(self, content_id: str) -> None:
        self._after_listing.append(lambda: self.delete(content_id))

    def edit_after_listing(self, content_id: str, body: str = "<p>edited mid-run</p>") -> None:
        self._after_listing.append(lambda: self.edit(content_id, body=body))

    def _add_fault(self, fault: _Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def _take_fault(self, path: str) -> _Fault | None:
        with self._lock:
            for fault in self._faults:
                if fault.until is not None:
                    if time.monotonic() < fault.until:
                        return fault
                    continue
                if fault.remaining > 0 and (fault.path is None or fault.path in path):
                    fault.remaining -= 1
                    return fault
        return None

    def _new_id(self) -> str:
        self._next_id += 1
        return str(self._next_id)

    # --- JSON shapes: v1 ---------------------------------------------------------------

    def _user(self, name: str) -> FakeUser:
        return self.users.get(name) or FakeUser(name, name.title())

    def _user_json(self, name: str) -> dict[str, Any]:
        user = self._user(name)
        if self.layout == "cloud":
            return {
                "type": "known",
                "accountId": user.account_id,
                "accountType": "atlassian",
                "publicName": user.display_name,
                "displayName": user.display_name,
            }
        return {
            "type": "known",
            "username": user.username,
            "userKey": user.user_key,
            "displayName": user.display_name,
        }

    def _group_json(self, name: str) -> dict[str, Any]:
        out = {"type": "group", "name": name}
        if self.layout == "cloud":
            out["id"] = group_id(name)
        return out

    def _stamp(self, value: datetime) -> str:
        if self.layout == "cloud":
            return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + (
                f"{value.microsecond // 1000:03d}Z"
            )
        return value.astimezone(self.cql_tz).isoformat(timespec="milliseconds")

    def _web_path(self, item: FakeContent) -> str:
        if item.type == "attachment":
            page = self.content.get(item.parent_id or "")
            return (
                f"/pages/viewpageattachments.action?pageId={item.parent_id}"
                if page
                else "/attachments"
            )
        if item.type == "comment":
            return f"/pages/viewpage.action?pageId={item.parent_id}#comment-{item.id}"
        if item.type in CONTAINER_PATHS.values():
            return f"/spaces/{item.space_key}/{item.type}/{item.id}"
        if self.layout == "cloud":
            kind = "pages" if item.type == "page" else "blog"
            return f"/spaces/{item.space_key}/{kind}/{item.id}/{quote_plus(item.title)}"
        return f"/pages/viewpage.action?pageId={item.id}"

    def _download_path(self, item: FakeContent) -> str:
        stamp = int(item.when.timestamp() * 1000)
        return (
            f"/download/attachments/{item.parent_id}/{quote(item.title)}"
            f"?version={item.version}&modificationDate={stamp}&api=v2"
        )

    def _ancestors(self, item: FakeContent) -> list[FakeContent]:
        chain: list[FakeContent] = []
        parent = self.content.get(item.parent_id or "") if item.type in TREE_TYPES else None
        while parent is not None and parent not in chain and parent is not item:
            chain.append(parent)
            parent = self.content.get(parent.parent_id or "")
        return list(reversed(chain))  # root first, as Confluence orders them

    def _restrictions_json(
        self, item: FakeContent, expand: set[str], prefix: str
    ) -> dict[str, Any]:
        users = [self._user_json(u) for u in item.read_users]
        groups = [self._group_json(g) for g in item.read_groups]
        out: dict[str, Any] = {"operation": "read"}
        inner: dict[str, Any] = {}
        for kind, values in (("user", users), ("group", groups)):
            if f"{prefix}restrictions.{kind}" in expand:
                inner[kind] = _page_of(values)
        out["restrictions"] = inner
        out["_expandable"] = {"content": f"/rest/api/content/{item.id}"}
        return out

    def _comment_extensions(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        """v1 `extensions` of a comment: where it is; an inline comment's properties and
        resolution where expanded."""
        out: dict[str, Any] = {"location": item.location}
        if item.location != "inline":
            return out
        if "extensions.inlineProperties" in expand and item.reply_to is None:
            out["inlineProperties"] = {
                "originalSelection": item.selection or "",
                "markerRef": item.marker or "",
            }
        if "extensions.resolution" in expand:
            out["resolution"] = {
                "status": self.resolution(item),
                "lastModifier": self._user_json(item.author),
                "lastModifiedDate": self._stamp(item.when),
            }
        return out

    def _metadata_json(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"_expandable": {"labels": ""}}
        if "metadata.labels" in expand:
            out = {"labels": _page_of(self._labels_json(item), limit=200)}
        if item.type == "attachment":
            out["mediaType"] = item.media_type
        return out

    def _labels_json(self, item: FakeContent) -> list[dict[str, Any]]:
        return [
            {"prefix": "global", "name": name, "id": str(1000 + i), "label": name}
            for i, name in enumerate(item.labels)
        ]

    def _content_json(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": item.id,
            "type": item.type,
            "status": item.status,
            "title": item.title,
        }
        expandable: dict[str, str] = {}

        def offer(name: str, make: Callable[[], Any]) -> None:
            if name in expand or any(e.startswith(name + ".") for e in expand):
                out[name] = make()
            else:
                expandable[name] = f"/rest/api/content/{item.id}?expand={name}"

        offer(
            "version",
            lambda: {
                "by": self._user_json(item.author),
                "when": self._stamp(item.when),
                "number": item.version,
                "minorEdit": False,
            },
        )
        offer(
            "history",
            lambda: {
                "latest": True,
                "createdBy": self._user_json(item.author),
                "createdDate": self._stamp(item.created),
                **(
                    {
                        "lastUpdated": {
                            "by": self._user_json(item.author),
                            "when": self._stamp(item.when),
                            "number": item.version,
                        }
                    }
                    if "history.lastUpdated" in expand
                    else {}
                ),
            },
        )
        offer(
            "space",
            lambda: {
                "key": item.space_key,
                "name": self.spaces.get(item.space_key, ""),
                "type": "global",
            },
        )
        if item.type in ("blogpost", "comment", *TREE_TYPES):
            offer(
                "ancestors",
                lambda: [
                    self._content_json(a, set())
                    for a in (
                        self._ancestors(item)
                        if item.type != "comment"
                        else [self.content[item.reply_to]]
                        if item.reply_to in self.content
                        else []
                    )
                ],
            )
            offer("body", lambda: self._v1_body(item, expand))
        if item.type in ("attachment", "comment"):
            offer(
                "container",
                lambda: self._content_json(
                    self.content[item.parent_id or ""],
                    {e.removeprefix("container.") for e in expand if e.startswith("container.")},
                ),
            )
        if item.type == "attachment":
            out["extensions"] = {"mediaType": item.media_type, "fileSize": len(item.data)}
        if item.type == "comment":
            out["extensions"] = self._comment_extensions(item, expand)
        offer("metadata", lambda: self._metadata_json(item, expand))
        offer(
            "restrictions",
            lambda: {"read": self._restrictions_json(item, expand, "restrictions.read.")},
        )
        links: dict[str, str] = {
            "webui": self._web_path(item),
            "self": f"{self.base_url}/rest/api/content/{item.id}",
            "tinyui": f"/x/{item.id}",
        }
        if item.type == "attachment":
            links["download"] = self._download_path(item)
        out["_links"] = links
        out["_expandable"] = expandable
        return out

    # --- JSON shapes: v2 ---------------------------------------------------------------

    def _v2_version(self, item: FakeContent) -> dict[str, Any]:
        return {
            "createdAt": self._stamp(item.when),
            "message": "",
            "number": item.version,
            "minorEdit": False,
            "authorId": self._user(item.author).account_id,
        }

    def _v1_body(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "body.storage" in expand:
            out["storage"] = {"value": item.body, "representation": "storage"}
        if "body.view" in expand:
            out["view"] = {"value": self.render_view(item), "representation": "view"}
        return out or {"_expandable": {"storage": "", "view": ""}}

    def render_view(self, item: FakeContent) -> str:
        """The page as Confluence shows it, as far as links into it go: every heading
        (h1-h6, wherever it is) with the id Confluence gives it. Cloud: the text with
        whitespace runs as `-`, `[inlineExtension]` for each macro in it; Data Center:
        `PageTitle-Text` without whitespace; a repeated id gets `.1`, `.2`; no id for a
        heading without a letter or digit."""
        from lxml import html as lxml_html

        body = re.sub(
            r"<!\[CDATA\[(.*?)\]\]>", lambda m: html.escape(m.group(1)), item.body, flags=re.S
        )
        root = lxml_html.fragment_fromstring(body or "<p></p>", create_parent="div")
        seen: Counter[str] = Counter()
        for heading in list(root.iter("h1", "h2", "h3", "h4", "h5", "h6")):
            if any(a.tag == "ac:plain-text-body" for a in heading.iterancestors()):
                continue
            macros = [m for m in heading.iter() if m.tag == "ac:structured-macro"]
            for macro in macros:
                self._render_anchor_macro(macro, item.title)
                macro.drop_tree()
            words = heading.text_content().split()
            if not any(ch.isalnum() for word in words for ch in word):
                continue
            if self.layout == "cloud":
                base = "[inlineExtension]" * len(macros) + "-".join(words)
            else:
                base = "".join(item.title.split()) + "-" + "".join(words)
            heading.set("id", f"{base}.{seen[base]}" if seen[base] else base)
            seen[base] += 1
        for macro in list(root.iter("ac:structured-macro")):
            self._render_anchor_macro(macro, item.title)
        return "".join(lxml_html.tostring(child, encoding="unicode") for child in root)

    def _render_anchor_macro(self, macro: Any, title: str) -> None:
        """An anchor macro as the page shows it: an empty span whose id is the anchor's
        name on Cloud, `PageTitle-name` (title without whitespace) on Data Center."""
        if macro.get("ac:name") != "anchor":
            return
        name = "".join(
            p.text_content() for p in macro.iter("ac:parameter") if p.get("ac:name") == ""
        ).strip()
        if name:
            anchor = name if self.layout == "cloud" else "".join(title.split()) + "-" + name
            macro.addprevious(
                macro.makeelement("span", {"class": "confluence-anchor-link", "id": anchor})
            )

    def _v2_body(self, item: FakeContent, query: dict[str, list[str]]) -> dict[str, Any]:
        fmt = query.get("body-format", [""])[0]
        if fmt == "storage":
            return {"storage": {"representation": "storage", "value": item.body}}
        if fmt == "view":
            return {"view": {"representation": "view", "value": self.render_view(item)}}
        if fmt in ("", "none"):
            return {}
        if fmt == "atlas_doc_format":
            return {"atlas_doc_format": {"representation": "atlas_doc_format", "value": "{}"}}
        raise _BadRequest(f"unsupported body-format {fmt}")

    def _v2_common(self, item: FakeContent) -> dict[str, Any]:
        """What every v2 content object of a space says of itself."""
        return {
            "id": item.id,
            "status": item.status,
            "title": item.title,
            "spaceId": self.space_ids[item.space_key],
            "authorId": self._user(item.author).account_id,
            "createdAt": self._stamp(item.created),
            "version": self._v2_version(item),
        }

    def _v2_page(self, item: FakeContent, query: dict[str, list[str]]) -> dict[str, Any]:
        out: dict[str, Any] = {
            **self._v2_common(item),
            "body": self._v2_body(item, query),
            "_links": {
                "webui": self._web_path(item),
                "editui": f"/pages/resumedraft.action?draftId={item.id}",
                "tinyui": f"/x/{item.id}",
            },
        }
        if item.type == "page":
            out.update(self._v2_place(item))
        if query.get("include-labels", [""])[0] == "true":
            out["labels"] = {"results": self._labels_json(item), "meta": {"hasMore": False}}
        return out

    def _v2_place(self, item: FakeContent) -> dict[str, Any]:
        """Where content sits in the page tree, as v2 says it."""
        parent = self.content.get(item.parent_id or "")
        return {
            "parentId": parent.id if parent else None,
            "parentType": parent.type if parent else None,
            "position": int(item.id) % 1000,
            "ownerId": self._user(item.author).account_id,
        }

    def _v2_container(self, item: FakeContent) -> dict[str, Any]:
        """A folder, whiteboard, database or smart link (v2 `FolderSingle`,
        `WhiteboardSingle`...): no body."""
        return {
            **self._v2_common(item),
            "type": item.type,
            **self._v2_place(item),
            "_links": {"webui": self._web_path(item), "base": self.base_url},
        }

    def _v2_attachment(self, item: FakeContent) -> dict[str, Any]:
        container = self.content.get(item.parent_id or "")
        owner = "blogPostId" if container and container.type == "blogpost" else "pageId"
        download = self._download_path(item)
        return {
            "id": item.id,
            "status": "current",
            "title": item.title,
            "createdAt": self._stamp(item.created),
            owner: item.parent_id,
            "mediaType": item.media_type,
            "mediaTypeDescription": item.media_type,
            "comment": "",
            "fileId": hashlib.sha1(item.id.encode()).hexdigest(),
            "fileSize": len(item.data),
            "webuiLink": self._web_path(item),
            "downloadLink": download,
            "version": self._v2_version(item),
            "_links": {"webui": self._web_path(item), "download": download},
        }

    def _v2_comment(self, item: FakeContent, query: dict[str, list[str]]) -> dict[str, Any]:
        container = self.content.get(item.parent_id or "")
        owner = "blogPostId" if container and container.type == "blogpost" else "pageId"
        out: dict[str, Any] = {
            "id": item.id,
            "status": "current",
            "title": item.title,
            owner: item.parent_id,
            "version": self._v2_version(item),
            "body": self._v2_body(item, query),
            "_links": {"webui": self._web_path(item)},
        }
        if item.reply_to:
            out["parentCommentId"] = item.reply_to
        if item.location == "inline":
            out["resolutionStatus"] = self.resolution(item)
            if item.reply_to is None:
                out["properties"] = {
                    "inlineMarkerRef": item.marker or "",
                    "inlineOriginalSelection": item.selection or "",
                }
        return out

    def _v2_space(self, key: str) -> dict[str, Any]:
        home = next(
            (
                c.id
                for c in self._visible(self.content.values())
                if c.space_key == key and c.type == "page" and c.parent_id is None
            ),
            None,
        )
        return {
            "id": self.space_ids[key],
            "key": key,
            "name": self.spaces[key],
            "type": "global",
            "status": "current",
            "authorId": self._user("alice").account_id,
            "createdAt": self._stamp(datetime(2020, 1, 1, tzinfo=UTC)),
            "homepageId": home,
            "_links": {"webui": f"/spaces/{key}"},
        }

    def _v2_permissions(self, key: str) -> list[dict[str, Any]]:
        users, groups = self.space_readers[key]
        principals = [{"type": "user", "id": self._user(u).account_id} for u in users] + [
            {"type": "group", "id": group_id(g)} for g in groups
        ]
        principals += [{"type": "role", "id": r} for r in self.space_roles.get(key, [])]
        out: list[dict[str, Any]] = []
        for principal in principals:
            for op, target in (("read", "space"), ("create", "page"), ("create", "comment")):
                out.append(
                    {
                        "id": str(len(out) + 1),
                        "principal": principal,
                        "operation": {"key": op, "targetType": target},
                    }
                )
        # The space's administrators may always do more; reading is what decides access.
        out.append(
            {
                "id": str(len(out) + 1),
                "principal": {"type": "group", "id": group_id("site-admins")},
                "operation": {"key": "administer", "targetType": "space"},
            }
        )
        return out

    def _dc_permissions(self, key: str) -> list[dict[str, Any]]:
        users, groups = self.space_readers[key]
        subjects = [
            {
                "type": "user",
                "userKey": self._user(u).user_key,
                "displayName": self._user(u).display_name,
            }
            for u in users
        ] + [{"type": "group", "name": g, "displayName": g} for g in groups]
        out: list[dict[str, Any]] = []
        for subject in subjects:
            for op, target in (("read", "space"), ("create", "page")):
                out.append(
                    {
                        "operation": {"targetType": target, "operationKey": op},
                        "subject": subject,
                        "spaceKey": key,
                        "spaceId": int(self.space_ids[key]),
                    }
                )
        return out

    # --- queries -----------------------------------------------------------------------

    def _visible(self, items: Iterable[FakeContent]) -> list[FakeContent]:
        return sorted(
            (c for c in items if c.space_key in self.spaces),
            key=lambda c: int(c.id.removeprefix("att")),
        )

    def _readable(self, items: Iterable[FakeContent]) -> list[FakeContent]:
        """What v2 lists: only content the account may view."""
        return [c for c in self._visible(items) if not c.forbidden]

    def _cql(self, cql: str) -> list[FakeContent]:
        where = re.split(r"\border\s+by\b", cql, flags=re.I)[0]
        tests: list[Callable[[FakeContent], bool]] = []
        for clause in re.split(r"\s+and\s+", where.strip(), flags=re.I):
            tests.append(self._cql_clause(clause.strip()))
        # Archived content is not searched (CQL finds current content).
        indexed = (
            c
            for c in self.content.values()
            if c.id not in self._unindexed and c.status == "current"
        )
        return [c for c in self._visible(indexed) if all(t(c) for t in tests)]

    def _cql_clause(self, clause: str) -> Callable[[FakeContent], bool]:
        match = re.fullmatch(r"(\w+)\s*(=|>=|>|<=|<|\bin\b)\s*(.+)", clause, flags=re.I)
        if not match:
            raise _BadRequest(f"Could not parse cql : {clause}")
        name, op, raw = match.group(1).lower(), match.group(2).lower(), match.group(3).strip()
        if op == "in":
            values = [v.strip().strip('"') for v in raw.strip("()").split(",")]
        else:
            values = [raw.strip('"')]
        if name in ("space", "type", "id"):
            attr = {"space": "space_key", "type": "type", "id": "id"}[name]
            if op not in ("=", "in"):
                raise _BadRequest(f"operator {op} is not supported for {name}")
            return lambda c: getattr(c, attr) in values
        if name == "lastmodified":
            try:
                local = datetime.strptime(values[0], "%Y/%m/%d %H:%M").replace(tzinfo=self.cql_tz)
            except ValueError:
                try:
                    local = datetime.strptime(values[0], "%Y-%m-%d").replace(tzinfo=self.cql_tz)
                except ValueError:
                    raise _BadRequest(f"bad date in cql: {values[0]}") from None
            compare: dict[str, Callable[[datetime], bool]] = {
                ">=": lambda w: w >= local,
                ">": lambda w: w > local,
                "<=": lambda w: w <= local,
                "<": lambda w: w < local,
                "=": lambda w: w == local,
            }
            check = compare[op]
            # CQL compares at minute precision.
            return lambda c: check(c.when.replace(second=0, microsecond=0))
        raise _BadRequest(f"unsupported cql field {name}")

    def _page(
        self,
        items: list[FakeContent],
        query: dict[str, list[str]],
        path: str,
        render: Callable[[FakeContent], Any],
    ) -> dict[str, Any]:
        """A v1 page of results: `start` on Data Center, an opaque cursor on Cloud."""
        limit = min(int(query.get("limit", ["25"])[0]), self.max_limit)
        if self.layout == "cloud":
            start = _decode_cursor(query.get("cursor", [""])[0])
        else:
            start = int(query.get("start", ["0"])[0])
        window = items[start : start + limit]
        out: dict[str, Any] = {
            "results": [render(c) for c in window],
            "start": start,
            "limit": limit,
            "size": len(window),
            "_links": {"base": self.base_url, "context": self.context},
        }
        if path.endswith("/search"):
            out["totalSize"] = len(items)
        if start + limit < len(items):
            keep = {k: v for k, v in query.items() if k not in ("start", "cursor", "limit")}
            params = "&".join(f"{k}={quote(v[0], safe=',')}" for k, v in keep.items())
            if self.layout == "cloud":
                paging = f"next=true&cursor={_encode_cursor(start + limit)}&limit={limit}"
            else:
                paging = f"start={start + limit}&limit={limit}"
            out["_links"]["next"] = f"{path[len(self.context) :]}?{params}&{paging}"
        return out

    def _v2_list(
        self,
        items: list[Any],
        query: dict[str, list[str]],
        path: str,
        render: Callable[[Any], Any],
        route: str,
    ) -> _Answer:
        """A v2 page of results; the next one through `_links.next` and `Link`, both
        relative to the host (they carry the context path)."""
        try:
            limit = int(query.get("limit", ["25"])[0])
        except ValueError:
            raise _BadRequest("limit must be a number") from None
        if not 1 <= limit <= V2_LIMIT:
            raise _BadRequest(f"limit must be between 1 and {V2_LIMIT}")
        limit = min(limit, self.v2_max_limit)
        start = _decode_cursor(query.get("cursor", [""])[0])
        window = items[start : start + limit]
        links: dict[str, str] = {"base": self.base_url}
        headers: dict[str, str] = {}
        if start + limit < len(items):
            keep = [(k, v[0]) for k, v in query.items() if k != "cursor"]
            keep.append(("cursor", _encode_cursor(start + limit)))
            next_link = f"{path}?{urlencode(keep)}"
            headers["Link"] = f'<{next_link}>; rel="next", <{self.base_url}>; rel="base"'
            if self.next_in_body:
                links["next"] = next_link
        return _Answer(route, {"results": [render(c) for c in window], "_links": links}, headers)

    def _route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> _Answer:
        """The answer to an authenticated request."""
        if not path.startswith(self.context + "/"):
            raise _NotFound("no such path (wrong context path?)")
        rel = path[len(self.context) :]
        with self._lock:
            if any(rel.startswith(prefix) for prefix in self._retired):
                raise _Gone("this endpoint has been removed")
            if method == "POST":
                if self.layout == "cloud" and rel == "/api/v2/users-bulk":
                    return self._users_bulk(body)
                raise _NotFound("no such resource")
            if rel.startswith("/download/"):
                return self._download(rel)
            if self.layout == "cloud":
                if rel.startswith("/api/v2/"):
                    return self._route_v2(rel[len("/api/v2") :], path, query)
                if rel.startswith("/rest/api/") and not _CLOUD_V1_ALIVE.fullmatch(rel):
                    self.removed_calls.append(rel)
                    raise _Removed(
                        "This API has been removed. Use the Confluence REST API v2 instead."
                    )
            return self._route_v1(rel, path, query)

    def _route_v1(self, rel: str, path: str, query: dict[str, list[str]]) -> _Answer:
        expand = {e.strip() for e in query.get("expand", [""])[0].split(",") if e.strip()}
        if m := re.fullmatch(r"/rest/api/space/([^/]+)(/permissions)?", rel):
            key = unquote(m.group(1))
            if key not in self.spaces:
                raise _NotFound(f"No space with key : {key}")
            if m.group(2):
                if not self.space_permissions_api:
                    raise _NotFound("no such resource")
                return _Answer("space_permissions", self._dc_permissions(key))
            return _Answer(
                "space",
                {
                    "id": int(self.space_ids[key]),
                    "key": key,
                    "name": self.spaces[key],
                    "type": "global",
                    "_links": {"webui": f"/spaces/{key}", "base": self.base_url},
                },
            )
        if rel == "/rest/api/user":
            key = query.get("key", [""])[0]
            for name in self.users:
                if self._user(name).user_key == key:
                    return _Answer("user", self._user_json(name))
            raise _NotFound("No user found")
        if rel == "/rest/api/group/by-id":
            wanted = query.get("id", [""])[0]
            names = {g for _, groups in self.space_readers.values() for g in groups} | {
                g for c in self.content.values() for g in c.read_groups
            }
            for name in names:
                if group_id(name) == wanted:
                    return _Answer("group", self._group_json(name))
            raise _NotFound("No group found")
        if rel == "/rest/api/content":
            kind = query.get("type", ["page"])[0]
            key = query.get("spaceKey", [""])[0]
            status = query.get("status", ["current"])[0]
            if key and key not in self.spaces:
                raise _NotFound(f"No space with key : {key}")
            items = self._visible(
                c
                for c in self.content.values()
                if c.type == kind and (not key or c.space_key == key) and c.status == status
            )
            return _Answer(
                "list", self._page(items, query, path, lambda c: self._content_json(c, expand))
            )
        if rel in ("/rest/api/content/search", "/rest/api/search"):
            items = self._cql(query.get("cql", [""])[0])
            if rel == "/rest/api/content/search":
                return _Answer(
                    "search",
                    self._page(items, query, path, lambda c: self._content_json(c, expand)),
                )
            inner = {e.removeprefix("content.") for e in expand if e.startswith("content.")}
            return _Answer(
                "search", self._page(items, query, path, lambda c: self._search_json(c, inner))
            )
        if m := re.fullmatch(r"/rest/api/content/([^/]+)(/.*)?", rel):
            item = self.content.get(m.group(1))
            if item is None or item.space_key not in self.spaces:
                raise _NotFound(f"No content found with id: ContentId{{id={m.group(1)}}}")
            if item.forbidden:
                raise _Forbidden("User not permitted to view content")
            sub = m.group(2) or ""
            if sub == "":
                return _Answer("content", self._content_json(item, expand))
            if sub in ("/child/attachment", "/child/comment"):
                child_type = sub.rsplit("/", 1)[1]
                filename = query.get("filename", [None])[0]
                locations = set(query.get("location", []))
                depth_all = query.get("depth", [""])[0] == "all"
                items = self._visible(
                    c
                    for c in self.content.values()
                    if c.type == child_type
                    and c.parent_id == item.id
                    and (filename is None or c.title == filename)
                    and (not locations or self._v1_location(c) in locations)
                    and (child_type != "comment" or depth_all or c.reply_to is None)
                )
                return _Answer(
                    "children",
                    self._page(items, query, path, lambda c: self._content_json(c, expand)),
                )
            if sub == "/restriction/byOperation/read":
                expand = {"restrictions.user", "restrictions.group"} & expand
                return _Answer("restrictions", self._restrictions_json(item, expand, ""))
        raise _NotFound("no such resource")

    def _v1_location(self, comment: FakeContent) -> str:
        """v1 lists open inline comments under `inline`, resolved ones under `resolved`
        (a reply, under its thread's)."""
        if comment.location != "inline":
            return "footer"
        root = comment
        while root.reply_to in self.content:
            root = self.content[root.reply_to or ""]
        return "resolved" if self.resolution(root) == "resolved" else "inline"

    def _search_json(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        """A `/rest/api/search` result: the content (with its expansions) and its
        search-result fields."""
        return {
            "content": self._content_json(item, expand),
            "title": item.title,
            "excerpt": "",
            "url": self._web_path(item),
            "resultGlobalContainer": {
                "title": self.spaces.get(item.space_key, ""),
                "displayUrl": f"/spaces/{item.space_key}",
            },
            "entityType": "content",
            "lastModified": self._stamp(item.when),
            "friendlyLastModified": "recently",
            "score": 1.0,
        }

    def _route_v2(self, rel: str, path: str, query: dict[str, list[str]]) -> _Answer:
        def ids(name: str) -> list[str]:
            values = [v for raw in query.get(name, []) for v in raw.split(",") if v]
            if len(values) > V2_LIMIT:
                raise _BadRequest(f"at most {V2_LIMIT} values of {name}")
            return values

        if rel == "/spaces":
            keys, space_ids = set(ids("keys")), set(ids("ids"))
            found = [
                k
                for k in self.spaces
                if (not keys or k in keys) and (not space_ids or self.space_ids[k] in space_ids)
            ]
            return self._v2_list(found, query, path, self._v2_space, "space")
        if m := re.fullmatch(r"/spaces/(\d+)(/[a-z-]+)?", rel):
            key = next((k for k, v in self.space_ids.items() if v == m.group(1)), None)
            if key is None:
                raise _NotFound("space not found")
            sub = m.group(2) or ""
            if sub == "":
                return _Answer("space", self._v2_space(key))
            if sub == "/permissions":
                return self._v2_list(
                    self._v2_permissions(key), query, path, lambda p: p, "space_permissions"
                )
            if sub in ("/pages", "/blogposts"):
                kind = "page" if sub == "/pages" else "blogpost"
                statuses = {v for raw in query.get("status", ["current"]) for v in raw.split(",")}
                items = self._readable(
                    c
                    for c in self.content.values()
                    if c.type == kind and c.space_key == key and c.status in statuses
                )
                return self._v2_list(items, query, path, lambda c: self._v2_page(c, query), "list")
            raise _NotFound("no such resource")
        if rel in ("/pages", "/blogposts"):
            kind = "page" if rel == "/pages" else "blogpost"
            wanted = set(ids("id"))
            items = self._readable(
                c
                for c in self.content.values()
                if c.type == kind and (not wanted or c.id in wanted)
            )
            return self._v2_list(items, query, path, lambda c: self._v2_page(c, query), "pages")
        if rel == "/attachments":
            items = self._readable(c for c in self.content.values() if c.type == "attachment")
            return self._v2_list(items, query, path, self._v2_attachment, "attachments")
        if m := re.fullmatch(r"/(footer|inline)-comments", rel):
            items = self._readable(
                c for c in self.content.values() if c.type == "comment" and c.location == m[1]
            )
            return self._v2_list(
                items, query, path, lambda c: self._v2_comment(c, query), "comments"
            )
        if m := re.fullmatch(r"/(footer|inline)-comments/(\d+)/children", rel):
            parent = self.content.get(m.group(2))
            if parent is None or parent.type != "comment" or parent.location != m[1]:
                raise _NotFound("comment not found")
            items = self._readable(
                c for c in self.content.values() if c.type == "comment" and c.reply_to == parent.id
            )
            return self._v2_list(
                items, query, path, lambda c: self._v2_comment(c, query), "comments"
            )
        if (m := re.fullmatch(r"/([a-z]+)/(\d+)(/ancestors)?", rel)) and m[1] in CONTAINER_PATHS:
            item = self.content.get(m.group(2))
            if item is None or item.type != CONTAINER_PATHS[m[1]] or item.forbidden:
                raise _NotFound(f"{CONTAINER_PATHS[m[1]]} not found")
            if m.group(3):
                return self._v2_ancestors(item)
            return _Answer(item.type, self._v2_container(item))
        if m := re.fullmatch(r"/attachments/((?:att)?\d+)", rel):
            item = self.content.get(m.group(1)) or self.content.get("att" + m.group(1))
            if item is None or item.type != "attachment" or item.forbidden:
                raise _NotFound("attachment not found")
            return _Answer("attachment", self._v2_attachment(item))
        if m := re.fullmatch(r"/(pages|blogposts)/(\d+)(/[a-z-]+)?", rel):
            kind = "page" if m.group(1) == "pages" else "blogpost"
            item = self.content.get(m.group(2))
            if item is None or item.type != kind or item.forbidden:
                raise _NotFound("content not found")
            sub = m.group(3) or ""
            if sub == "":
                return _Answer("content", self._v2_page(item, query))
            if sub == "/labels":
                return self._v2_list(
                    self._labels_json(item),
                    query,
                    path,
                    lambda x: {k: x[k] for k in ("id", "name", "prefix")},
                    "labels",
                )
            if sub == "/ancestors" and kind == "page":
                return self._v2_ancestors(item)
            if sub == "/attachments":
                items = self._readable(
                    c
                    for c in self.content.values()
                    if c.type == "attachment" and c.parent_id == item.id
                )
                return self._v2_list(items, query, path, self._v2_attachment, "attachments")
            if sub in ("/footer-comments", "/inline-comments"):
                location = sub[1:].split("-")[0]
                items = self._readable(
                    c
                    for c in self.content.values()
                    if c.type == "comment"
                    and c.parent_id == item.id
                    and c.location == location
                    and c.reply_to is None
                )
                return self._v2_list(
                    items, query, path, lambda c: self._v2_comment(c, query), "comments"
                )
        raise _NotFound("no such resource")

    def _v2_ancestors(self, item: FakeContent) -> _Answer:
        chain = [{"id": a.id, "type": a.type} for a in self._ancestors(item)]
        return _Answer("ancestors", {"results": chain, "_links": {"base": self.base_url}})

    def _users_bulk(self, body: bytes) -> _Answer:
        try:
            wanted = json.loads(body)["accountIds"]
        except (ValueError, KeyError, TypeError):
            raise _BadRequest("accountIds is required") from None
        if not isinstance(wanted, list) or not 1 <= len(wanted) <= V2_LIMIT:
            raise _BadRequest(f"between 1 and {V2_LIMIT} accountIds")
        known = {self._user(n).account_id: self._user(n) for n in self.users}
        results = [
            {
                "accountId": account,
                "accountType": "atlassian",
                "accountStatus": "active",
                "displayName": known[account].display_name,
                "publicName": known[account].display_name,
            }
            for account in wanted
            if account in known
        ]
        return _Answer("users", {"results": results, "_links": {"base": self.base_url}})

    def _download(self, rel: str) -> _Answer:
        if m := re.fullmatch(r"/download/attachments/(\d+)/([^/]+)", rel):
            page_id, name = m.group(1), unquote(m.group(2))
            for c in self.content.values():
                if c.type == "attachment" and c.parent_id == page_id and c.title == name:
                    return _Answer("download", c.data)
        raise _NotFound("attachment not found")

    def _authorized(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            return self.layout == "dc" and value == self.token
        if scheme.lower() == "basic":
            user, _, secret = base64.b64decode(value).decode().partition(":")
            allowed = {self.token} if self.layout == "cloud" else {self.password, self.token}
            return user == self.username and secret in allowed
        return False

    def _after_list(self) -> None:
        with self._lock:
            actions, self._after_listing = self._after_listing, []
        for action in actions:
            action()


class _NotFound(Exception):
    pass


class _Forbidden(Exception):
    pass


class _BadRequest(Exception):
    pass


class _Gone(Exception):
    """410: an endpoint retired by `retire()`."""


class _Removed(_Gone):
    """410: a v1 endpoint Atlassian removed on Cloud."""


_ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (_NotFound, 404, "not_found"),
    (_Forbidden, 403, "forbidden"),
    (_BadRequest, 400, "bad_request"),
    (_Removed, 410, "removed"),
    (_Gone, 410, "retired"),
)


DRAWIO_MEDIA_TYPE = "application/vnd.jgraph.mxfile"
GLIFFY_MEDIA_TYPE = "application/gliffy+json"


def _parameters(params: dict[str, str]) -> str:
    return "".join(
        f'<ac:parameter ac:name="{name}">{html.escape(value)}</ac:parameter>'
        for name, value in params.items()
    )


def drawio_macro(
    api: FakeConfluence, name: str, page_id: str, *, include: bool = False, revision: int = 1
) -> str:
    """The macro draw.io writes for the diagram `name` on `page_id`: `drawio` on its own
    page, `inc-drawio` (`include`) on a page that shows it from `page_id`."""
    params = {"diagramName": name, "diagramDisplayName": name, "pageId": page_id}
    if api.layout == "cloud":
        params = {"mVer": "2", "zoom": "1", "simple": "0", "inComment": "0", **params}
        params |= {"lbox": "1", "contentVer": str(revision), "baseUrl": api.base_url}
    params |= {"includedDiagram": "1"} if include else {"revision": str(revision)}
    macro = "inc-drawio" if include else "drawio"
    return (
        f'<ac:structured-macro ac:name="{macro}" ac:schema-version="1" '
        f'ac:macro-id="{uuid.uuid4()}">{_parameters(params)}</ac:structured-macro>'
    )


def gliffy_macro(api: FakeConfluence, name: str, page_id: str, *, version: int = 1) -> str:
    """The macro Gliffy writes for the diagram `name` on `page_id`."""
    params = {"name": name, "displayName": name, "pagePin": str(version)}
    if api.layout == "cloud":
        params |= {"containerId": page_id, "macroId": str(uuid.uuid4())}
    return (
        f'<ac:structured-macro ac:name="gliffy" ac:schema-version="1">{_parameters(params)}'
        "</ac:structured-macro>"
    )


def image_markup(filename: str, alt: str = "", *, page: tuple[str, str] | None = None) -> str:
    """A picture of an attachment, of another page's where `page` (space key, title)."""
    holder = (
        f'<ri:page ri:space-key="{html.escape(page[0])}" '
        f'ri:content-title="{html.escape(page[1])}"/>'
        if page
        else ""
    )
    return (
        f'<ac:image ac:alt="{html.escape(alt)}"><ri:attachment '
        f'ri:filename="{html.escape(filename)}">{holder}</ri:attachment></ac:image>'
    )


def _page_of(values: list[dict[str, Any]], limit: int = 100) -> dict[str, Any]:
    return {"results": values, "start": 0, "limit": limit, "size": len(values)}


def _encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"pos:{position}".encode()).decode()


def _decode_cursor(cursor: str) -> int:
    if not cursor:
        return 0
    try:
        return int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1])
    except (ValueError, IndexError):
        raise _BadRequest("invalid cursor") from None


class _Handler(BaseHTTPRequestHandler):
    api: FakeConfluence
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes: without TCP_NODELAY every response
        # waits for the client's delayed ACK (40 ms).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        self._handle("GET", b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._handle("POST", self.rfile.read(length) if length else b"")

    def _handle(self, method: str, body: bytes) -> None:
        api = self.api
        parts = urlsplit(self.path)
        path = parts.path
        with api._lock:
            api.paths.append(path)
        fault = api._take_fault(path)
        if fault is not None:
            if fault.kind == "reset":
                self._reset()
                return
            if fault.kind == "slow":
                time.sleep(fault.seconds)
            if fault.kind == "status":
                api.requests["fault"] += 1
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                headers |= fault.headers
                self._json(fault.status, {"statusCode": fault.status, "message": "fault"}, headers)
                return
        if not api._authorized(self.headers.get("Authorization")):
            api.requests["unauthorized"] += 1
            self._json(401, {"statusCode": 401, "message": "Authentication failed"})
            return
        try:
            answer = api._route(method, path, parse_qs(parts.query), body)
        except (_NotFound, _Forbidden, _BadRequest, _Gone) as exc:
            status, name = next((s, n) for kind, s, n in _ERRORS if isinstance(exc, kind))
            if status == 410:
                api.requests[name] += 1
            self._json(status, {"statusCode": status, "message": str(exc)})
            return
        api.requests[answer.route] += 1
        if isinstance(answer.payload, bytes):
            data, ctype = answer.payload, "application/octet-stream"
        else:
            data, ctype = json.dumps(answer.payload).encode(), "application/json"
        if fault is not None and fault.kind == "truncate":
            self._truncated(data, ctype)
            return
        self._send(200, data, ctype, answer.headers)
        if answer.route == "list" or answer.route == "search":
            api._after_list()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype};charset=UTF-8" if "json" in ctype else ctype)
        self.send_header("Content-Length", str(len(body)))
        with self.api._lock:
            near, self.api._near_limit = self.api._near_limit > 0, max(0, self.api._near_limit - 1)
        if near:
            self.send_header("X-RateLimit-NearLimit", "true")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _truncated(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body) + 100))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_WR)

    def _reset(self) -> None:
        # SO_LINGER 0: close() sends RST, the client sees "connection reset by peer".
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

    def finish(self) -> None:
        with contextlib.suppress(OSError):  # the client may have gone (reset, truncate)
            super().finish()


# --- fixture data ----------------------------------------------------------------------


@functools.cache
def tiny_pdf(text: str) -> bytes:
    import pymupdf

    doc = pymupdf.open()  # type: ignore[no-untyped-call]
    page = doc.new_page()
    page.insert_text((72, 72), text)
    data: bytes = doc.tobytes()  # type: ignore[no-untyped-call]
    doc.close()  # type: ignore[no-untyped-call]
    return data


@functools.cache
def tiny_docx(text: str) -> bytes:
    import io

    import docx

    document = docx.Document()
    document.add_heading("Attachment", level=1)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@functools.cache
def tiny_xlsx(text: str) -> bytes:
    import io

    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    assert sheet is not None
    sheet.title = "Data"
    sheet.append(["item", "value"])
    sheet.append([text, 42])
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


@functools.cache
def tiny_pptx(text: str) -> bytes:
    import io

    import pptx

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Overview"
    slide.placeholders[1].text = text
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


@dataclass
class Fixture:
    """Ids of the standard fixture content, by a readable name."""

    ids: dict[str, str]

    def __getitem__(self, name: str) -> str:
        return self.ids[name]


def rendered_anchors(api: FakeConfluence, content_id: str) -> set[str]:
    """The heading and anchor macro ids of a page as the API renders it (Cloud v2
    `body-format=view`, Data Center v1 `expand=body.view`), asked over HTTP like any
    client."""
    import requests

    item = api.content[content_id]
    if api.layout == "cloud":
        kind = "pages" if item.type == "page" else "blogposts"
        url, params = f"{api.base_url}/api/v2/{kind}/{content_id}", {"body-format": "view"}
        auth = requests.auth.HTTPBasicAuth(api.username, api.token)
    else:
        url, params = f"{api.base_url}/rest/api/content/{content_id}", {"expand": "body.view"}
        auth = None
    headers = {} if auth else {"Authorization": f"Bearer {api.token}"}
    response = requests.get(url, params=params, auth=auth, headers=headers, timeout=10)
    response.raise_for_status()
    view = response.json()["body"]["view"]["value"]
    ids = r'<(?:h[1-6]|span class="confluence-anchor-link")[^>]*\bid="([^"]*)"'
    return {html.unescape(m) for m in re.findall(ids, view)}


class ServedApi(Protocol):
    """Where a local Confluence API answers: a `FakeConfluence`, or what a benchmark's
    child process serving one reports of it."""

    @property
    def base_url(self) -> str: ...

    @property
    def layout(self) -> Layout: ...


def ingest_environment(root: Path, api: ServedApi, model: Path) -> dict[str, str]:
    """Settings for an ingest of `api` into `root` with the embedding model at `model`:
    what the benchmarks and subprocess tests set before running the pipeline."""
    return {
        "INGEST_QDRANT__PATH": str(root / "qdrant"),
        "INGEST_CACHE__DIR": str(root / "cache"),
        "INGEST_EMBEDDER__MODEL": str(model),
        "INGEST_EMBEDDER__DEVICE": "cpu",
        "INGEST_CONFLUENCE__URL": api.base_url,
        # 127.0.0.1 is no *.atlassian.net: say which API the local one serves
        "INGEST_CONFLUENCE__CLOUD": str(api.layout == "cloud").lower(),
        "INGEST_CONFLUENCE__USERNAME": DEFAULT_USER,
        "INGEST_CONFLUENCE__TOKEN": DEFAULT_TOKEN,
        # the local API answers at once; the default 20 req/s limit would time the limiter
        "INGEST_CONFLUENCE__REQUESTS_PER_SECOND": "1000",
    }


def _section(words: str) -> str:
    """A paragraph long enough to be a chunk of its own (about 200 tokens)."""
    return "<p>" + " ".join(f"{words}, point {i} of the release." for i in range(1, 21)) + "</p>"


# A page whose headings Confluence anchors in every way a citation must follow: Russian,
# punctuation kept, a repeated heading (and one in a table, which Confluence counts),
# a heading only of punctuation and one only of an emoji (no anchor: cite the page).
RELEASE_NOTES = (
    "<p>1.0 released</p>"
    + "<h2>Highlights</h2>"
    + _section("Faster installs and smaller images")
    + "<h2>Известные проблемы</h2>"
    + "<p>"
    + "Медленный запуск на старых машинах, пункт выпуска. " * 25
    + "</p>"
    + "<h3>Notes</h3>"
    + _section("Known slow start on old machines")
    + "<table><tbody><tr><th>Notes</th><th>Value</th></tr>"
    + "<tr><td><h3>Notes</h3></td><td>in a table</td></tr></tbody></table>"
    + "<h2>Upgrade (from 0.9) &amp; rollback</h2>"
    + _section("Stop the service before the upgrade")
    + "<h3>Notes</h3>"
    + _section("Rollback restores the 0.9 data directory")
    + "<h2>?!</h2>"
    + _section("Questions nobody asked")
    + "<h2>\N{ROCKET}</h2>"
    + _section("Launch day")
)


def build_fixture(api: FakeConfluence, *, when: datetime | None = None) -> Fixture:
    """Three spaces: nested pages, blog posts, attachments (PDF, DOCX, XLSX, PPTX, HTML,
    Markdown, text, and an unsupported image), Russian titles, links between pages, a
    restricted branch."""
    stamp = when or datetime.now(UTC) - timedelta(days=3)
    ids: dict[str, str] = {}
    for key, name in (("ENG", "Engineering"), ("HR", "Кадры"), ("OPS", "Operations")):
        api.add_space(key, name)
    ids["eng_home"] = api.add_page("ENG", "Engineering Home", "<h1>Welcome</h1>", when=stamp)
    ids["guide"] = api.add_page(
        "ENG",
        "Install Guide",
        '<p>See <ac:link><ri:page ri:content-title="Release Notes" /></ac:link> and '
        '<ac:link><ri:page ri:space-key="HR" ri:content-title="Отпуск и больничные" />'
        "</ac:link>.</p>",
        parent=ids["eng_home"],
        labels=["install", "howto"],
        when=stamp,
    )
    ids["notes"] = api.add_page(
        "ENG", "Release Notes", RELEASE_NOTES, parent=ids["eng_home"], when=stamp
    )
    ids["deep"] = api.add_page(
        "ENG", "Deep Child", "<p>nested three levels</p>", parent=ids["guide"], when=stamp
    )
    ids["secret"] = api.add_page(
        "ENG", "Security Runbook", "<p>restricted</p>", parent=ids["eng_home"], when=stamp
    )
    ids["secret_child"] = api.add_page(
        "ENG", "Incident Keys", "<p>more restricted</p>", parent=ids["secret"], when=stamp
    )
    api.restrict(ids["secret"], users=["alice", "bob"], groups=["security", "admins"])
    api.restrict(ids["secret_child"], users=["alice"], groups=["security"])
    ids["eng_blog"] = api.add_blogpost("ENG", "Quarterly update", "<p>Q3</p>", when=stamp)
    ids["pdf"] = api.add_attachment(
        ids["guide"], "install.pdf", tiny_pdf("Install steps"), "application/pdf", when=stamp
    )
    ids["docx"] = api.add_attachment(
        ids["guide"],
        "Руководство.docx",
        tiny_docx("Шаги установки"),
        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        when=stamp,
    )
    ids["txt"] = api.add_attachment(
        ids["notes"], "changelog.txt", b"v1.0: first\n", "text/plain", when=stamp
    )
    ids["png"] = api.add_attachment(
        ids["notes"], "diagram.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 64, "image/png", when=stamp
    )
    ids["xlsx"] = api.add_attachment(
        ids["notes"],
        "metrics.xlsx",
        tiny_xlsx("uptime"),
        "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        when=stamp,
    )
    ids["pptx"] = api.add_attachment(
        ids["eng_home"],
        "Обзор.pptx",
        tiny_pptx("Архитектура"),
        "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        when=stamp,
    )
    ids["html"] = api.add_attachment(
        ids["eng_home"],
        "export.html",
        b"<html><body><h1>Export</h1><p>Exported page</p></body></html>",
        "text/html",
        when=stamp,
    )
    ids["md"] = api.add_attachment(
        ids["deep"],
        "README.md",
        "# Readme\n\nЧитай меня.\n".encode(),
        "text/markdown",
        when=stamp,
    )
    ids["hr_home"] = api.add_page("HR", "Главная кадров", "<p>Добро пожаловать</p>", when=stamp)
    ids["vacation"] = api.add_page(
        "HR",
        "Отпуск и больничные",
        '<p>Смотрите <ac:link><ri:page ri:space-key="ENG" ri:content-title="Install Guide" />'
        "</ac:link></p>",
        parent=ids["hr_home"],
        labels=["отпуск"],
        when=stamp,
        author="ivan",
    )
    ids["hr_blog"] = api.add_blogpost("HR", "Новости отдела", "<p>Новости</p>", when=stamp)
    ids["ops_home"] = api.add_page("OPS", "Runbooks", "<p>ops</p>", when=stamp)
    return Fixture(ids)


def add_bulk_pages(
    api: FakeConfluence,
    space: str,
    count: int,
    *,
    body_bytes: int = 200,
    when: datetime | None = None,
) -> list[str]:
    """`count` pages in `space`: a home page, a section page every 100 pages under it,
    the others under their section (three levels, as real spaces mostly are)."""
    stamp = when or datetime.now(UTC) - timedelta(days=3)
    filler = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    text = (filler * (body_bytes // len(filler) + 1))[:body_bytes]
    ids: list[str] = []
    home: str | None = None
    section: str | None = None
    for i in range(count):
        parent = section if i % 100 else home
        page_id = api.add_page(space, f"Page {i:05d}", f"<p>{text}</p>", parent=parent, when=stamp)
        if i == 0:
            home = page_id
        elif i % 100 == 0:
            section = page_id
        ids.append(page_id)
    return ids


@pytest.fixture
def confluence_api() -> Iterator[Callable[..., FakeConfluence]]:
    """Factory: `confluence_api(layout="cloud"|"dc", **options)` -> a started server,
    stopped when the test ends. Every test on a Cloud server fails if it made a request
    to a v1 endpoint that Atlassian removed on Cloud."""
    servers: list[FakeConfluence] = []

    def make(layout: Layout = "cloud", **options: Any) -> FakeConfluence:
        api = FakeConfluence(layout, **options)
        api.start()
        servers.append(api)
        return api

    yield make
    for api in servers:
        api.stop()
    removed = [call for api in servers for call in api.removed_calls]
    assert not removed, f"removed Confluence Cloud v1 endpoints were called: {removed}"
