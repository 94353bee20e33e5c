"""A local Confluence REST API (v1) on 127.0.0.1 for tests and benchmarks.

A real HTTP server (stdlib `ThreadingHTTPServer` in a thread) that serves the endpoints
the connector uses, with the JSON shapes of Confluence Cloud and Data Center:

    GET {ctx}/rest/api/space/{key}
    GET {ctx}/rest/api/content?spaceKey=&type=page|blogpost&start=&limit=&expand=
    GET {ctx}/rest/api/content/search?cql=&limit=&expand=           (start, or cursor on Cloud)
    GET {ctx}/rest/api/content/{id}?expand=
    GET {ctx}/rest/api/content/{id}/child/attachment?expand=&filename=
    GET {ctx}/rest/api/content/{id}/restriction/byOperation/read?expand=
    GET {ctx}/download/attachments/{page id}/{file name}

`layout="cloud"`: context path `/wiki`, basic auth (e-mail + API token), users by
`accountId`, opaque `cursor` pagination (`start` is ignored, so a client that builds its
own offsets instead of following `_links.next` loses pages). `layout="dc"`: no context
path (or `context=`), a personal access token as bearer or user + password as basic
auth, users by `username`, `start`/`limit` pagination. Both cap `limit` at `max_limit`
(like the real servers do, silently), honour `expand` and answer a wrong token with 401.

CQL dates are read in the account's time zone (`cql_tz`, default UTC+3) as Confluence
does, not in UTC.

Fault switches count requests: `fail(n, status, retry_after=...)`, `reset(n)`,
`truncate(n)`, `slow(n, seconds)`, each optionally limited to paths containing `path`;
`storm(seconds, status, retry_after=...)` answers every request with the status for a
while (Confluence overloaded);
`delete_after_listing(id)` and `edit_after_listing(id)` change content right after the
next listing request is answered (a page deleted / edited mid-run); `hide_from_search(id)`
keeps content out of CQL results (the search index lags behind new pages).

Use `confluence_api` (a pytest fixture factory) or `with FakeConfluence(...) as api:`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import re
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, quote, quote_plus, unquote, urlsplit

import pytest

Layout = Literal["cloud", "dc"]
ContentType = Literal["page", "blogpost", "attachment"]

DEFAULT_USER = "ingest-bot@example.com"
DEFAULT_TOKEN = "test-token-0f1e2d3c"
DEFAULT_PASSWORD = "test-password"
CQL_TZ = timezone(timedelta(hours=3))


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
    parent_id: str | None = None  # pages: the parent page; attachments: their container
    labels: list[str] = field(default_factory=list)
    read_users: list[str] = field(default_factory=list)
    read_groups: list[str] = field(default_factory=list)
    data: bytes = b""
    media_type: str = "application/octet-stream"
    forbidden: bool = False  # the bot account may not read it (403)


@dataclass
class _Fault:
    kind: Literal["status", "reset", "truncate", "slow"]
    remaining: int
    path: str | None = None
    status: int = 503
    retry_after: str | None = None
    seconds: float = 0.0
    until: float | None = None  # a storm: every request until then (monotonic clock)


class FakeConfluence:
    def __init__(
        self,
        layout: Layout = "cloud",
        *,
        username: str = DEFAULT_USER,
        token: str = DEFAULT_TOKEN,
        password: str = DEFAULT_PASSWORD,
        max_limit: int = 100,
        context: str | None = None,
        cql_tz: timezone = CQL_TZ,
    ) -> None:
        self.layout = layout
        self.username = username
        self.token = token
        self.password = password
        self.max_limit = max_limit
        self.context = context if context is not None else ("/wiki" if layout == "cloud" else "")
        self.cql_tz = cql_tz
        self.spaces: dict[str, str] = {}
        self.content: dict[str, FakeContent] = {}
        self.users: dict[str, FakeUser] = {
            "alice": FakeUser("alice", "Alice Liddell"),
            "bob": FakeUser("bob", "Bob Builder"),
            "ivan": FakeUser("ivan", "Иван Петров"),
        }
        self.requests: Counter[str] = Counter()  # route name -> count
        self.paths: list[str] = []  # every request path (no query), in order
        self._faults: list[_Fault] = []
        self._after_listing: list[Callable[[], None]] = []
        self._unindexed: set[str] = set()
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

    # --- data --------------------------------------------------------------------------

    def add_space(self, key: str, name: str | None = None) -> str:
        with self._lock:
            self.spaces[key] = name or f"Space {key}"
        return key

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
            content_id = self._new_id()
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
        """Like Confluence: the page's attachments go with it, its child pages move up to
        its parent."""
        with self._lock:
            gone = self.content.pop(content_id)
            for child in [c.id for c in self.content.values() if c.parent_id == content_id]:
                if self.content[child].type == "attachment":
                    self.content.pop(child)
                else:
                    self.content[child].parent_id = gone.parent_id

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
        """The bot account loses read access to it: fetching it answers 403."""
        with self._lock:
            self.content[content_id].forbidden = True

    # --- fault switches ----------------------------------------------------------------

    def fail(
        self,
        count: int,
        status: int = 503,
        *,
        retry_after: str | None = None,
        path: str | None = None,
    ) -> None:
        self._add_fault(_Fault("status", count, path, status=status, retry_after=retry_after))

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

    # --- JSON shapes -------------------------------------------------------------------

    def _user_json(self, name: str) -> dict[str, Any]:
        user = self.users.get(name) or FakeUser(name, name.title())
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
        parent = self.content.get(item.parent_id or "") if item.type != "attachment" else None
        while parent is not None:
            chain.append(parent)
            parent = self.content.get(parent.parent_id or "")
        return list(reversed(chain))  # root first, as Confluence orders them

    def _restrictions_json(
        self, item: FakeContent, expand: set[str], prefix: str
    ) -> dict[str, Any]:
        users = [self._user_json(u) for u in item.read_users]
        groups = [{"type": "group", "name": g} for g in item.read_groups]
        out: dict[str, Any] = {"operation": "read"}
        inner: dict[str, Any] = {}
        for kind, values in (("user", users), ("group", groups)):
            if f"{prefix}restrictions.{kind}" in expand:
                inner[kind] = _page_of(values)
        out["restrictions"] = inner
        out["_expandable"] = {"content": f"/rest/api/content/{item.id}"}
        return out

    def _metadata_json(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {"_expandable": {"labels": ""}}
        if "metadata.labels" in expand:
            labels = [
                {"prefix": "global", "name": name, "id": str(1000 + i), "label": name}
                for i, name in enumerate(item.labels)
            ]
            out = {"labels": _page_of(labels, limit=200)}
        if item.type == "attachment":
            out["mediaType"] = item.media_type
        return out

    def _content_json(self, item: FakeContent, expand: set[str]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": item.id,
            "type": item.type,
            "status": "current",
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
        if item.type != "attachment":
            offer(
                "ancestors",
                lambda: [self._content_json(a, set()) for a in self._ancestors(item)],
            )
            offer(
                "body",
                lambda: (
                    {"storage": {"value": item.body, "representation": "storage"}}
                    if "body.storage" in expand
                    else {"_expandable": {"storage": ""}}
                ),
            )
        else:
            offer(
                "container", lambda: self._content_json(self.content[item.parent_id or ""], set())
            )
            out["extensions"] = {"mediaType": item.media_type, "fileSize": len(item.data)}
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

    # --- queries -----------------------------------------------------------------------

    def _visible(self, items: Iterable[FakeContent]) -> list[FakeContent]:
        return sorted((c for c in items if c.space_key in self.spaces), key=lambda c: int(c.id))

    def _cql(self, cql: str) -> list[FakeContent]:
        where = re.split(r"\border\s+by\b", cql, flags=re.I)[0]
        tests: list[Callable[[FakeContent], bool]] = []
        for clause in re.split(r"\s+and\s+", where.strip(), flags=re.I):
            tests.append(self._cql_clause(clause.strip()))
        indexed = (c for c in self.content.values() if c.id not in self._unindexed)
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
        expand: set[str],
    ) -> dict[str, Any]:
        limit = min(int(query.get("limit", ["25"])[0]), self.max_limit)
        if self.layout == "cloud":
            cursor = query.get("cursor", [""])[0]
            start = (
                int(base64.urlsafe_b64decode(cursor.encode()).decode().split(":")[1])
                if cursor
                else 0
            )
        else:
            start = int(query.get("start", ["0"])[0])
        window = items[start : start + limit]
        out: dict[str, Any] = {
            "results": [self._content_json(c, expand) for c in window],
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
                token = base64.urlsafe_b64encode(f"pos:{start + limit}".encode()).decode()
                paging = f"next=true&cursor={token}&limit={limit}"
            else:
                paging = f"start={start + limit}&limit={limit}"
            out["_links"]["next"] = f"{path[len(self.context) :]}?{params}&{paging}"
        return out

    def _route(self, path: str, query: dict[str, list[str]]) -> tuple[str, Any]:
        """(route name, JSON or bytes) for an authenticated GET."""
        expand = {e.strip() for e in query.get("expand", [""])[0].split(",") if e.strip()}
        if not path.startswith(self.context + "/"):
            raise _NotFound("no such path (wrong context path?)")
        rel = path[len(self.context) :]
        with self._lock:
            if m := re.fullmatch(r"/rest/api/space/([^/]+)", rel):
                key = unquote(m.group(1))
                if key not in self.spaces:
                    raise _NotFound(f"No space with key : {key}")
                return "space", {
                    "id": 98000 + len(key),
                    "key": key,
                    "name": self.spaces[key],
                    "type": "global",
                    "_links": {"webui": f"/spaces/{key}", "base": self.base_url},
                }
            if rel == "/rest/api/content":
                kind = query.get("type", ["page"])[0]
                key = query.get("spaceKey", [""])[0]
                if key and key not in self.spaces:
                    raise _NotFound(f"No space with key : {key}")
                items = self._visible(
                    c
                    for c in self.content.values()
                    if c.type == kind and (not key or c.space_key == key)
                )
                return "list", self._page(items, query, path, expand)
            if rel == "/rest/api/content/search":
                items = self._cql(query.get("cql", [""])[0])
                return "search", self._page(items, query, path, expand)
            if m := re.fullmatch(r"/rest/api/content/([^/]+)(/.*)?", rel):
                item = self.content.get(m.group(1))
                if item is None or item.space_key not in self.spaces:
                    raise _NotFound(f"No content found with id: ContentId{{id={m.group(1)}}}")
                if item.forbidden:
                    raise _Forbidden("User not permitted to view content")
                sub = m.group(2) or ""
                if sub == "":
                    return "content", self._content_json(item, expand)
                if sub == "/child/attachment":
                    name = query.get("filename", [None])[0]
                    items = self._visible(
                        c
                        for c in self.content.values()
                        if c.type == "attachment"
                        and c.parent_id == item.id
                        and (name is None or c.title == name)
                    )
                    return "attachments", self._page(items, query, path, expand)
                if sub == "/restriction/byOperation/read":
                    expand = {"restrictions.user", "restrictions.group"} & expand
                    return "restrictions", self._restrictions_json(item, expand, "")
            if m := re.fullmatch(r"/download/attachments/(\d+)/([^/]+)", rel):
                page_id, name = m.group(1), unquote(m.group(2))
                for c in self.content.values():
                    if c.type == "attachment" and c.parent_id == page_id and c.title == name:
                        return "download", c.data
                raise _NotFound("attachment not found")
        raise _NotFound("no such resource")

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


def _page_of(values: list[dict[str, Any]], limit: int = 100) -> dict[str, Any]:
    return {"results": values, "start": 0, "limit": limit, "size": len(values)}


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
                self._json(fault.status, {"statusCode": fault.status, "message": "fault"}, headers)
                return
        if not api._authorized(self.headers.get("Authorization")):
            api.requests["unauthorized"] += 1
            self._json(401, {"statusCode": 401, "message": "Authentication failed"})
            return
        try:
            route, payload = api._route(path, parse_qs(parts.query))
        except _NotFound as exc:
            self._json(404, {"statusCode": 404, "message": str(exc)})
            return
        except _Forbidden as exc:
            self._json(403, {"statusCode": 403, "message": str(exc)})
            return
        except _BadRequest as exc:
            self._json(400, {"statusCode": 400, "message": str(exc)})
            return
        api.requests[route] += 1
        if isinstance(payload, bytes):
            body, ctype = payload, "application/octet-stream"
        else:
            body, ctype = json.dumps(payload).encode(), "application/json"
        if fault is not None and fault.kind == "truncate":
            self._truncated(body, ctype)
            return
        self._send(200, body, ctype)
        if route in ("list", "search"):
            api._after_list()

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    def _send(
        self, status: int, body: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", f"{ctype};charset=UTF-8" if "json" in ctype else ctype)
        self.send_header("Content-Length", str(len(body)))
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


def ingest_environment(root: Path, api: FakeConfluence, model: Path) -> dict[str, str]:
    """Settings for an ingest of `api` into `root` with the embedding model at `model`:
    what the benchmarks and subprocess tests set before running the pipeline."""
    return {
        "INGEST_QDRANT__PATH": str(root / "qdrant"),
        "INGEST_CACHE__DIR": str(root / "cache"),
        "INGEST_EMBEDDER__MODEL": str(model),
        "INGEST_EMBEDDER__DEVICE": "cpu",
        "INGEST_CONFLUENCE__URL": api.base_url,
        "INGEST_CONFLUENCE__USERNAME": DEFAULT_USER,
        "INGEST_CONFLUENCE__TOKEN": DEFAULT_TOKEN,
        # the local API answers at once; the default 20 req/s limit would time the limiter
        "INGEST_CONFLUENCE__REQUESTS_PER_SECOND": "1000",
    }


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
        "ENG", "Release Notes", "<p>1.0 released</p>", parent=ids["eng_home"], when=stamp
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
    stopped when the test ends."""
    servers: list[FakeConfluence] = []

    def make(layout: Layout = "cloud", **options: Any) -> FakeConfluence:
        api = FakeConfluence(layout, **options)
        api.start()
        servers.append(api)
        return api

    yield make
    for api in servers:
        api.stop()
