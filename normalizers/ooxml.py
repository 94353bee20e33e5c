"""What the OOXML readers (DOCX, XLSX, PPTX) share: a package made safe to read.

OOXML parts never have a DOCTYPE. One that does is hostile or broken: its entities are
never resolved by a parser (no billion laughs, no external files), but a parser that
keeps an unresolved entity as a node hangs the text after it on that node, where
readers that take an element's `.text` (python-pptx, openpyxl) never look: every word
after the first entity of a run vanished; and libxml2 refuses a part whose DTD could
amplify, losing all of it. So such parts are rewritten before any reader sees them: the
DOCTYPE removed, each reference to an entity declared there replaced by its text when
that is plain text (`&nbsp;` declared as `&#160;`), any other reference by nothing, the
text around kept. Replacements may add at most the part's own size (no amplification).
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from datetime import datetime
from html import unescape
from xml.sax.saxutils import escape

from config.errors import ErrorCode
from config.safe_parsing import inflated_pieces
from normalizers.model import NormalizeContext

_XML_SUFFIXES = (".xml", ".rels", ".vml")
# A picture's description that is the image's file name (what PowerPoint and python-pptx
# write when nobody wrote one) describes nothing.
IMAGE_FILE_NAME = re.compile(
    r"[\w\-. ]+\.(?:png|jpe?g|gif|bmp|tiff?|emf|wmf|svg|webp)", re.IGNORECASE
)
_DOCTYPE = re.compile(rb"<!DOCTYPE\b(?:[^\[>]|\[.*?\])*>", re.IGNORECASE | re.DOTALL)
_DECLARATION = re.compile(rb"""<!ENTITY\s+([A-Za-z_][\w.:-]*)\s+(?:"([^"]*)"|'([^']*)')\s*>""")
_REFERENCE = re.compile(rb"&([A-Za-z_][\w.:-]*);")
_PREDEFINED = frozenset({b"amp", b"lt", b"gt", b"quot", b"apos"})
_ROOT_START = re.compile(rb"<[A-Za-z_]")
_PEEK_BYTES = 4096
_MAX_ENTITY_TEXT = 1000  # longer declared texts are dropped like undeclared ones


def without_doctypes(data: bytes, parts: tuple[str, ...] = ()) -> bytes:
    """The package with DOCTYPEs removed (see above) from the parts whose names start
    with one of `parts` (the parts holding text a reader takes; all parts without
    `parts`). The bytes come back unchanged, at the cost of a peek into each of those
    parts, when none has a DOCTYPE."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        infos = [info for info in archive.infolist() if info.filename.startswith(parts or "")]
        doomed = {info.filename for info in infos if _has_doctype(data, archive, info)}
        if not doomed:
            return data
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as target:
            for info in archive.infolist():
                blob = archive.read(info)
                if info.filename in doomed:
                    blob = _without_doctype(blob)
                target.writestr(info.filename, blob)
    return out.getvalue()


def _has_doctype(data: bytes, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bool:
    if not info.filename.lower().endswith(_XML_SUFFIXES):
        return False
    # The first bytes inflated straight from the entry's compressed data: opening every
    # part through zipfile would cost more than reading most decks.
    head = _inflate(data, info, _PEEK_BYTES)
    root = _ROOT_START.search(head)
    if root is None and len(head) >= _PEEK_BYTES:  # a long prolog: a DOCTYPE may follow
        head = archive.read(info)
        root = _ROOT_START.search(head)
    prolog = head[: root.start()] if root else head
    return re.search(rb"<!DOCTYPE", prolog, re.IGNORECASE) is not None


def _without_doctype(blob: bytes) -> bytes:
    doctype = _DOCTYPE.search(blob)
    if doctype is None:
        return blob
    declared: dict[bytes, bytes] = {}
    for match in _DECLARATION.finditer(doctype.group(0)):
        value = unescape((match.group(2) or match.group(3) or b"").decode("utf-8", "replace"))
        if "&" not in value and "<" not in value and len(value) <= _MAX_ENTITY_TEXT:
            declared.setdefault(match.group(1), escape(value).encode("utf-8"))
    budget = len(blob)

    def replace(match: re.Match[bytes]) -> bytes:
        nonlocal budget
        name = match.group(1)
        if name in _PREDEFINED:
            return match.group(0)
        text = declared.get(name, b"")
        if len(text) > budget:
            return b""
        budget -= len(text)
        return text

    body = blob[doctype.end() :]
    return blob[: doctype.start()] + _REFERENCE.sub(replace, body)


_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., name length, extra length
_SIZE_SLACK = 1 << 20  # what a damaged deflate stream may add before it looks crafted


def check_true_sizes(data: bytes, ctx: NormalizeContext) -> None:
    """Refuse a package an entry of which inflates far past the size the zip declares
    for it. Python's zipfile stops at the declared size (the checksum then fails), but
    an office suite that reads past a bad checksum inflates the whole stream: a header
    that understates the size by megabytes is a crafted zip bomb. A damaged stream
    (bit rot) may inflate a little past its size; LibreOffice reads those. Each entry's
    compressed bytes are inflated once, at most to its declared size plus the slack."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for info in archive.infolist():
            allowed = info.file_size + _SIZE_SLACK
            if _inflated_size(data, info, allowed) > allowed:
                raise ctx.fail(
                    ErrorCode.CORRUPT,
                    f"{info.filename} inflates megabytes past the {info.file_size:,} bytes "
                    "the zip declares for it (a crafted zip)",
                )


def _inflated_size(data: bytes, info: zipfile.ZipInfo, cap: int) -> int:
    """How many bytes the entry's compressed data inflates to, counted up to past `cap`."""
    raw = _compressed(data, info)
    if info.compress_type == zipfile.ZIP_STORED:
        return len(raw)
    if info.compress_type != zipfile.ZIP_DEFLATED:
        return 0
    size = 0
    try:
        for piece in inflated_pieces(raw, -zlib.MAX_WBITS, cap):
            size += len(piece)
    except zlib.error:
        pass  # damaged data inflates no further than this
    return size


def _inflate(data: bytes, info: zipfile.ZipInfo, length: int) -> bytes:
    """The entry's first `length` bytes, inflated (as far as the data allows)."""
    raw = _compressed(data, info)
    if info.compress_type == zipfile.ZIP_STORED:
        return raw[:length]
    if info.compress_type != zipfile.ZIP_DEFLATED:
        return b""
    try:
        return next(inflated_pieces(raw, -zlib.MAX_WBITS, length, piece=length), b"")
    except zlib.error:
        return b""


def _compressed(data: bytes, info: zipfile.ZipInfo) -> bytes:
    """The entry's compressed bytes, found through its local header."""
    header = info.header_offset
    if header + _LOCAL_HEADER.size > len(data):
        return b""
    signature, name_length, extra_length = _LOCAL_HEADER.unpack_from(data, header)
    if signature != b"PK\x03\x04":
        return b""
    start = header + _LOCAL_HEADER.size + name_length + extra_length
    return data[start : start + info.compress_size]


def check_zip_limits(data: bytes, ctx: NormalizeContext) -> None:
    """Refuse OOXML zips whose declared decompressed size passes the limit (zip bombs)."""
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


def iso_datetime(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def media_part(archive: zipfile.ZipFile, name: str) -> bytes | None:
    """A media part's bytes for the picture reader; None where the part is missing or
    damaged (a picture that cannot be read costs its text, never the document). zipfile
    inflates no more than the size the zip declares, which `check_zip_limits` bounds in
    total by limits.max_decompressed_bytes."""
    try:
        return archive.read(name)
    except (KeyError, zipfile.BadZipFile, ValueError, OSError, NotImplementedError, zlib.error):
        return None
