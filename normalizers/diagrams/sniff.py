"""Which diagram format bytes hold, decided from the content alone, cheaply (no full
parse): `normalizers.detection` asks here before its own checks, and the Confluence
normalizer's attachments come without a reliable name.

- draw.io: XML whose root element is `<mxfile>` or a bare `<mxGraphModel>`; a PNG with
  a tEXt/zTXt/iTXt chunk of keyword `mxfile` (draw.io's "editable PNG"); an SVG whose
  root `<svg>` carries the diagram in its `content` attribute (draw.io's "editable SVG").
  A PNG or SVG without the diagram is a picture, none of these.
- Gliffy: JSON declaring `"contentType": "application/gliffy+json"`, or with a `stage`
  holding `objects` (older Gliffy files lack the content type).
Visio (`visio/` parts in a zip, OLE2 `.vsd`) is told by `normalizers.detection` with
the other zip and OLE2 formats.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DRAWIO_PNG_KEYWORD = b"mxfile"
_TEXT_CHUNKS = frozenset({b"tEXt", b"zTXt", b"iTXt"})
_CHUNK_HEAD = struct.Struct(">I4s")
# The XML declaration, comments, processing instructions and a DOCTYPE may come before
# the root element; its name is what counts.
_XML_ROOT = re.compile(
    rb"\A(?:\xef\xbb\xbf)?(?:\s|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^>\[]*(?:\[.*?\])?\s*>)*<([A-Za-z_][\w.:-]*)",
    re.DOTALL,
)
_DRAWIO_ROOTS = frozenset({b"mxfile", b"mxGraphModel"})
_SVG_CONTENT = re.compile(
    rb"""<svg\b[^>]*?\scontent\s*=\s*["']\s*(?:&lt;|<)(?:mxfile|mxGraphModel)\b""", re.DOTALL
)
_GLIFFY_TYPE = re.compile(rb'"contentType"\s*:\s*"application/gliffy\+json"')
_GLIFFY_STAGE = re.compile(rb'"stage"\s*:\s*\{')
_SNIFF_BYTES = 64 * 1024


def diagram_format(data: bytes) -> str | None:
    """The format ("drawio", "gliffy") when the bytes hold such a diagram, else None."""
    if data.startswith(PNG_MAGIC):
        return "drawio" if mxfile_png_chunk(data) is not None else None
    head = data[:_SNIFF_BYTES]
    root = _XML_ROOT.match(head)
    if root is not None:
        if root.group(1) in _DRAWIO_ROOTS:
            return "drawio"
        if root.group(1) == b"svg" and _SVG_CONTENT.search(head):
            return "drawio"
        return None
    if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") and (
        _GLIFFY_TYPE.search(head) or (_GLIFFY_STAGE.search(head) and b'"objects"' in data)
    ):
        return "gliffy"
    return None


def mxfile_png_chunk(data: bytes) -> tuple[bytes, bytes] | None:
    """The type and body after the keyword of the PNG's `mxfile` text chunk (tEXt: the
    URL-encoded XML; zTXt and iTXt: as the PNG specification lays them out), or None
    when the PNG has none."""
    for kind, body in _png_chunks(data):
        keyword, _, rest = body.partition(b"\0")
        if kind in _TEXT_CHUNKS and keyword == DRAWIO_PNG_KEYWORD:
            return kind, rest
    return None


def _png_chunks(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(type, body) of each chunk, up to IEND or the end of what is there."""
    offset = len(PNG_MAGIC)
    while offset + _CHUNK_HEAD.size <= len(data):
        length, kind = _CHUNK_HEAD.unpack_from(data, offset)
        body_start = offset + _CHUNK_HEAD.size
        yield kind, data[body_start : body_start + length]
        if kind == b"IEND":
            return
        offset = body_start + length + 4  # the CRC
