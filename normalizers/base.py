"""The entry point of normalization: `normalize_bytes` picks the format from the content
(never the extension alone; `normalizers.detection`) unless the caller knows it, enforces
the size limit, runs the format's normalizer (`normalizers.registry`), turns unexpected
library exceptions into `CORRUPT`, and runs the shared `NORMALIZE_MARKDOWN` pass so every
format leaves here in the same normalized form (`normalizers.model`: what goes in and
comes out).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from markdown_text import normalize_markdown
from normalizers.detection import detect_format
from normalizers.model import ConvertedAhead, NormalizeContext, NormalizedDocument
from normalizers.registry import FORMATS

if TYPE_CHECKING:  # the reader's module is imported by whoever makes one
    from normalizers.pictures import PictureReader


def normalize_bytes(
    data: bytes,
    filename: str,
    *,
    mime: str | None = None,
    limits: LimitsSettings | None = None,
    base_url: str | None = None,
    container: str | None = None,
    locator: str | None = None,
    fmt: str | None = None,
    pictures: PictureReader | None = None,
    attachments: Mapping[str, bytes] | None = None,
    converted: ConvertedAhead | None = None,
) -> NormalizedDocument:
    """Normalize one document of any supported format to Markdown
    (docs/sources.md#normalization-contract): of format
    `fmt` when the caller knows it (a Confluence page's body), else the detected one.
    `pictures` reads the document's pictures (a new reader per document); what it read
    and skipped lands in `metadata["pictures"]`, where it met any picture.
    `attachments`: the files the document shows (a Confluence page's diagrams), by name."""
    ctx = NormalizeContext(
        filename=filename,
        mime=mime,
        limits=limits or LimitsSettings(),  # type: ignore[call-arg]
        base_url=base_url,
        container=container,
        locator=locator,
        attachments=MappingProxyType(dict(attachments or {})),
        pictures=pictures,
        converted=converted,
    )
    if len(data) > ctx.limits.max_file_bytes:
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"{len(data):,} bytes, over limits.max_file_bytes ({ctx.limits.max_file_bytes:,})",
        )
    if not data.strip():
        raise ctx.fail(ErrorCode.CORRUPT, "the file is empty")
    fmt = fmt or detect_format(data, filename, mime)
    entry = FORMATS.get(fmt)
    if entry is None:
        raise ctx.fail(ErrorCode.UNSUPPORTED_FORMAT, f"no normalizer for format {fmt!r}")
    try:
        doc = entry.normalize(data, ctx)
    except IngestError:
        raise
    except MemoryError:
        raise ctx.fail(ErrorCode.TOO_LARGE, "ran out of memory while reading it") from None
    except Exception as exc:  # a library choked on the bytes: the file is bad, not the run
        raise ctx.fail(
            ErrorCode.CORRUPT, f"could not be read as {fmt.upper()}: {type(exc).__name__}: {exc}"
        ) from None
    normalized = normalize_markdown(doc.markdown, doc.anchors, front_matter=fmt == "markdown")
    doc.markdown = normalized.text
    doc.anchors = normalized.anchors
    if normalized.front_matter:
        doc.metadata = {**normalized.front_matter, **doc.metadata}
        title = normalized.front_matter.get("title")
        if doc.title is None and isinstance(title, str):
            doc.title = title
    doc.metadata.setdefault("format", fmt)
    counts = pictures.counts.metadata() if pictures is not None else {}
    if counts:
        doc.metadata["pictures"] = counts
    return doc
