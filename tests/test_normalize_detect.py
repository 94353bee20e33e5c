"""Format detection by content (never the extension alone) and the size limit."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from flows.cli import main
from normalizers.base import normalize_bytes
from normalizers.detection import detect_format
from tests.picture_helpers import oversized_picture

OLE2 = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def _directory_entry(name: str) -> bytes:
    """An OLE2 directory entry's name field as MS-CFB stores it (UTF-16LE, padded)."""
    encoded = name.encode("utf-16-le")
    return encoded + b"\x00" * (64 - len(encoded))


def test_password_protected_ooxml_is_encrypted_whatever_its_extension() -> None:
    container = (
        OLE2
        + b"\x00" * 504
        + _directory_entry("EncryptionInfo")
        + _directory_entry("EncryptedPackage")
    )
    for name in ("report.docx", "sheet.xlsx", "deck.pptx", "renamed.doc"):
        with pytest.raises(IngestError) as error:
            detect_format(container, name)
        assert error.value.code is ErrorCode.ENCRYPTED
        assert error.value.subject == name


def test_legacy_office_container_needs_a_legacy_extension() -> None:
    container = OLE2 + b"\x00" * 504 + _directory_entry("WordDocument")
    assert detect_format(container, "old.doc") == "doc"
    with pytest.raises(IngestError) as error:
        detect_format(container, "old.bin")
    assert error.value.code is ErrorCode.UNSUPPORTED_FORMAT


@pytest.mark.parametrize(
    ("data", "name", "expected"),
    [
        (b"%PDF-1.7\n...", "report.docx", "pdf"),
        (b"<!DOCTYPE html><html><body>x</body></html>", "page.txt", "html"),
        (b"# Title\n\ntext", "notes.md", "markdown"),
        (b"plain words", "notes", "text"),
    ],
)
def test_content_decides_over_the_extension(data: bytes, name: str, expected: str) -> None:
    assert detect_format(data, name) == expected


def test_a_bof_record_id_alone_is_no_excel_file() -> None:
    # a BIFF3 BOF id with a sheet type no Excel writes: mislabelled, not a workbook
    with pytest.raises(IngestError) as error:
        detect_format(b"\x09\x02\x06\x00\x00\x00\x77\x00" + bytes(16), "odd.xls")
    assert error.value.code is ErrorCode.CORRUPT


def test_lying_extension_and_size_limit() -> None:
    with pytest.raises(IngestError) as error:
        normalize_bytes(b"just text, not a spreadsheet", "numbers.xlsx")
    assert error.value.code is ErrorCode.CORRUPT
    with pytest.raises(IngestError) as error:
        normalize_bytes(b"x" * 2048, "big.txt", limits=LimitsSettings(max_file_bytes=1024))  # type: ignore[call-arg]
    assert error.value.code is ErrorCode.TOO_LARGE
    assert "limits.max_file_bytes" in error.value.message
    with pytest.raises(IngestError) as error:
        normalize_bytes(b"\x00\x01\x02binary", "blob.dat")
    assert error.value.code is ErrorCode.UNSUPPORTED_FORMAT


def plain_zip() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("notes.txt", "a text file, zipped")
    return out.getvalue()


@pytest.mark.parametrize(
    ("name", "claim", "folder"),
    [
        ("drawing.vsdx", "a Visio drawing", "visio/"),
        ("report.docx", "a Word document", "word/"),
        ("book.xlsm", "an Excel workbook", "xl/"),
        ("deck.pptx", "a PowerPoint presentation", "ppt/"),
    ],
)
def test_a_plain_zip_under_an_office_name_is_told_what_its_extension_claims(
    name: str, claim: str, folder: str
) -> None:
    with pytest.raises(IngestError) as error:
        normalize_bytes(plain_zip(), name)
    assert error.value.code is ErrorCode.UNSUPPORTED_FORMAT
    assert claim in error.value.message and f"no {folder} folder" in error.value.message
    assert repr(name[name.index(".") :]) in error.value.message
    with pytest.raises(IngestError) as error:  # a ZIP named so claims nothing
        normalize_bytes(plain_zip(), "bundle.zip")
    assert "not a Word, Excel, PowerPoint or Visio document" in error.value.message


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("drawing.vsdx", plain_zip, ["UNSUPPORTED_FORMAT", "says a Visio drawing"]),
        (
            "poster.png",  # a valid PNG of 100 million pixels
            oversized_picture,
            ["TOO_LARGE", "10,000 x 10,000 pixels", "89,478,485", "PIL.Image.MAX_IMAGE_PIXELS"],
        ),
    ],
)
def test_normalize_says_what_is_wrong_with_the_file(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    make: Callable[[], bytes],
    says: list[str],
) -> None:
    """`ingest normalize FILE`: exit 1 and the file's own error, not another reader's."""
    path = tmp_path / name
    path.write_bytes(make())
    monkeypatch.setenv("INGEST_CACHE__DIR", str(tmp_path / "cache"))
    assert main(["normalize", str(path)]) == 1
    err = capsys.readouterr().err
    assert name in err and all(part in err for part in says), err
    assert not any(other in err for other in ("pandoc", "python-docx", "LibreOffice", "truncated"))
