"""The one retry and rate-limit policy every connector HTTP request goes through.

`PolicySession` is a `requests.Session` (the Confluence connector's one session, REST v1
and v2 alike). Every request made through it:

- waits for a client-wide rate slot (`requests_per_second`) and a concurrency slot
  (`max_concurrency`);
- is retried on HTTP 429/408 and 5xx, connection errors, read timeouts and bodies cut
  short (an incomplete read, or a JSON response that does not parse): after a 429 or 503
  the wait the server asks for (`Retry-After`, else `X-RateLimit-Reset`,
  `Beta-Retry-After`, `X-Beta-RateLimit-Reset`: seconds, an HTTP date or an ISO 8601
  time) holds back the whole client and is never cut short; a wait longer than
  `backoff_max_s` is not waited out in the run: the request and every later one of the
  client until then fail at once as `Throttled`, naming the time asked. Without a
  readable wait: exponential backoff with jitter between `backoff_base_s` and
  `backoff_max_s`;
- slows the whole client down while the server says `X-RateLimit-NearLimit: true`
  (the interval between requests doubles, up to one second; it eases back by 5% with
  each answer that does not say so), before throttling starts;
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from pydantic import Field
from requests.adapters import HTTPAdapter

from config.errors import ErrorCode, IngestError
from config.http_retry import wait_seconds
from config.settings import StrictModel

log = logging.getLogger(__name__)

T = TypeVar("T")


class HttpSettings(StrictModel):
    """The settings of a source read over HTTP that pace and retry its requests (a
    connector's settings model extends it; `PolicySession.from_settings`)."""

    max_concurrency: int = Field(8, gt=0)
    requests_per_second: float = Field(20.0, gt=0)
    timeout_s: float = Field(30.0, gt=0)
    max_retries: int = Field(6, ge=0)
    backoff_base_s: float = Field(1.0, ge=0)
    backoff_max_s: float = Field(60.0, gt=0)
    verify_ssl: bool = True


# 501 (not implemented) and 505 (version not supported) will not get better by waiting.
_PERMANENT_5XX = frozenset({501, 505})
_RETRY_AFTER_STATUSES = frozenset({429, 503})
# Where a 429 or 503 says how long to wait, in the order they are read (docs/sources.md#confluence):
# seconds, an HTTP date or an ISO 8601 time (Confluence Cloud's reset headers), the
# beta limits under names of their own.
WAIT_HEADERS = ("Retry-After", "X-RateLimit-Reset", "Beta-Retry-After", "X-Beta-RateLimit-Reset")
NEAR_LIMIT_HEADER = "X-RateLimit-NearLimit"
# The slowest pace `X-RateLimit-NearLimit` brings a client down to.
SLOWEST_INTERVAL_S = 1.0
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


@dataclass(frozen=True)
class AskedWait:
    """How long a 429 or 503 asked the client to wait, and which header said so."""

    seconds: float
    header: str
    value: str

    def describe(self) -> str:
        return f"{self.seconds:.0f} s ({self.header}: {self.value[:64]})"


def asked_wait(headers: Mapping[str, str], where: str) -> AskedWait | None:
    """The first readable wait among `WAIT_HEADERS`; one that is neither seconds nor a
    time is named in a warning and the next is read (None: back off instead)."""
    for name in WAIT_HEADERS:
        value = headers.get(name)
        if value is None:
            continue
        seconds = wait_seconds(value)
        if seconds is None:
            log.warning(
                "%s: the %s header %r is neither seconds nor a time: ignored",
                where,
                name,
                value[:64],
            )
            continue
        return AskedWait(seconds, name, value.strip())
    return None


class Throttled(IngestError):
    """The server asked for a longer wait than `backoff_max_s`: the request is not sent
    again in this run (transient: the next run retries it)."""

    def __init__(self, message: str, subject: str | None = None) -> None:
        super().__init__(ErrorCode.FETCH_FAILED, message, subject=subject, transient=True)

    def __reduce__(self) -> tuple[object, ...]:
        return (Throttled, (self.message, self.subject))


class RateLimiter:
    """Spaces requests at least an interval apart across all threads of a client:
    `1 / per_second`, doubled (up to `SLOWEST_INTERVAL_S`) each time the server says it
    is near its limit, easing back by 5% with each answer that does not say so."""

    def __init__(self, per_second: float) -> None:
        self._fastest = 1.0 / per_second
        self._slowest = max(SLOWEST_INTERVAL_S, self._fastest)
        self._interval = self._fastest
        self._last_at = -math.inf  # when the last request was let through
        self._hold_until = 0.0
        self._slowed_at = -math.inf
        self._lock = threading.Lock()

    @property
    def interval(self) -> float:
        with self._lock:
            return self._interval

    def acquire(self) -> None:
        with self._lock:
            now = time.monotonic()
            at = max(now, self._last_at + self._interval, self._hold_until)
            self._last_at = at
        if at > now:
            time.sleep(at - now)

    def hold_off(self, seconds: float) -> None:
        """After a 429/503 that said how long to wait, no request of this client starts
        earlier."""
        with self._lock:
            self._hold_until = max(self._hold_until, time.monotonic() + seconds)

    def slow_down(self) -> None:
        with self._lock:
            now = time.monotonic()
            # Once per (half) interval: answers to concurrent requests all say it at once.
            if now - self._slowed_at >= self._interval / 2:
                self._interval = min(self._interval * 2, self._slowest)
                self._slowed_at = now

    def ease(self) -> None:
        with self._lock:
            self._interval = max(self._fastest, self._interval * 0.95)


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
        # Set when the server asked for a wait past `backoff_max_s`: (until, why), on the
        # monotonic clock; requests before then fail at once instead of being sent.
        self._throttled: tuple[float, str] | None = None
        # urllib3 must not retry on its own; its pool holds one connection per slot.
        adapter = HTTPAdapter(
            max_retries=0, pool_connections=4, pool_maxsize=max(10, max_concurrency)
        )
        self.mount("http://", adapter)
        self.mount("https://", adapter)

    @classmethod
    def from_settings(cls, settings: HttpSettings) -> PolicySession:
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
                self._check_throttle(where)
                self._limiter.acquire()
                try:
                    response = super().request(method, url, *args, **kwargs)
                    self._pace(response)
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
                        wait = self._asked_wait(response, where, failure)
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

    def _pace(self, response: requests.Response) -> None:
        if response.headers.get(NEAR_LIMIT_HEADER, "").strip().lower() == "true":
            self._limiter.slow_down()
        else:
            self._limiter.ease()

    def _asked_wait(self, response: requests.Response, where: str, failure: str) -> float | None:
        """The wait a 429 or 503 asked for, held by the whole client; past
        `backoff_max_s` the client is throttled (`Throttled`) until then."""
        asked = asked_wait(response.headers, where)
        if asked is None:
            return None
        if asked.seconds > self.policy.backoff_max_s:
            until = datetime.now(UTC) + timedelta(seconds=asked.seconds)
            reason = (
                f"throttled: {failure} asked to wait {asked.describe()}, until "
                f"{until:%Y-%m-%d %H:%M:%S} UTC, longer than the retry cap "
                f"(backoff_max_s, {self.policy.backoff_max_s:g} s); retried by a later run"
            )
            self._throttled = (time.monotonic() + asked.seconds, reason)
            raise Throttled(f"{where}: {reason}", subject=where)
        self._limiter.hold_off(asked.seconds)
        return asked.seconds

    def _check_throttle(self, where: str) -> None:
        throttled = self._throttled
        if throttled is not None and time.monotonic() < throttled[0]:
            raise Throttled(f"{where}: not sent, {throttled[1]}", subject=where)


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
