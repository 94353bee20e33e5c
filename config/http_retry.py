"""Retrying a request to a service over HTTP (an embedding or a vision endpoint): on
HTTP 429, 5xx and connection errors, waiting as the service's `Retry-After` says, else
backing off exponentially; and reading such a wait (seconds, an HTTP date or an ISO 8601
time). Plain `requests`, no settings of its own: the caller passes its limits. The
connectors' paced session (connectors/http.py) reads waits with `wait_seconds` too."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import requests

# Longest backoff between attempts where the service asked for no wait.
MAX_BACKOFF_S = 60.0


class RetriesExhausted(Exception):
    """Every attempt failed in a way worth retrying; `problem` says how the last did."""

    def __init__(self, problem: str, attempts: int) -> None:
        super().__init__(f"gave up after {attempts} attempts ({problem})")
        self.problem = problem
        self.attempts = attempts


def post_retrying(
    session: requests.Session,
    url: str,
    body: Any,
    *,
    timeout_s: float,
    max_retries: int,
    backoff_s: float,
) -> requests.Response:
    """POST `body` as JSON until an answer that is not 429 or 5xx (any other status is
    the caller's to judge); `RetriesExhausted` after `max_retries` retries."""
    problem = ""
    wait: float | None = None
    for attempt in range(max_retries + 1):
        if attempt:
            backoff = min(backoff_s * 2 ** (attempt - 1), MAX_BACKOFF_S)
            time.sleep(backoff if wait is None else wait)
        try:
            response = session.post(url, json=body, timeout=timeout_s)
        except requests.RequestException as exc:
            problem, wait = type(exc).__name__, None
            continue
        if response.status_code == 429 or response.status_code >= 500:
            asked = response.headers.get("Retry-After")
            problem = f"HTTP {response.status_code}"
            wait = wait_seconds(asked) if asked else None
            continue
        return response
    raise RetriesExhausted(problem, max_retries + 1)


def wait_seconds(value: str, now: datetime | None = None) -> float | None:
    """Seconds until `value` (delta-seconds, an HTTP date or an ISO 8601 time; a time
    already past is 0); None where it is none of these."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        when = _parse_time(text)
        if when is None:
            return None
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def _parse_time(text: str) -> datetime | None:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
