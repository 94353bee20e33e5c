"""Text from bytes: strict UTF-8, never silently replaced."""

from __future__ import annotations

from config.errors import ErrorCode, IngestError


def decode_utf8(data: bytes, *, subject: str | None = None) -> str:
    """Strict UTF-8 decoding: invalid bytes fail the document, never silently replaced."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(
            ErrorCode.CHUNKING_FAILED,
            f"not valid UTF-8 (byte {exc.object[exc.start]:#04x} at offset {exc.start}); "
            "re-save the file as UTF-8",
            subject=subject,
        ) from None
    return text.removeprefix("\ufeff")
