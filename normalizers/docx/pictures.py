"""DOCX pictures: the text a picture shows (`NormalizeContext.pictures`), placed after
the paragraph, heading, list item or table that shows it.

Pandoc names each picture in its AST by the media part it shows, relative to `word/`
("media/image1.png"), for DrawingML (`a:blip r:embed`) and VML (`v:imagedata r:id`)
pictures alike; the bytes are read from the original package (step 1 empties media in
the copy pandoc reads).
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import zipfile

from normalizers.model import PictureSkipped, PictureText
from normalizers.ooxml import media_part


class ReadOnce:
    """The document's picture reader behind a memo by the picture's bytes: a reader that
    follows a failed one (pandoc, python-docx's walk, the LibreOffice round trip) gets
    the text already read instead of the reader's "repeat" skip."""

    def __init__(self, pictures: PictureText) -> None:
        self._pictures = pictures
        self._read: dict[str, str] = {}

    @property
    def languages(self) -> str | None:
        return self._pictures.languages

    def plain(self, data: bytes) -> str | PictureSkipped:
        return self._pictures.plain(data)

    def text(self, data: bytes, name: str) -> str:
        key = hashlib.sha256(data).hexdigest()
        if key not in self._read:
            self._read[key] = self._pictures.text(data, name)
        return self._read[key]


class ShownPictures:
    """One rendering of a package's pictures: a media part's text where the rendering
    first shows those bytes, "" where it shows them again (a repeated picture is read
    once, as the reader skips repeats)."""

    def __init__(self, package: bytes, pictures: PictureText) -> None:
        self._package = package
        self._pictures = pictures
        self._archive: zipfile.ZipFile | None = None
        self._shown: set[str] = set()

    def text(self, part: str) -> str:
        """The Markdown of the picture in zip part `part` ("word/media/image1.png")."""
        if self._archive is None:
            self._archive = zipfile.ZipFile(io.BytesIO(self._package))
        data = media_part(self._archive, part)
        if not data:
            return ""
        digest = hashlib.sha256(data).hexdigest()
        if digest in self._shown:
            return ""
        self._shown.add(digest)
        return self._pictures.text(data, posixpath.basename(part))

    def for_pandoc(self, target: str) -> str:
        """The picture pandoc's AST names `target` (a media part relative to `word/`; an
        external link's URL names no part and shows nothing)."""
        if target.startswith("/"):
            return self.text(target.lstrip("/"))
        return self.text(posixpath.normpath(posixpath.join("word", target)))
