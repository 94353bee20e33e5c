"""Image files as documents: their text, read by the document's picture reader."""

from __future__ import annotations

from pathlib import PurePath

from config.errors import ErrorCode
from normalizers.model import NormalizeContext, NormalizedDocument
from normalizers.pictures.images import PictureTooLarge, UnreadablePicture, probe


def normalize_image(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    """The picture's caption and text as paragraphs, titled by the file name; a picture
    without text (or too small to hold any) is an empty document."""
    reader = ctx.pictures
    if reader is None or reader.languages is None:
        raise ctx.fail(
            ErrorCode.UNSUPPORTED_FORMAT,
            "an image: its text is read by OCR, which needs pictures.ocr: true and tesseract "
            "installed (apt-get install tesseract-ocr tesseract-ocr-rus)",
        )
    try:
        probe(data)  # the header alone: a picture too large to read is the file's error
    except PictureTooLarge as exc:
        raise ctx.fail(ErrorCode.TOO_LARGE, str(exc)) from None
    except UnreadablePicture:
        pass  # the reader counts it, below
    result = reader.plain(data)
    title = PurePath(ctx.filename).name
    if isinstance(result, str):
        return NormalizedDocument(markdown=result, title=title)
    if result.reason == "unreadable":
        raise ctx.fail(ErrorCode.CORRUPT, "not a readable image (truncated or damaged)")
    why = {"small": "too small to hold text", "timeout": "OCR ran out of time"}[result.reason]
    return NormalizedDocument(markdown="", title=title, warnings=(f"no text read: {why}",))
