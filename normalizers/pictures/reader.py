"""`PictureReader`: one document's pictures read by tesseract (and described by a vision
model where captions are on), what it skipped counted by reason, results cached by the
picture's bytes so a re-read document OCRs only its new pictures.

A picture becomes one Markdown quote where it stands, so the chunker keeps it together
and a reader of a chunk sees where the text came from:

    > *Picture (chart.png):* A caption, where captions are on.
    >
    > The words tesseract read, line by line,
    > paragraph by paragraph.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from config.settings import PicturesSettings
from normalizers.markdown import escape_text
from normalizers.model import PictureSkipped
from normalizers.pictures.images import (
    Picture,
    PictureTooLarge,
    UnreadablePicture,
    probe,
)
from normalizers.pictures.ocr import (
    OcrFailed,
    OcrTimeout,
    Word,
    ocr_languages,
    orientation_detection,
    tesseract_version,
)
from normalizers.pictures.recipe import RECIPE_VERSION, read_picture
from normalizers.tables import escape_block_start

SKIP_REASONS = ("small", "repeat", "cap", "timeout", "unreadable", "large")
# Skips the moment caused, not the picture (OCR past `timeout_s` on a loaded machine):
# another read may get its text.
MOMENTARY_SKIPS = frozenset({"timeout"})


class PictureCache(Protocol):
    """Where OCR results and captions are kept between runs, by a key this module makes."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, value: bytes) -> None: ...


class Captioner(Protocol):
    """Describes a picture in a sentence or two ("" where it may not or cannot)."""

    def caption(self, data: bytes, picture: Picture) -> str: ...


@dataclass
class PictureCounts:
    """What one document's reader did: the run report adds them up."""

    read: int = 0  # pictures OCR'd (a cached result counts)
    skipped: Counter[str] = field(default_factory=Counter)  # by reason (SKIP_REASONS)
    ocr_seconds: float = 0.0  # tesseract's time (cache hits cost none)
    captioned: int = 0

    def metadata(self) -> dict[str, Any]:
        """The counts for a document's metadata; {} when there were no pictures."""
        out: dict[str, Any] = {}
        if self.read:
            out["read"] = self.read
        if self.skipped:
            out["skipped"] = dict(sorted(self.skipped.items()))
        if self.ocr_seconds:
            out["ocr_seconds"] = round(self.ocr_seconds, 3)
        if self.captioned:
            out["captioned"] = self.captioned
        return out


@dataclass(frozen=True)
class PictureReading:
    """What was read from one picture: its caption and its text's paragraphs of lines."""

    caption: str
    paragraphs: tuple[tuple[str, ...], ...]

    def plain(self) -> str:
        """The caption and the text as Markdown paragraphs (an image file's body)."""
        blocks = [escape_text(self.caption)] if self.caption else []
        blocks += ["\n".join(_escaped(line) for line in p) for p in self.paragraphs]
        return "\n\n".join(blocks)

    def quoted(self, name: str) -> str:
        """The picture as a Markdown quote headed by its name (where a document shows it)."""
        if not (self.caption or self.paragraphs):
            return ""
        head = f"> *Picture ({escape_text(name)}):*"
        lines = [f"{head} {escape_text(self.caption)}" if self.caption else head]
        for paragraph in self.paragraphs:
            lines.append(">")
            lines += [f"> {_escaped(line)}" for line in paragraph]
        return "\n".join(lines)


class PictureReader:
    """Reads one document's pictures (`normalizers.model.PictureText`): OCR in
    `languages` (tesseract's `-l`, None: no OCR), the caption where a captioner is given."""

    def __init__(
        self,
        settings: PicturesSettings,
        *,
        languages: str | None,
        cache: PictureCache | None = None,
        captioner: Captioner | None = None,
    ) -> None:
        self.settings = settings
        self.languages = languages
        self.cache = cache
        self.captioner = captioner
        self.counts = PictureCounts()
        self._seen: set[str] = set()

    def text(self, data: bytes, name: str) -> str:
        """The picture as Markdown where the document shows it ("" for nothing)."""
        result = self.read(data)
        return result.quoted(name) if isinstance(result, PictureReading) else ""

    def plain(self, data: bytes) -> str | PictureSkipped:
        result = self.read(data)
        return result.plain() if isinstance(result, PictureReading) else result

    def read(self, data: bytes) -> PictureReading | PictureSkipped:
        """The picture's caption and text, or why it was skipped (counted)."""
        try:
            picture = probe(data)
        except PictureTooLarge:
            return self._skip("large")
        except UnreadablePicture:
            return self._skip("unreadable")
        if min(picture.width, picture.height) < self.settings.min_side or (
            picture.width * picture.height < self.settings.min_pixels
        ):
            return self._skip("small")
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._seen:
            return self._skip("repeat")
        self._seen.add(digest)
        if self.counts.read >= self.settings.max_per_document:
            return self._skip("cap")
        paragraphs: tuple[tuple[str, ...], ...] = ()
        if self.languages is not None:
            try:
                words = self._words(data, digest, picture, self.languages)
            except OcrTimeout:
                return self._skip("timeout")
            except (OcrFailed, UnreadablePicture):
                return self._skip("unreadable")
            paragraphs = self._paragraphs(words)
        self.counts.read += 1
        caption = self.captioner.caption(data, picture) if self.captioner is not None else ""
        if caption:
            self.counts.captioned += 1
        return PictureReading(caption, paragraphs)

    def _skip(self, reason: str) -> PictureSkipped:
        """Nothing read: `reason` counted."""
        self.counts.skipped[reason] += 1
        return PictureSkipped(reason)

    def _words(self, data: bytes, digest: str, picture: Picture, languages: str) -> list[Word]:
        key = hashlib.sha256(
            f"ocr|{RECIPE_VERSION}|{tesseract_version()}|osd={orientation_detection()}"
            f"|{languages}|{digest}".encode()
        ).hexdigest()
        cached = self.cache.get(key) if self.cache is not None else None
        if cached is not None:
            return [Word(*row) for row in json.loads(cached)]
        started = time.perf_counter()
        try:
            words = read_picture(data, picture, languages, self.settings.timeout_s)
        finally:
            self.counts.ocr_seconds += time.perf_counter() - started
        if self.cache is not None:
            rows = [[w.block, w.paragraph, w.line, w.confidence, w.text, w.size] for w in words]
            self.cache.put(key, json.dumps(rows, ensure_ascii=False).encode())
        return words

    def _paragraphs(self, words: Sequence[Word]) -> tuple[tuple[str, ...], ...]:
        """The words tesseract is sure enough of, as paragraphs of lines."""
        lines: dict[tuple[int, int, int], list[str]] = {}
        for word in words:
            if word.confidence >= self.settings.min_confidence:
                lines.setdefault((word.block, word.paragraph, word.line), []).append(word.text)
        paragraphs: dict[tuple[int, int], list[str]] = {}
        for (block, paragraph, _), line_words in lines.items():
            paragraphs.setdefault((block, paragraph), []).append(" ".join(line_words))
        return tuple(tuple(lines_) for lines_ in paragraphs.values())


def settled(metadata: Mapping[str, Any]) -> bool:
    """Whether a normalized document (by its metadata) holds its pictures as any read
    gives them: none skipped for a reason of the moment (`MOMENTARY_SKIPS`). A document
    that is not is no final result to cache."""
    pictures = metadata.get("pictures")  # a Markdown file's front matter may hold any
    skipped = pictures.get("skipped") if isinstance(pictures, Mapping) else None
    return not (isinstance(skipped, Mapping) and any(map(skipped.get, MOMENTARY_SKIPS)))


def _escaped(line: str) -> str:
    return escape_block_start(escape_text(line))


@dataclass(frozen=True)
class PictureSetup:
    """A run's way of reading pictures, resolved once: tesseract's languages (None: no
    OCR), the cache and the captioner; `reader()` makes each document's reader."""

    settings: PicturesSettings
    languages: str | None
    cache: PictureCache | None = None
    captioner: Captioner | None = None

    @property
    def active(self) -> bool:
        return self.languages is not None or self.captioner is not None

    def reader(self) -> PictureReader | None:
        """A new document's reader; None where pictures are not read at all."""
        if not self.active:
            return None
        return PictureReader(
            self.settings, languages=self.languages, cache=self.cache, captioner=self.captioner
        )


def picture_setup(
    settings: PicturesSettings,
    *,
    cache: PictureCache | None = None,
    captioner: Captioner | None = None,
) -> tuple[PictureSetup, list[str]]:
    """The run's setup, and a warning for each part of OCR that is off for want of
    tesseract or a language's data."""
    languages, warnings = ocr_languages(settings.languages) if settings.ocr else (None, [])
    return PictureSetup(settings, languages, cache, captioner), warnings
