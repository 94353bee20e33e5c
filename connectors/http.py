"""The one retry and rate-limit policy every connector HTTP request goes through.

`PolicySession` is a `requests.Session` (the Confluence connector's one session, REST v1
and v2 alike). Every request made through it:

- waits for a client-wide rate slot (`requests_per_second`) and a concurrency slot
  (`max_concurrency`);
- is retried on HTTP 429/408 and 5xx, connection errors, read timeouts and bodies cut
  short (an incomplete read, or a JSON response that does not parse): after a 429 or 503
  the `Retry-After` header (seconds or an HTTP date, clamped to `backoff_max_s`) is
  honoured and holds back the whole client, otherwise exponential backoff with jitter
  between `backoff_base_s` and `backoff_max_s`;
- is never retried on other 4xx: 401/403/404 raise `HttpStatusError` at once, so a
  bad token fails in milliseconds rather than after a minute of backoff.

Retries exhausted raise `IngestError(FETCH_FAILED, transient=True)`. Messages and log
lines name the method and URL path only: never the query string, the host's userinfo or
any header, so a token cannot leak through them.
"""

from __future__ import annotations

import json
import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter

from config.errors import ErrorCode, IngestError
from config.settings import ConfluenceSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

# 501 (not implemented) and 505 (version not supported) will not get better by waiting.
_PERMANENT_5XX = frozenset({501, 505})
_RETRY_AFTER_STATUSES = frozenset({429, 503})
_STATUS_MEANING = MappingProxyType(
    {
        400: "the request was refused as malformed",
        401: "the credentials were rejected (wrong or expired token, or wrong username)",
        403: "the account is authenticated but may not read this",
        404: "not found, or not visible to this account",
        410: "gone",
    }
)


class HttpStatusError(IngestError):
    """A non-retryable HTTP status (4xx other than 408/429); `status` says which."""

    def __init__(self, status: int, message: str, subject: str | None = None) -> None:
        self.status = status
        super().__init__(ErrorCode.FETCH_FAILED, message, subject=subject)

    def __reduce__(self) -> tuple[object, ...]:
        return (HttpStatusError, (self.status, self.message, self.subject))


class BodyTooLarge(IngestError):
    """A download passed its byte limit; not retried."""

    def __init__(self, message: str, subject: str | None = None) -> None:
        super().__init__(ErrorCode.TOO_LARGE, message, subject=subject)

    def __reduce__(self) -> tuple[object, ...]:
        return (BodyTooLarge, (self.message, self.subject))


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int
    backoff_base_s: float
    backoff_max_s: float

    def backoff(self, retry: int) -> float:
        """Exponential backoff with "equal jitter": between half and all of the step."""
        step = min(self.backoff_max_s, self.backoff_base_s * (2**retry))
        return random.uniform(step / 2, step)

    def retry_after(self, header: str | None) -> float | None:
        """Seconds to wait from a `Retry-After` header (delta-seconds or HTTP date)."""
        if not header:
            return None
        value = header.strip()
        try:
            seconds = float(value)
        except ValueError:
            try:
                when = parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            if when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            seconds = (when - datetime.now(UTC)).total_seconds()
        if not math.isfinite(seconds):
            return self.backoff_max_s
        return min(max(0.0, seconds), self.backoff_max_s)


class RateLimiter:
    """Spaces requests at least `1 / per_second` apart across all threads of a client."""

    def __init__(self, per_second: float) -> None:
        self._interval = 1.0 / per_second
        self._next_at = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next_at)
            self._next_at = at + self._interval
        if at > now:
            time.sleep(at - now)

    def hold_off(self, seconds: float) -> None:
        """After a 429/503 with Retry-After, no request of this client starts earlier."""
        with self._lock:
            self._next_at = max(self._next_at, time.monotonic() + seconds)


def url_path(url: str | bytes) -> str:
    """The URL's path only: what messages and logs may show of a request."""
    text = url.decode() if isinstance(url, bytes) else url
    return urlsplit(text).path or "/"


class PolicySession(requests.Session):
    def __init__(
        self,
        policy: RetryPolicy,
        *,
        requests_per_second: float,
        max_concurrency: int,
        timeout_s: float,
        verify: bool = True,
    ) -> None:
        super().__init__()
        self.policy = policy
        self.timeout_s = timeout_s
        self.verify = verify
        self._limiter = RateLimiter(requests_per_second)
        self._slots = threading.BoundedSemaphore(max_concurrency)
        # urllib3 must not retry on its own; its pool holds one connection per slot.
        adapter = HTTPAdapter(
            max_retries=0, pool_connections=4, pool_maxsize=max(10, max_concurrency)
        )
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    @classmethod
    def from_settings(cls, settings: ConfluenceSettings) -> PolicySession:
        return cls(
            RetryPolicy(settings.max_retries, settings.backoff_base_s, settings.backoff_max_s),
            requests_per_second=settings.requests_per_second,
            max_concurrency=settings.max_concurrency,
            timeout_s=settings.timeout_s,
            verify=settings.verify_ssl,
        )

    # Passes every argument through unchanged; restating types-requests' long signature
    # here would only duplicate it.
    def request(  # type: ignore[override]
        self, method: str, url: str | bytes, *args: Any, **kwargs: Any
    ) -> requests.Response:
        if kwargs.get("stream"):
            return self._with_retries(method, url, args, kwargs, lambda response: response)
        return self._with_retries(method, url, args, kwargs, _checked_body)

    def download(self, url: str, *, max_bytes: int, subject: str) -> bytes:
        """GET `url` streaming, refusing more than `max_bytes` (`BodyTooLarge`)."""

        def read(response: requests.Response) -> bytes:
            with response:
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > max_bytes:
                    raise BodyTooLarge(
                        f"{int(declared)} bytes, over the limit of {max_bytes}", subject=subject
                    )
                body = bytearray()
                for piece in response.iter_content(chunk_size=1 << 16):
                    body += piece
                    if len(body) > max_bytes:
                        raise BodyTooLarge(
                            f"more than {max_bytes} bytes, over the limit", subject=subject
                        )
                return bytes(body)

        return self._with_retries("GET", url, (), {"stream": True}, read)

    def _with_retries(
        self,
        method: str,
        url: str | bytes,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        read: Callable[[requests.Response], T],
    ) -> T:
        where = f"{method} {url_path(url)}"
        kwargs["timeout"] = self.timeout_s  # one timeout, whatever the caller's default
        attempts = self.policy.max_retries + 1
        failure = ""
        for attempt in range(attempts):
            wait: float | None = None
            with self._slots:
                self._limiter.acquire()
                try:
                    response = super().request(method, url, *args, **kwargs)
                    status = response.status_code
                    if status < 400:
                        return read(response)
                    response.close()
                except (
                    requests.Timeout,
                    requests.exceptions.ChunkedEncodingError,
                    requests.exceptions.ContentDecodingError,  # a compressed body cut short
                ) as exc:
                    failure = _describe(exc)
                except requests.exceptions.SSLError:
                    raise  # a certificate problem does not heal by retrying
                except requests.ConnectionError as exc:
                    failure = _describe(exc)
                except _TruncatedJson:
                    failure = "the JSON body was cut short"
                else:
                    if not _retryable(status):
                        meaning = _STATUS_MEANING.get(status, "refused")
                        raise HttpStatusError(
                            status, f"{where}: HTTP {status}, {meaning}", subject=where
                        )
                    failure = f"HTTP {status}"
                    if status in _RETRY_AFTER_STATUSES:
                        wait = self.policy.retry_after(response.headers.get("Retry-After"))
                        if wait is not None:
                            self._limiter.hold_off(wait)
            if attempt + 1 == attempts:
                break
            if wait is None:
                wait = self.policy.backoff(attempt)
            log.warning(
                "%s: %s; retrying in %.2f s (attempt %d of %d)",
                where,
                failure,
                wait,
                attempt + 2,
                attempts,
            )
            time.sleep(wait)
        raise IngestError(
            ErrorCode.FETCH_FAILED,
            f"{where}: {failure} (gave up after {attempts} attempts)",
            subject=where,
            transient=True,
        )


class _TruncatedJson(Exception):
    pass


def _checked_body(response: requests.Response) -> requests.Response:
    """A JSON body that does not parse was cut short in transit: retry it."""
    if "json" in response.headers.get("Content-Type", "") and response.content:
        try:
            json.loads(response.content)
        except ValueError:
            raise _TruncatedJson from None
    return response


def _retryable(status: int) -> bool:
    return status in (408, 429) or (status >= 500 and status not in _PERMANENT_5XX)


def _describe(exc: requests.RequestException) -> str:
    # Exception texts of requests/urllib3 embed the full URL; name the kind only.
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(
        exc, requests.exceptions.ChunkedEncodingError | requests.exceptions.ContentDecodingError
    ):
        return "the body was cut short"
    return "connection failed or was reset"
