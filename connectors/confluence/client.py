"""HTTP for the Confluence connector: URLs, auth, JSON pages and their continuation, and
what an HTTP status means for a document.

Every request goes through one `PolicySession` (connectors/http.py: rate and concurrency
caps, retries with backoff and `Retry-After`), which carries the auth: the token lives
only in the session's auth object, and no message, log line or repr contains it.

The base URL carries the context path (`/wiki` on Cloud, appended when missing; e.g.
`/confluence` on Data Center). Paths are relative to it: REST v1 under `rest/api/`, v2
under `api/v2/`. Links the server returns come in two forms: relative to the base URL
(v1 `_links.next`, `downloadLink`, `webui`) or relative to the host, the context path
included (v2 `_links.next` and the `Link` header: `/wiki/api/v2/...`). `url()` tells them
apart by that prefix, so the context path is neither lost nor doubled (the
atlassian-python-api bug of 5.0.0-5.0.2 doubled it on v2 cursors).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import requests

from config.errors import ConfigError, ErrorCode, IngestError
from connectors.base import DocumentGone
from connectors.confluence.settings import ConfluenceSettings
from connectors.http import HttpStatusError, PolicySession, url_path

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class JsonPage:
    data: dict[str, Any]
    next: str | None  # the next page's link, as the server gave it


class ConfluenceHttp:
    def __init__(self, settings: ConfluenceSettings, token: str | None) -> None:
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
        self.host_url = f"{parts.scheme}://{netloc}"
        self.context = path
        self.base_url = self.host_url + path
        self.session = PolicySession.from_settings(settings)
        self.session.headers["Accept"] = "application/json"
        secret = (
            token
            if token is not None
            else (settings.token.get_secret_value() if settings.token else None)
        )
        if secret:
            if settings.username:
                self.session.auth = _BasicAuth(settings.username, secret)
            elif self.cloud:
                raise ConfigError(
                    "Confluence Cloud needs the account e-mail beside the API token",
                    setting="confluence.username",
                )
            else:
                self.session.auth = _BearerAuth(secret)

    def close(self) -> None:
        self.session.close()

    # --- requests ----------------------------------------------------------------------

    def url(self, link: str) -> str:
        """An absolute URL for a path or a link the server gave."""
        if not link or link.startswith(("http://", "https://")):
            return link
        if not link.startswith("/"):
            link = "/" + link
        if self.context and (link == self.context or link.startswith(self.context + "/")):
            return self.host_url + link  # relative to the host: carries the context path
        return self.base_url + link

    def get(self, path: str, params: dict[str, Any] | None = None) -> JsonPage:
        response = self.session.get(self.url(path), params=params)
        data = _json_object(response, path)
        links = data.get("_links") if isinstance(data.get("_links"), dict) else {}
        next_link = (links or {}).get("next") or (response.links.get("next") or {}).get("url")
        return JsonPage(data, str(next_link) if next_link else None)

    def get_json(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.get(path, params).data

    def principal_json(
        self, path: str, params: dict[str, Any], principal: str
    ) -> dict[str, Any] | None:
        """A user or group a space permission names, or None where looking it up failed
        for any reason but the credentials: that principal is left out of the ACL
        (narrower, never wider), while a rejected token fails the listing."""
        try:
            return self.get_json(path, params)
        except IngestError as exc:
            if is_auth(exc):
                raise self.auth_error() from None
            log.warning("%s of a space permission is left out: %s", principal, exc)
            return None

    def get_array(self, path: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """An endpoint that answers with a JSON array (a few v1 ones on Data Center)."""
        data = _json(self.session.get(self.url(path), params=params), path)
        if not isinstance(data, list):
            raise _not_json(path, "an array")
        return [item for item in data if isinstance(item, dict)]

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return _json_object(self.session.post(self.url(path), json=body), path)

    def paged(self, path: str, params: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
        """Every result of a paged endpoint, following the next link (`_links.next`, or
        the `Link` header) to the end. The page size asked for is never trusted: servers
        cap `limit` silently."""
        page = self.get(path, params)
        while True:
            yield from page.data.get("results") or []
            if not page.next:
                return
            page = self.get(page.next)

    def download(self, link: str, *, max_bytes: int, subject: str) -> bytes:
        return self.session.download(self.url(link), max_bytes=max_bytes, subject=subject)

    # --- what a status means -----------------------------------------------------------

    def auth_error(self) -> IngestError:
        who = "the account e-mail and API token" if self.cloud else "the personal access token"
        return IngestError(
            ErrorCode.FETCH_FAILED,
            f"Confluence rejected the credentials (HTTP 401): check {who} "
            "(confluence.username, INGEST_CONFLUENCE__TOKEN); tokens expire and can be revoked",
            subject=self.base_url,
        )

    def space_error(self, exc: IngestError, space: str) -> IngestError:
        """A space that cannot be listed; a rejected token raises at once."""
        status = exc.status if isinstance(exc, HttpStatusError) else None
        if status == 401:
            raise self.auth_error() from None
        if status == 404:
            message = "the space does not exist, or this account may not see it"
        elif status == 403:
            message = "this account may not read the space"
        elif status == 410:
            message = f"{self.gone_message(exc)}; the space is not listed"
        else:
            message = exc.message
        return IngestError(ErrorCode.FETCH_FAILED, message, subject=f"space {space}")

    def listing_error(self, exc: IngestError) -> str:
        if is_auth(exc):
            raise self.auth_error() from None
        return str(exc)

    def content_error(self, exc: HttpStatusError, what: str) -> IngestError:
        """What a failed request for one document means. Only 404 says it is gone: a
        410 says the endpoint is (Atlassian removes REST v1 endpoints on Cloud), and
        the document stays."""
        if exc.status == 401:
            return self.auth_error()
        if exc.status == 404:
            return DocumentGone(
                f"{what} no longer exists (deleted, moved, or no longer visible to this "
                "account): treat it as deleted",
                subject=what,
            )
        if exc.status == 410:
            return IngestError(
                ErrorCode.FETCH_FAILED, f"{self.gone_message(exc)}; {what} is kept", subject=what
            )
        if exc.status == 403:
            return IngestError(
                ErrorCode.FETCH_FAILED,
                "restricted: this account may not read it (page restrictions)",
                subject=what,
            )
        return IngestError(exc.code, exc.message, subject=what)

    def batch_error(self, exc: IngestError, what: str) -> IngestError:
        """What a failed request for a batch of documents means for each: a 404 or 410
        says the batch endpoint is not there, not that the documents are gone."""
        if is_auth(exc):
            return self.auth_error()
        if is_status(exc, 404, 410):
            return IngestError(
                ErrorCode.FETCH_FAILED, f"{self.gone_message(exc)}; {what} is kept", subject=what
            )
        return exc

    def gone_message(self, exc: IngestError) -> str:
        where = exc.subject or "the endpoint"
        status = exc.status if isinstance(exc, HttpStatusError) else 410
        meaning = "410 Gone" if status == 410 else f"HTTP {status}"
        message = f"{where} answered {meaning}: this Confluence API is no longer offered"
        if not self.cloud:
            # Cloud removed these REST v1 endpoints; Data Center still serves them, so a
            # 410 here most likely means a Cloud site on a domain of its own.
            message += (
                " (if this is a Confluence Cloud site on its own domain, set "
                "confluence.cloud: true to read it through REST v2)"
            )
        return message


def is_auth(exc: IngestError) -> bool:
    return isinstance(exc, HttpStatusError) and exc.status == 401


def is_status(exc: IngestError, *statuses: int) -> bool:
    return isinstance(exc, HttpStatusError) and exc.status in statuses


def _json(response: requests.Response, path: str) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _json_object(response: requests.Response, path: str) -> dict[str, Any]:
    data = _json(response, path)
    if not isinstance(data, dict):
        raise _not_json(path, "a JSON object")
    return data


def _not_json(path: str, wanted: str) -> IngestError:
    return IngestError(
        ErrorCode.FETCH_FAILED,
        f"the server answered with something that is not {wanted}",
        subject=url_path(path),
        transient=True,
    )
