"""Confluence Cloud and Data Center/Server through atlassian-python-api (REST v1).

The `atlassian.Confluence` client is used with a `PolicySession` (connectors/http.py)
carrying the auth, so every request (listing, CQL, bodies, restrictions, downloads) goes
through the one retry/rate-limit policy, and the token lives only in the session's auth
object: the client never sees it, and no message, log line or repr contains it.

All REST paths are v1 (`rest/api/...`), joined to the configured base URL, which carries
the context path (`/wiki` on Cloud, appended when missing; e.g. `/confluence` on DC).
Links the server returns (`_links.next`, `_links.download`) are relative to that base and
joined to it, so the context path is kept; the client's own `_get_paged` would drop it
(it joins `/rest/...` links to the bare host).

- `list_refs()`: per space, pages and blog posts (`/rest/api/content?spaceKey=&type=`,
  `expand=version`) and attachments (CQL `space = K and type = attachment`), following
  `_links.next` to the end (Cloud cursors, DC start/limit; servers cap `limit`
  silently, so the page size asked for is never trusted). Any failed part makes the
  listing incomplete (`complete=False`), so the caller deletes nothing. A rejected token
  raises at once.
- `poll(since)`: CQL `lastmodified >= "yyyy/MM/dd HH:mm"`. CQL reads that date in the
  account's own time zone, which the API does not reveal, so the window opens
  `MAX_TZ_SHIFT` earlier than `since - incremental_overlap_minutes`, and results are
  then filtered exactly on their `version.when` (which carries its offset).
- `fetch()`/`fetch_many()`: the body in storage format with its metadata and ACL;
  `fetch_many` gets pages in batches through CQL `id in (...)` (two requests per hundred
  pages instead of a hundred). Attachments are downloaded through the session with the
  size limit. A page gone since the listing raises `DocumentGone`.
- Attachments are listed only for the extensions given to the constructor (pass
  `normalizers.base.supported_extensions()`): the normalizer registry stays the one
  list of formats, and connectors do not import normalizers.

ACL: `{"public", "users", "groups", "space"}`. Confluence shows a page only to those who
pass the read restrictions of the page and of every restricted ancestor. With one
restricted level (the common case) `users`/`groups` are exactly its lists; with several,
they are the principals named on every level (an intersection: it may hide a page from
someone who passes one level by user and another by group, never show it to someone
who may not read it). Users are Cloud account ids or DC user names. A query filters with
`acl.public == true OR acl.users has <user> OR acl.groups has any of <user's groups>`,
plus `acl.space` for space permissions. Restriction changes, moves and ancestor renames
bump no version number in Confluence: the listing reads every page's read restrictions
and ancestors, and a document's version is `<number>.<access digest>`, so the next run
rewrites the payloads of exactly the pages (and their attachments) whose access changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import PurePath
from typing import Any, Protocol
from urllib.parse import unquote_plus, urlsplit

import requests
from atlassian import Confluence

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import ConfluenceSettings
from connectors.base import DocumentGone, DocumentRef, Listing, SourceDocument, SourceType
from connectors.http import HttpStatusError, PolicySession

log = logging.getLogger(__name__)

PAGE_MIME = "application/vnd.atlassian.confluence.storage+xml"
PAGE_EXTENSION = ".confluence"
_RESTRICTIONS = "restrictions.read.restrictions.user,restrictions.read.restrictions.group"
PAGE_EXPAND = f"body.storage,version,history,space,ancestors,metadata.labels,{_RESTRICTIONS}"
PAGE_ACL_EXPAND = f"space,ancestors,{_RESTRICTIONS}"
ATTACHMENT_EXPAND = "version,container,space,history,metadata.labels"
LIST_EXPAND = f"version,space,ancestors,{_RESTRICTIONS}"
SEARCH_EXPAND = f"version,container,space,ancestors,{_RESTRICTIONS}"
CQL_DATE_FORMAT = "%Y/%m/%d %H:%M"
# Time zones run from UTC-12 to UTC+14: a CQL date read in any of them starts no later
# than the same wall-clock time read in UTC plus 12 hours.
MAX_TZ_SHIFT = timedelta(hours=14)
_UNSAFE_FILENAME = re.compile(r'[\\/:*?"<>|\x00-\x1f]')


class LinkTarget(Protocol):
    """What a link record (normalizers.base.LinkRecord) says about its target."""

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


@dataclass
class ContentIndex:
    """What a complete listing knows for resolving links (SPEC §3.8)."""

    by_title: dict[tuple[str, str], str] = field(default_factory=dict)  # (space, title) -> id
    page_ids: set[str] = field(default_factory=set)
    attachments: dict[tuple[str, str], str] = field(default_factory=dict)  # (page, file) -> id

    def add_page(self, space_key: str, title: str, page_id: str) -> None:
        self.by_title[(space_key, title)] = page_id
        self.page_ids.add(page_id)

    def page_by_title(self, space_key: str, title: str) -> str | None:
        return self.by_title.get((space_key, title)) or self.by_title.get(
            (space_key, unquote_plus(title))  # titles from /display/KEY/Some+Title URLs
        )

    def to_json(self) -> dict[str, list[list[str]]]:
        """A JSON form, so that whichever process prepares a batch resolves links with the
        index of the listing (Dask workers did not list)."""
        return {
            "pages": [[*key, id_] for key, id_ in sorted(self.by_title.items())],
            "page_ids": [[id_] for id_ in sorted(self.page_ids)],
            "attachments": [[*key, id_] for key, id_ in sorted(self.attachments.items())],
        }

    @classmethod
    def from_json(cls, data: dict[str, list[list[str]]]) -> ContentIndex:
        return cls(
            by_title={(space, title): id_ for space, title, id_ in data["pages"]},
            page_ids={row[0] for row in data["page_ids"]},
            attachments={(page, name): id_ for page, name, id_ in data["attachments"]},
        )


def resolve_links(
    links: Iterable[LinkTarget], index: ContentIndex, *, space_key: str, page_id: str | None = None
) -> list[str | None]:
    """The synced document id each link points to (None: external or not synced), in
    order. Links without a space key are in the linking page's space; attachment links
    without a page are to the linking page's own attachments."""
    resolved: list[str | None] = []
    for link in links:
        space = link.target_space_key or space_key
        target_page = link.target_page_id
        if target_page is None and link.target_title:
            target_page = index.page_by_title(space, link.target_title)
        if link.link_type == "attachment" and link.target_filename:
            owner = target_page or page_id
            resolved.append(index.attachments.get((owner, link.target_filename)) if owner else None)
        else:
            resolved.append(target_page if target_page in index.page_ids else None)
    return resolved


@dataclass(frozen=True)
class _Restriction:
    users: tuple[str, ...]
    groups: tuple[str, ...]

    @property
    def restricted(self) -> bool:
        return bool(self.users or self.groups)


class _BearerAuth(requests.auth.AuthBase):
    """A personal access token; its repr never shows it."""

    def __init__(self, token: str) -> None:
        self._token = token

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "_BearerAuth(<redacted>)"


class _BasicAuth(requests.auth.HTTPBasicAuth):
    def __repr__(self) -> str:
        return f"_BasicAuth({self.username!r}, <redacted>)"


class ConfluenceConnector:
    source_type: SourceType = "confluence"

    def __init__(
        self,
        settings: ConfluenceSettings,
        token: str | None = None,
        *,
        attachment_extensions: Collection[str] = (),
    ) -> None:
        if not settings.url:
            raise ConfigError("the Confluence base URL is not set", setting="confluence.url")
        parts = urlsplit(settings.url.strip())
        if not parts.scheme or not parts.hostname:
            raise ConfigError("the Confluence URL must be absolute", setting="confluence.url")
        host = parts.hostname
        self.cloud = (
            settings.cloud
            if settings.cloud is not None
            else host == "atlassian.net" or host.endswith(".atlassian.net")
        )
        # Userinfo never belongs in the URL: drop it so no message can show it.
        path = parts.path.rstrip("/")
        if self.cloud and host.endswith("atlassian.net") and not path.endswith("/wiki"):
            path += "/wiki"
        netloc = host + (f":{parts.port}" if parts.port else "")
        self.base_url = f"{parts.scheme}://{netloc}{path}"
        self.settings = settings
        self.attachment_extensions = frozenset(e.lower() for e in attachment_extensions)
        if settings.include_attachments and not self.attachment_extensions:
            log.warning("no attachment extensions given: Confluence attachments are skipped")

        self._session = PolicySession.from_settings(settings)
        secret = (
            token
            if token is not None
            else (settings.token.get_secret_value() if settings.token else None)
        )
        if secret:
            if settings.username:
                self._session.auth = _BasicAuth(settings.username, secret)
            elif self.cloud:
                raise ConfigError(
                    "Confluence Cloud needs the account e-mail beside the API token",
                    setting="confluence.username",
                )
            else:
                self._session.auth = _BearerAuth(secret)
        # The client's own retries are off: PolicySession is the one policy.
        self._client = Confluence(  # type: ignore[no-untyped-call]
            url=self.base_url,
            session=self._session,
            cloud=self.cloud,
            timeout=max(1, round(settings.timeout_s)),
            backoff_and_retry=False,
            retry_with_header=False,
        )
        self.index = ContentIndex()
        self._restrictions: dict[str, _Restriction] = {}
        # page id -> (acl, access digest), from the listing or the page's own fetch
        self._page_accesses: dict[str, tuple[dict[str, Any], str]] = {}
        self._fetching: dict[str, threading.Lock] = {}
        self._cache_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ConfluenceConnector({self.base_url!r}, spaces={self.settings.spaces!r})"

    def close(self) -> None:
        self._session.close()

    # --- listing -----------------------------------------------------------------------

    def list_refs(self) -> Listing:
        refs: list[DocumentRef] = []
        errors: list[str] = []
        index = ContentIndex()
        with self._cache_lock:
            self._restrictions.clear()
            self._page_accesses.clear()
            self._fetching.clear()
        for space in self.settings.spaces:
            try:
                self._get(f"rest/api/space/{space}")
            except HttpStatusError as exc:
                errors.append(str(self._space_error(exc, space)))
                continue
            except IngestError as exc:
                errors.append(str(exc))
                continue
            kinds = ["page", "blogpost"] if self.settings.include_blogposts else ["page"]
            listed: list[dict[str, Any]] = []
            for kind in kinds:
                params = {
                    "spaceKey": space,
                    "type": kind,
                    "status": "current",
                    "expand": LIST_EXPAND,
                    "limit": self.settings.page_size,
                }
                try:
                    for item in self._paged("rest/api/content", params):
                        listed.append(item)
                        index.add_page(space, item["title"], str(item["id"]))
                except IngestError as exc:
                    errors.append(f"listing {kind}s of space {space}: {self._listing_error(exc)}")
            try:
                refs += self._versioned_refs(listed)
            except IngestError as exc:
                errors.append(f"restrictions in space {space}: {self._listing_error(exc)}")
            if self.settings.include_attachments and self.attachment_extensions:
                cql = f'space = "{space}" and type = attachment'
                try:
                    for item in self._search(cql, "version,container"):
                        ref = self._ref(item)
                        if ref.kind == "attachment" and self._wanted(ref.title or ""):
                            refs.append(ref)
                            index.attachments[(ref.parent_document_id or "", ref.title or "")] = (
                                ref.document_id
                            )
                except IngestError as exc:
                    errors.append(
                        f"listing attachments of space {space}: {self._listing_error(exc)}"
                    )
        self.index = index
        for error in errors:
            log.warning("Confluence listing incomplete: %s", error)
        return Listing(refs=tuple(refs), complete=not errors, errors=tuple(errors))

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        """Pages, blog posts and attachments modified at or after `since` minus the
        safety overlap. Raises on any failure: a partial poll must not pass for complete."""
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        cutoff = since - timedelta(minutes=self.settings.incremental_overlap_minutes)
        window = (cutoff - MAX_TZ_SHIFT).astimezone(UTC).strftime(CQL_DATE_FORMAT)
        types = ["page"]
        if self.settings.include_blogposts:
            types.append("blogpost")
        if self.settings.include_attachments and self.attachment_extensions:
            types.append("attachment")
        spaces = ", ".join(f'"{s}"' for s in self.settings.spaces)
        cql = f'space in ({spaces}) and type in ({", ".join(types)}) and lastmodified >= "{window}"'
        for item in self._search(cql, SEARCH_EXPAND):
            if item.get("type") == "attachment" and not self._wanted(str(item.get("title"))):
                continue
            ref = self._ref(item)
            if ref.updated_at is None or datetime.fromisoformat(ref.updated_at) >= cutoff:
                yield ref

    # --- fetching ----------------------------------------------------------------------

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        if ref.kind == "attachment":
            return self._fetch_attachment(ref)
        try:
            data = self._get(f"rest/api/content/{ref.document_id}", {"expand": PAGE_EXPAND})
        except HttpStatusError as exc:
            raise self._content_error(exc, f"{ref.kind} {ref.document_id}") from None
        return self._page_document(ref, data)

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        """Pages and blog posts in batches of `page_size` through CQL `id in (...)`, one by
        one where the search index lags; attachments one by one (each is a download)."""
        results: dict[int, SourceDocument | IngestError] = {}
        pages = [(i, r) for i, r in enumerate(refs) if r.kind != "attachment"]
        size = self.settings.page_size
        for start in range(0, len(pages), size):
            batch = pages[start : start + size]
            ids = ", ".join(ref.document_id for _, ref in batch)
            try:
                found = {
                    str(item["id"]): item for item in self._search(f"id in ({ids})", PAGE_EXPAND)
                }
            except IngestError as exc:
                for i, _ in batch:
                    results[i] = self._auth_error() if _is_auth(exc) else exc
                continue
            for i, ref in batch:
                item = found.get(ref.document_id)
                try:
                    if item is None or _older(item, ref):
                        # CQL answers from the search index, which lags behind edits and
                        # new pages: only the content endpoint may say a page is gone.
                        results[i] = self.fetch(ref)
                    else:
                        results[i] = self._page_document(ref, item)
                except IngestError as exc:
                    results[i] = exc
        for i, ref in enumerate(refs):
            if ref.kind == "attachment":
                try:
                    results[i] = self._fetch_attachment(ref)
                except IngestError as exc:
                    results[i] = exc
        return [results[i] for i in range(len(refs))]

    def _page_document(self, ref: DocumentRef, data: dict[str, Any]) -> SourceDocument:
        space_key = str(data["space"]["key"])
        title = str(data["title"])
        version = data.get("version") or {}
        history = data.get("history") or {}
        author = (history.get("createdBy") or version.get("by") or {}).get("displayName")
        updated_at = _iso(version.get("when"))
        acl, access = self._access(data)
        number = version.get("number", _version_number(ref.version))
        fresh = replace(
            ref, version=_access_version(number, access), title=title, updated_at=updated_at
        )
        body = ((data.get("body") or {}).get("storage") or {}).get("value", "")
        ancestors = [
            {"id": str(a["id"]), "title": a.get("title")} for a in data.get("ancestors") or []
        ]
        return SourceDocument(
            ref=fresh,
            data=body.encode("utf-8"),
            filename=_safe_filename(title) + PAGE_EXTENSION,
            mime=PAGE_MIME,
            source_url=self._join((data.get("_links") or {}).get("webui", "")),
            title=title,
            author=author,
            updated_at=updated_at,
            labels=_labels(data),
            space_key=space_key,
            page_id=str(data["id"]),
            acl=acl,
            extra={
                "content_type": data.get("type", ref.kind),
                "ancestors": ancestors,
                "created_at": _iso(history.get("createdDate")),
                "base_url": self.base_url,
            },
        )

    def _fetch_attachment(self, ref: DocumentRef) -> SourceDocument:
        what = f"attachment {ref.title or ref.document_id}"
        try:
            data = self._get(f"rest/api/content/{ref.document_id}", {"expand": ATTACHMENT_EXPAND})
        except HttpStatusError as exc:
            raise self._content_error(exc, what) from None
        filename = str(data["title"])
        extensions = data.get("extensions") or {}
        size = extensions.get("fileSize")
        limit = self.settings.attachment_max_bytes
        if isinstance(size, int) and size > limit:
            raise IngestError(
                ErrorCode.TOO_LARGE,
                f"{size} bytes, over confluence.attachment_max_bytes ({limit})",
                subject=filename,
            )
        links = data.get("_links") or {}
        try:
            body = self._session.download(
                self._join(links["download"]), max_bytes=limit, subject=filename
            )
        except HttpStatusError as exc:
            raise self._content_error(exc, what) from None
        container = data.get("container") or {}
        page_id = str(container.get("id") or ref.parent_document_id or "")
        version = data.get("version") or {}
        updated_at = _iso(version.get("when"))
        space_key = (data.get("space") or {}).get("key")
        acl, access = self._page_access(page_id) if page_id else ({}, None)
        number = version.get("number", _version_number(ref.version))
        return SourceDocument(
            ref=replace(
                ref,
                version=_access_version(number, access),
                title=filename,
                updated_at=updated_at,
                parent_document_id=page_id or ref.parent_document_id,
            ),
            data=body,
            filename=filename,
            mime=extensions.get("mediaType") or (data.get("metadata") or {}).get("mediaType"),
            source_url=self._join(links.get("webui") or links["download"]),
            title=filename,
            author=(version.get("by") or {}).get("displayName"),
            updated_at=updated_at,
            labels=_labels(data),
            space_key=space_key,
            page_id=page_id,
            acl=acl,
            extra={"content_type": "attachment", "page_title": container.get("title")},
        )

    # --- restrictions ------------------------------------------------------------------

    def _acl(self, data: dict[str, Any], space_key: str) -> dict[str, Any]:
        own = self._restriction_from((data.get("restrictions") or {}).get("read") or {})
        levels = [self._restriction(str(a["id"])) for a in data.get("ancestors") or []]
        restricted = [level for level in [*levels, own] if level.restricted]
        if not restricted:
            return {"public": True, "users": [], "groups": [], "space": space_key}
        innermost = restricted[-1]
        users = [u for u in innermost.users if all(u in lv.users for lv in restricted)]
        groups = [g for g in innermost.groups if all(g in lv.groups for lv in restricted)]
        return {"public": False, "users": users, "groups": groups, "space": space_key}

    def _access(self, data: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The page's ACL and a digest of it and of its ancestors (ids and titles).

        Moving a page, renaming an ancestor or changing restrictions bumps no version
        number in Confluence; the digest goes into the listed version, so the next run
        rewrites the payloads (`acl`, `ancestors`) of exactly the pages it changed."""
        space_key = str((data.get("space") or {}).get("key") or "")
        acl = self._acl(data, space_key)
        ancestors = [[str(a["id"]), a.get("title")] for a in data.get("ancestors") or []]
        digest = hashlib.sha256(json.dumps([ancestors, acl], sort_keys=True).encode())
        access = (acl, digest.hexdigest()[:10])
        with self._cache_lock:
            self._page_accesses[str(data["id"])] = access
        return access

    def _page_access(self, page_id: str) -> tuple[dict[str, Any], str]:
        """The access of an attachment's page: from the listing, else one request."""
        with self._cache_lock:
            cached = self._page_accesses.get(page_id)
        if cached is not None:
            return cached
        try:
            data = self._get(f"rest/api/content/{page_id}", {"expand": PAGE_ACL_EXPAND})
        except HttpStatusError as exc:
            raise self._content_error(exc, f"page {page_id} (owner of the attachment)") from None
        return self._access(data)

    def _restriction(self, content_id: str) -> _Restriction:
        """An ancestor's read restrictions, fetched once per listing cycle (the per-id
        lock keeps concurrent batches from fetching the same ancestor together)."""
        with self._cache_lock:
            cached = self._restrictions.get(content_id)
            key_lock = self._fetching.setdefault(content_id, threading.Lock())
        if cached is not None:
            return cached
        with key_lock:
            return self._restrictions.get(content_id) or self._fetch_restriction(content_id)

    def _fetch_restriction(self, content_id: str) -> _Restriction:
        try:
            data = self._get(
                f"rest/api/content/{content_id}/restriction/byOperation/read",
                {"expand": "restrictions.user,restrictions.group"},
            )
        except HttpStatusError as exc:
            # Without the ancestor's restrictions the page might be shown too widely.
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                f"cannot read the restrictions of ancestor page {content_id} "
                f"(HTTP {exc.status}), so who may read this page is unknown",
                subject=f"page {content_id}",
                transient=exc.status != 401,
            ) from None
        restriction = self._restriction_from(data)
        with self._cache_lock:
            self._restrictions[content_id] = restriction
        return restriction

    def _restriction_from(self, read: dict[str, Any]) -> _Restriction:
        inner = read.get("restrictions") or {}
        users = ((inner.get("user") or {}).get("results")) or []
        groups = ((inner.get("group") or {}).get("results")) or []
        return _Restriction(
            users=tuple(
                str(u.get("accountId") or u.get("username") or u.get("userKey")) for u in users
            ),
            groups=tuple(str(g.get("name")) for g in groups),
        )

    # --- HTTP --------------------------------------------------------------------------

    def _get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        absolute = path.startswith(("http://", "https://"))
        data = self._client.get(path, params=params, absolute=absolute)
        if not isinstance(data, dict):
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                "the server answered with something that is not a JSON object",
                subject=path.split("?")[0] if not absolute else urlsplit(path).path,
                transient=True,
            )
        return data

    def _paged(self, path: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every result of a paged endpoint, following `_links.next` to the end."""
        page = self._get(path, params)
        while True:
            yield from page.get("results") or []
            links = page.get("_links") or {}
            next_link = links.get("next")
            if not next_link:
                return
            page = self._get(self._join(str(next_link), links.get("context")))

    def _search(self, cql: str, expand: str) -> Iterator[dict[str, Any]]:
        params = {"cql": cql, "expand": expand, "limit": self.settings.page_size}
        return self._paged("rest/api/content/search", params)

    def _join(self, link: str, context: str | None = None) -> str:
        """An absolute URL for a link the server gave relative to its base URL (the
        base carries the context path: `/wiki` on Cloud)."""
        if not link or link.startswith(("http://", "https://")):
            return link
        if not link.startswith("/"):
            link = "/" + link
        if context and link.startswith(context.rstrip("/") + "/"):
            link = link[len(context.rstrip("/")) :]  # a server that repeats its context path
        return self.base_url + link

    def _versioned_refs(self, items: list[dict[str, Any]]) -> list[DocumentRef]:
        """Refs of listed pages and blog posts whose version says who may read them and
        where they sit, besides the edit number. The listing carries every page's own read
        restrictions, so the ancestors' need no request of their own."""
        with self._cache_lock:
            for item in items:
                read = (item.get("restrictions") or {}).get("read") or {}
                self._restrictions[str(item["id"])] = self._restriction_from(read)
        return [self._ref(item) for item in items]

    def _ref(self, item: dict[str, Any]) -> DocumentRef:
        """The version carries the access digest of the item (pages, blog posts) or of its
        page (attachments)."""
        kind = str(item.get("type", "page"))
        version = item.get("version") or {}
        container = item.get("container") or {}
        access: str | None = None
        if kind != "attachment":
            access = self._access(item)[1]
        elif container.get("id"):
            access = self._page_access(str(container["id"]))[1]
        return DocumentRef(
            document_id=str(item["id"]),
            version=_access_version(version.get("number", ""), access),
            source_type="confluence",
            title=item.get("title"),
            updated_at=_iso(version.get("when")),
            parent_document_id=str(container["id"]) if container.get("id") else None,
            kind=kind,
        )

    def _wanted(self, filename: str) -> bool:
        return PurePath(filename).suffix.lower() in self.attachment_extensions

    # --- errors ------------------------------------------------------------------------

    def _auth_error(self) -> IngestError:
        who = "the account e-mail and API token" if self.cloud else "the personal access token"
        return IngestError(
            ErrorCode.FETCH_FAILED,
            f"Confluence rejected the credentials (HTTP 401): check {who} "
            "(confluence.username, INGEST_CONFLUENCE__TOKEN); tokens expire and can be revoked",
            subject=self.base_url,
        )

    def _space_error(self, exc: HttpStatusError, space: str) -> IngestError:
        if exc.status == 401:
            raise self._auth_error() from None
        if exc.status == 404:
            message = "the space does not exist, or this account may not see it"
        elif exc.status == 403:
            message = "this account may not read the space"
        else:
            message = exc.message
        return IngestError(ErrorCode.FETCH_FAILED, message, subject=f"space {space}")

    def _listing_error(self, exc: IngestError) -> str:
        if _is_auth(exc):
            raise self._auth_error() from None
        return str(exc)

    def _content_error(self, exc: HttpStatusError, what: str) -> IngestError:
        if exc.status == 401:
            return self._auth_error()
        if exc.status in (404, 410):
            return DocumentGone(
                f"{what} no longer exists (deleted, moved, or no longer visible to this "
                "account): treat it as deleted",
                subject=what,
            )
        if exc.status == 403:
            return IngestError(
                ErrorCode.FETCH_FAILED,
                "restricted: this account may not read it (page restrictions)",
                subject=what,
            )
        return IngestError(exc.code, exc.message, subject=what)


def _older(item: dict[str, Any], ref: DocumentRef) -> bool:
    """The search index holds an older version than the listing saw."""
    number = str((item.get("version") or {}).get("number", ""))
    listed = _version_number(ref.version)
    return number.isdigit() and listed.isdigit() and int(number) < int(listed)


def _access_version(number: object, access: str | None) -> str:
    """A document version: Confluence's edit number, then the access digest (`7.3f9a…`)."""
    return f"{number}.{access}" if access else str(number)


def _version_number(version: str) -> str:
    return version.partition(".")[0]


def _is_auth(exc: IngestError) -> bool:
    return isinstance(exc, HttpStatusError) and exc.status == 401


def _iso(value: Any) -> str | None:
    """Confluence timestamps (`...Z` on Cloud, `+03:00` on DC) as ISO 8601 in UTC."""
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).astimezone(UTC).isoformat()


def _labels(data: dict[str, Any]) -> tuple[str, ...]:
    labels = ((data.get("metadata") or {}).get("labels") or {}).get("results") or []
    return tuple(str(label.get("name")) for label in labels)


def _safe_filename(title: str) -> str:
    return _UNSAFE_FILENAME.sub("_", title).strip()[:150] or "untitled"
