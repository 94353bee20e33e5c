"""What a normalizer gets and gives: the context it reads a document in, the Markdown
document with its metadata, anchors and outgoing links, and the one signature every
format module implements (`Normalizer`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from markdown_text import Anchor


@dataclass(frozen=True)
class LinkRecord:
    """An outgoing link found while normalizing (docs/chunking.md#links)."""

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

    def anchor_rows(self) -> list[list[int | str]]:
        """The anchors as JSON rows `[offset, kind, value]`, `1` added for a hard one
        (stage cache and chunk key)."""
        return [[a.offset, a.kind, a.value, *([1] if a.hard else [])] for a in self.anchors]

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
            "anchors": self.anchor_rows(),
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
            anchors=tuple(
                Anchor(row[0], row[1], row[2], hard=row[3:] == [1]) for row in data["anchors"]
            ),
            links=tuple(LinkRecord(**link) for link in data["links"]),
            warnings=tuple(data["warnings"]),
        )


@dataclass(frozen=True)
class PictureSkipped:
    """Why a picture reader read nothing of a picture: one of
    `normalizers.pictures.SKIP_REASONS` ("small", "unreadable", "timeout", ...)."""

    reason: str


class PictureText(Protocol):
    """Reads what a picture shows for the normalizer that found it, one per document (it
    counts what it read and skips repeats of a picture)."""

    @property
    def languages(self) -> str | None:
        """The languages text is read in (tesseract's `-l`); None: no OCR."""
        ...

    def text(self, data: bytes, name: str) -> str:
        """The Markdown to put where the picture stands ("" for nothing: skipped, no text)."""
        ...

    def plain(self, data: bytes) -> str | PictureSkipped:
        """The picture's caption and text as Markdown paragraphs (an image file's body),
        or why nothing was read."""
        ...


class ConvertedAhead(Protocol):
    """Files a run converted in batches before normalizing them (one LibreOffice start for
    many files, `normalizers.legacy_batch`), looked up by content."""

    def get(self, data: bytes, conversion: Hashable) -> bytes | None:
        """`data` converted by `conversion` (a `normalizers.libreoffice.Conversion`), or None
        where it was not (not in the batch, or it failed there: converted alone then)."""
        ...


@dataclass(frozen=True)
class NormalizeContext:
    filename: str  # file name or page title: used in messages and as an extension hint
    mime: str | None = None
    limits: LimitsSettings = field(default_factory=LimitsSettings)  # type: ignore[arg-type]
    # Where the document's relative links resolve (a base URL incl. context path), and
    # its container and locator in its source (`SourceDocument`): a Confluence page's
    # space, which its links to pages default to, and its id (attachment download URLs).
    base_url: str | None = None
    container: str | None = None
    locator: str | None = None
    # Reads the pictures the document holds; None: a picture keeps its alt text only.
    pictures: PictureText | None = None
    # The attachments a Confluence page's body shows (diagram macros, images), by file name.
    attachments: Mapping[str, bytes] = field(default_factory=lambda: MappingProxyType({}))
    # Conversions made ahead for the run's batch; None: each file is converted alone.
    converted: ConvertedAhead | None = None

    def fail(self, code: ErrorCode, message: str) -> IngestError:
        return IngestError(code, message, subject=self.filename)


Normalizer = Callable[[bytes, NormalizeContext], NormalizedDocument]


class AnchoredMarkdown:
    """Markdown written section by section (pages, sheets, slides), each section's start
    anchored so chunks can say which section they come from; `hard` sections never
    share a chunk."""

    def __init__(self, kind: str, *, hard: bool = False) -> None:
        self.kind = kind
        self.hard = hard
        self._parts: list[str] = []
        self._anchors: list[Anchor] = []
        self._length = 0

    def add(self, value: int | str, text: str) -> None:
        """Start section `value` here; `text` may be empty (the anchor still counts)."""
        self._anchors.append(Anchor(self._length, self.kind, value, self.hard))
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
