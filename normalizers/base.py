"""The one small interface every format module implements, and the registry.

A normalizer is a plain function `(data: bytes, ctx: NormalizeContext) -> NormalizedDocument`
listed in `FORMATS` under a format name with its extensions and MIME types, as a
"module:function" string imported on first use: normalizing a Markdown file imports no
PDF or Office library. `normalize_bytes` picks the format from the content (never the
extension alone) unless the caller knows it, enforces the size limit, turns unexpected
library exceptions into `CORRUPT`, and runs the shared `NORMALIZE_MARKDOWN` pass so every
format leaves here in the same normalized form.
"""

from __future__ import annotations

import importlib
import json
import re
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import PurePath
from types import MappingProxyType
from typing import Any

from chunking.text import Anchor, normalize_markdown
from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings


@dataclass(frozen=True)
class LinkRecord:
    """An outgoing link found while normalizing (SPEC §3.8)."""

    target_url: str
    link_type: str  # "page" | "attachment" | "external" | "anchor"
    text: str = ""
    # What identifies the target inside Confluence, when the source says so; the
    # connector resolves these to a document id where the target is a synced page.
    target_page_id: str | None = None
    target_title: str | None = None
    target_space_key: str | None = None
    target_filename: str | None = None


@dataclass
class NormalizedDocument:
    markdown: str
    title: str | None = None
    author: str | None = None
    created_at: str | None = None  # ISO 8601
    updated_at: str | None = None  # ISO 8601
    page_count: int | None = None
    language: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)  # source-specific, front matter
    anchors: tuple[Anchor, ...] = ()
    links: tuple[LinkRecord, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The stage cache's form of the document (`from_json` reads it back)."""
        return {
            "markdown": self.markdown,
            "title": self.title,
            "author": self.author,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "page_count": self.page_count,
            "language": self.language,
            # front matter may hold dates and other YAML types: stored as their text
            "metadata": json.loads(json.dumps(self.metadata, default=str)),
            "anchors": [[a.offset, a.kind, a.value] for a in self.anchors],
            "links": [asdict(link) for link in self.links],
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NormalizedDocument:
        return cls(
            markdown=data["markdown"],
            title=data["title"],
            author=data["author"],
            created_at=data["created_at"],
            updated_at=data["updated_at"],
            page_count=data["page_count"],
            language=data["language"],
            metadata=data["metadata"],
            anchors=tuple(Anchor(o, k, v) for o, k, v in data["anchors"]),
            links=tuple(LinkRecord(**link) for link in data["links"]),
            warnings=tuple(data["warnings"]),
        )


@dataclass(frozen=True)
class NormalizeContext:
    filename: str  # file name or page title: used in messages and as an extension hint
    mime: str | None = None
    limits: LimitsSettings = field(default_factory=LimitsSettings)  # type: ignore[arg-type]
    # Confluence pages: where links resolve (base URL incl. context path) and the page's space.
    base_url: str | None = None
    space_key: str | None = None
    page_id: str | None = None  # Confluence: the page's id (attachment download URLs)

    def fail(self, code: ErrorCode, message: str) -> IngestError:
        return IngestError(code, message, subject=self.filename)


Normalizer = Callable[[bytes, NormalizeContext], NormalizedDocument]


class AnchoredMarkdown:
    """Markdown written section by section (pages, sheets, slides), each section's start
    anchored so chunks can say which section they come from."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._parts: list[str] = []
        self._anchors: list[Anchor] = []
        self._length = 0

    def add(self, value: int | str, text: str) -> None:
        """Start section `value` here; `text` may be empty (the anchor still counts)."""
        self._anchors.append(Anchor(self._length, self.kind, value))
        self._parts.append(text)
        self._length += len(text)

    @property
    def sections(self) -> int:
        return len(self._anchors)

    @property
    def markdown(self) -> str:
        return "".join(self._parts)

    @property
    def anchors(self) -> tuple[Anchor, ...]:
        return tuple(self._anchors)


@dataclass(frozen=True)
class FormatEntry:
    name: str
    target: str  # "module:function" of its normalizer
    extensions: tuple[str, ...] = ()  # lower case, with the dot
    mimes: tuple[str, ...] = ()

    @property
    def normalize(self) -> Normalizer:
        """The normalizer, its module imported now (once: Python keeps it)."""
        module, _, function = self.target.partition(":")
        normalizer: Normalizer = getattr(importlib.import_module(module), function)
        return normalizer


FORMATS: Mapping[str, FormatEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            FormatEntry(
                "markdown",
                "normalizers.text:normalize_markdown_file",
                (".md", ".markdown", ".mdown", ".mkd"),
                ("text/markdown", "text/x-markdown"),
            ),
            FormatEntry(
                "text",
                "normalizers.text:normalize_text_file",
                (".txt", ".text", ".log"),
                ("text/plain",),
            ),
            FormatEntry(
                "html",
                "normalizers.html:normalize_html",
                (".html", ".htm", ".xhtml"),
                ("text/html", "application/xhtml+xml"),
            ),
            FormatEntry("pdf", "normalizers.pdf:normalize_pdf", (".pdf",), ("application/pdf",)),
            FormatEntry(
                "docx",
                "normalizers.docx:normalize_docx",
                (".docx", ".docm"),
                (
                    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                    "application/vnd.ms-word.document.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "xlsx",
                "normalizers.xlsx:normalize_xlsx",
                (".xlsx", ".xlsm"),
                (
                    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                    "application/vnd.ms-excel.sheet.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "pptx",
                "normalizers.pptx:normalize_pptx",
                (".pptx", ".pptm"),
                (
                    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                    "application/vnd.ms-powerpoint.presentation.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "doc", "normalizers.legacy:normalize_doc", (".doc",), ("application/msword",)
            ),
            FormatEntry(
                "xls", "normalizers.legacy:normalize_xls", (".xls",), ("application/vnd.ms-excel",)
            ),
            FormatEntry(
                "ppt",
                "normalizers.legacy:normalize_ppt",
                (".ppt",),
                ("application/vnd.ms-powerpoint",),
            ),
            FormatEntry(
                "confluence",
                "normalizers.confluence:normalize_confluence",
                mimes=("application/vnd.atlassian.confluence.storage+xml",),
            ),
        )
    }
)


def supported_extensions() -> frozenset[str]:
    return frozenset(e for entry in FORMATS.values() for e in entry.extensions)


# --- format detection --------------------------------------------------------------

_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_OOXML_MAIN_PART = (("word/", "docx"), ("xl/", "xlsx"), ("ppt/", "pptx"))
_LEGACY_BY_EXTENSION = MappingProxyType({".doc": "doc", ".xls": "xls", ".ppt": "ppt"})
# An `ac:` or `ri:` element (`<ac:structured-macro`, `<ri:page`): Confluence storage format.
_STORAGE_ELEMENT = re.compile(rb"<(?:ac|ri):[A-Za-z]")


def detect_format(data: bytes, filename: str, mime: str | None = None) -> str:
    """Decide the format from the bytes; the extension and MIME type only break ties
    that the content cannot (OLE2 containers, text flavours)."""
    ext = PurePath(filename).suffix.lower()
    by_ext = next((e.name for e in FORMATS.values() if ext in e.extensions), None)
    by_mime = next((e.name for e in FORMATS.values() if mime and mime in e.mimes), None)
    head = data[:8]
    # Markup (HTML, Confluence storage format) may mention "%PDF-" early; it is no PDF.
    markup = data[:1024].lstrip()[:1] == b"<"
    if head.startswith(b"%PDF") or (b"%PDF-" in data[:1024] and not markup):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        return _detect_zip(data, filename)
    if head.startswith(_OLE2_MAGIC):
        if _ENCRYPTED_PACKAGE in data:
            # Password-protected .docx/.xlsx/.pptx are OLE2 containers around an
            # EncryptedPackage stream (MS-OFFCRYPTO).
            raise IngestError(
                ErrorCode.ENCRYPTED,
                "password-protected Office document; save a copy without the password",
                subject=filename,
            )
        legacy = _LEGACY_BY_EXTENSION.get(ext) or (
            by_mime if by_mime in ("doc", "xls", "ppt") else None
        )
        if legacy is None:
            raise IngestError(
                ErrorCode.UNSUPPORTED_FORMAT,
                "an OLE2 (legacy Office) file whose extension is not .doc, .xls or .ppt",
                subject=filename,
            )
        return legacy
    if by_mime == "confluence":
        return "confluence"
    if by_ext in ("pdf", "docx", "xlsx", "pptx", "doc", "xls", "ppt"):
        raise IngestError(
            ErrorCode.CORRUPT,
            f"the extension says {by_ext.upper()} but the content is not one (truncated or "
            "mislabelled file)",
            subject=filename,
        )
    if _looks_binary(data):
        raise IngestError(
            ErrorCode.UNSUPPORTED_FORMAT, "binary content of an unsupported type", subject=filename
        )
    sniff = data[:512].lstrip().lower()
    if sniff.startswith((b"<!doctype html", b"<html")):
        return "html"  # a full HTML page, whatever its name says
    if markup and _STORAGE_ELEMENT.search(data):
        return "confluence"  # storage format (an export, a saved body), whatever its name
    if by_ext in ("html", "markdown", "text") or by_mime in ("html", "markdown", "text"):
        return by_ext or by_mime or "text"
    if by_ext is None and ext:
        raise IngestError(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"files with extension {ext!r} are not supported; supported: "
            + ", ".join(sorted(supported_extensions())),
            subject=filename,
        )
    return "text"


def _detect_zip(data: bytes, filename: str) -> str:
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError) as exc:
        raise IngestError(
            ErrorCode.CORRUPT, f"broken ZIP container ({exc})", subject=filename
        ) from None
    for prefix, fmt in _OOXML_MAIN_PART:
        if any(n.startswith(prefix) for n in names):
            return fmt
    raise IngestError(
        ErrorCode.UNSUPPORTED_FORMAT,
        "a ZIP archive that is not a Word, Excel or PowerPoint document",
        subject=filename,
    )


def _looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]


def check_zip_limits(data: bytes, ctx: NormalizeContext) -> None:
    """Refuse OOXML zips whose declared decompressed size passes the limit (zip bombs)."""
    import io

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError) as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"broken ZIP container ({exc})") from None
    if total > ctx.limits.max_decompressed_bytes:
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"decompresses to {total:,} bytes, over limits.max_decompressed_bytes "
            f"({ctx.limits.max_decompressed_bytes:,})",
        )


# --- the entry point ----------------------------------------------------------------


def normalize_bytes(
    data: bytes,
    filename: str,
    *,
    mime: str | None = None,
    limits: LimitsSettings | None = None,
    base_url: str | None = None,
    space_key: str | None = None,
    page_id: str | None = None,
    fmt: str | None = None,
) -> NormalizedDocument:
    """Normalize one document of any supported format to Markdown (SPEC §2): of format
    `fmt` when the caller knows it (a Confluence page's body), else the detected one."""
    ctx = NormalizeContext(
        filename=filename,
        mime=mime,
        limits=limits or LimitsSettings(),  # type: ignore[call-arg]
        base_url=base_url,
        space_key=space_key,
        page_id=page_id,
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
    return doc


def iso_datetime(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
