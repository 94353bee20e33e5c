"""Error codes shared by every stage (docs/sources.md#bad-input).

Kept in `config/`, the bottom layer, so connectors, normalizers, chunking and tasks
can all raise and read the same typed error without depending on each other.
"""

from __future__ import annotations

from enum import StrEnum


class ErrorCode(StrEnum):
    UNSUPPORTED_FORMAT = "UNSUPPORTED_FORMAT"
    CORRUPT = "CORRUPT"
    ENCRYPTED = "ENCRYPTED"
    NO_TEXT_LAYER = "NO_TEXT_LAYER"
    TOO_LARGE = "TOO_LARGE"
    CHUNKING_FAILED = "CHUNKING_FAILED"
    FETCH_FAILED = "FETCH_FAILED"
    EMBED_FAILED = "EMBED_FAILED"
    UPSERT_FAILED = "UPSERT_FAILED"
    # Another process holds the embedded store: the run stops before any work.
    STORE_BUSY = "STORE_BUSY"
    CONFIG_INVALID = "CONFIG_INVALID"
    # The re-index gate kept the alias: the new collection answers the questions worse.
    GATE_REFUSED = "GATE_REFUSED"


class IngestError(Exception):
    """A document- or run-level failure with a stable error code.

    `transient=False` (bad input) is recorded and not retried until the content
    changes; `transient=True` (network, 429/5xx, Qdrant down) is retried with backoff.
    `subject` names the file, page or setting so the message says what to fix.
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        subject: str | None = None,
        transient: bool = False,
    ) -> None:
        self.code = code
        self.message = message
        self.subject = subject
        self.transient = transient
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.subject}: " if self.subject else ""
        return f"{self.code.value}: {where}{self.message}"

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only arguments need explicit pickling support (Prefect results, Dask).
        return (_rebuild_error, (self.code, self.message, self.subject, self.transient))


def _rebuild_error(
    code: ErrorCode, message: str, subject: str | None, transient: bool
) -> IngestError:
    return IngestError(code, message, subject=subject, transient=transient)


class ConfigError(IngestError):
    """A setting is unknown or has a bad value; raised at start-up, names the setting."""

    def __init__(self, message: str, *, setting: str) -> None:
        super().__init__(ErrorCode.CONFIG_INVALID, message, subject=setting)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_config_error, (self.message, self.subject or ""))


def _rebuild_config_error(message: str, setting: str) -> ConfigError:
    return ConfigError(message, setting=setting)
