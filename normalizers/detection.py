"""Which format a document is, decided from its bytes; the extension and MIME type only
break ties the content cannot (OLE2 containers, text flavours). Diagrams are told by
`normalizers.diagrams.sniff` first: a PNG or SVG that carries a draw.io diagram is the
diagram, any other is a picture.

Excel workbooks before Excel 5 (BIFF2, BIFF3, BIFF4: Excel 2.x, 3.0, 4.0) are no OLE2
container: the file is the bare BIFF record stream, starting with its BOF record. They are
XLS all the same, and LibreOffice reads them like the later ones.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
from pathlib import PurePath
from types import MappingProxyType

from config.errors import ErrorCode, IngestError
from normalizers.diagrams.sniff import PNG_MAGIC, diagram_format
from normalizers.registry import FORMATS, supported_extensions

_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
# A bare BIFF stream's first record, BOF: its id by BIFF version (BIFF5/8 streams are
# normally inside an OLE2 container, but a bare one is read too), and the sheet types it
# may announce (workbook globals, worksheet, chart, macro sheet, BIFF4 workbook).
_BIFF_BOF_IDS = MappingProxyType({0x0009: 2, 0x0209: 3, 0x0409: 4, 0x0809: 5})
_BIFF_SHEET_TYPES = frozenset({0x0005, 0x0010, 0x0020, 0x0040, 0x0100})
# An OOXML package's main folder, its format and what that format is to a user.
_OOXML_MAIN_PART = (
    ("word/", "docx", "a Word document"),
    ("xl/", "xlsx", "an Excel workbook"),
    ("ppt/", "pptx", "a PowerPoint presentation"),
    ("visio/", "vsdx", "a Visio drawing"),
)
_LEGACY_BY_EXTENSION = MappingProxyType(
    {".doc": "doc", ".xls": "xls", ".ppt": "ppt", ".vsd": "vsd"}
)
# Formats told by their content alone: a file named so that is not one is damaged.
_BY_CONTENT = frozenset({"pdf", "docx", "xlsx", "pptx", "doc", "xls", "ppt", "vsdx", "vsd",
                         "drawio", "gliffy", "image"})  # fmt: skip
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
    diagram = diagram_format(data)
    if diagram is not None:
        return diagram
    if head.startswith(b"PK\x03\x04"):
        return _detect_zip(data, filename, by_ext)
    if _is_image(data):  # a picture format: its text is read by OCR
        return "image"
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
            by_mime if by_mime in _LEGACY_BY_EXTENSION.values() else None
        )
        if legacy is None:
            raise IngestError(
                ErrorCode.UNSUPPORTED_FORMAT,
                "an OLE2 (legacy Office) file whose extension is not .doc, .xls, .ppt or .vsd",
                subject=filename,
            )
        return legacy
    if biff_version(data) is not None:
        return "xls"
    if by_mime == "confluence":
        return "confluence"
    if by_ext in _BY_CONTENT:
        raise IngestError(
            ErrorCode.CORRUPT,
            f"the extension says {ext[1:].upper()} but the content is not one (truncated or "
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


def biff_version(data: bytes) -> int | None:
    """The BIFF version (2 to 5; 5 covers BIFF8) of a bare Excel record stream, read from
    its BOF record; None for anything else."""
    if len(data) < 8:
        return None
    record, length = struct.unpack_from("<HH", data)
    version = _BIFF_BOF_IDS.get(record)
    if version is None or not 4 <= length <= 20:
        return None
    # BIFF2's BOF holds the format version then the sheet type; later ones the same, the
    # version being 0 in BIFF3/4 files Excel wrote and 0x0500/0x0600 in BIFF5/8.
    sheet_type = struct.unpack_from("<H", data, 6)[0]
    return version if sheet_type in _BIFF_SHEET_TYPES else None


def _detect_zip(data: bytes, filename: str, by_ext: str | None) -> str:
    """The OOXML format of a ZIP package, by the main folder it holds; `by_ext`: the
    format its extension claims, named in the error when it holds none."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, ValueError, OSError, NotImplementedError) as exc:
        raise IngestError(
            ErrorCode.CORRUPT, f"broken ZIP container ({exc})", subject=filename
        ) from None
    for prefix, fmt, _ in _OOXML_MAIN_PART:
        if any(n.startswith(prefix) for n in names):
            return fmt
    claimed = next((part for part in _OOXML_MAIN_PART if part[1] == by_ext), None)
    if claimed is not None:
        prefix, _, what = claimed
        message = (
            f"the extension {PurePath(filename).suffix!r} says {what}, but this ZIP archive "
            f"holds none (no {prefix} folder): a ZIP file renamed, or a damaged package"
        )
    else:
        message = "a ZIP archive that is not a Word, Excel, PowerPoint or Visio document"
    raise IngestError(ErrorCode.UNSUPPORTED_FORMAT, message, subject=filename)


# The signatures of PNG, JPEG, GIF, TIFF (both byte orders), BMP and WebP (in RIFF).
_IMAGE_MAGIC = (PNG_MAGIC, b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"II*\x00", b"MM\x00*")
# BMP's "BM" is short: its info header's size (bytes 14-18) must be one of the known ones.
_BMP_INFO_SIZES = frozenset({12, 40, 52, 56, 64, 108, 124})


def _is_image(data: bytes) -> bool:
    if data.startswith(_IMAGE_MAGIC):
        return True
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return True
    return data[:2] == b"BM" and int.from_bytes(data[14:18], "little") in _BMP_INFO_SIZES


def _looks_binary(data: bytes) -> bool:
    return b"\x00" in data[:8192]
