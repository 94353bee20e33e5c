"""Legacy DOC/XLS/PPT through LibreOffice: fixtures are the DOCX/XLSX/PPTX documents
built in code, saved by LibreOffice in the binary formats, then normalized back; and real
Excel 3.0 and 4.0 workbooks (tests/corpus/poi), which are bare BIFF streams, no OLE2."""

from __future__ import annotations

import io
import struct
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openpyxl
import pptx
import pytest

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from normalizers.base import normalize_bytes
from normalizers.detection import biff_version, detect_format
from normalizers.libreoffice import LIBREOFFICE_APT_INSTALL, Conversion, convert_with_libreoffice
from normalizers.model import NormalizeContext, NormalizedDocument
from testkit.corpus import POI
from tests import fixtures_docx

_TO_BINARY = {
    "doc": Conversion(".docx", "MS Word 2007 XML", "doc", "doc:MS Word 97"),
    "xls": Conversion(".xlsx", "Calc MS Excel 2007 XML", "xls", "xls:MS Excel 97"),
    "ppt": Conversion(".pptx", "Impress MS PowerPoint 2007 XML", "ppt", "ppt:MS PowerPoint 97"),
}


def budget_xlsx() -> bytes:
    workbook = openpyxl.Workbook()
    sheet = workbook.active
    assert sheet is not None
    sheet.title = "Budget"
    for row in (["Item", "Cost"], ["Rent", 1200], ["Food", 300]):
        sheet.append(row)
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def plan_pptx() -> bytes:
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    assert slide.shapes.title is not None
    slide.shapes.title.text = "Quarterly plan"
    body = slide.placeholders[1].text_frame
    body.text = "Hire two engineers"
    nested = body.add_paragraph()
    nested.text, nested.level = "Backend", 1
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def to_binary(data: bytes, fmt: str) -> bytes:
    return convert_with_libreoffice(data, _TO_BINARY[fmt], NormalizeContext(f"fixture.{fmt}"))


@pytest.fixture(scope="module")
def normalized() -> dict[str, NormalizedDocument]:
    """Every fixture converted to its legacy format and normalized back, several
    LibreOffice conversions at a time (each must use its own profile to succeed)."""
    sources = {
        "structure.doc": (fixtures_docx.structure_docx(), "doc"),
        "table.doc": (fixtures_docx.merged_table_docx(), "doc"),
        "revisions.doc": (fixtures_docx.revisions_docx(), "doc"),
        "budget.xls": (budget_xlsx(), "xls"),
        "plan.ppt": (plan_pptx(), "ppt"),
    }
    with ThreadPoolExecutor(max_workers=3) as pool:
        binaries = dict(
            zip(sources, pool.map(lambda item: to_binary(*item), sources.values()), strict=True)
        )
        documents = pool.map(lambda name: normalize_bytes(binaries[name], name), binaries)
        return dict(zip(binaries, documents, strict=True))


def test_doc_headings_lists_and_code(normalized: dict[str, NormalizedDocument]) -> None:
    doc = normalized["structure.doc"]
    assert doc.metadata["format"] == "doc"
    assert doc.metadata["converted_with"] == "libreoffice"
    assert doc.title == "Structure fixture"
    assert doc.markdown.startswith(
        "# Structure fixture\n\n# Chapter one\n\nIntro paragraph.\n\n## Section one\n\n"
        "- Apple\n  - Red\n    - Crimson\n  - Green\n- Pear\n\n"
        "### Subsection\n\n1. First step\n    1. Sub step\n2. Second step\n\n"
    )
    assert "```\ndef greet(name):\n    return f'hi {name}'\n```\n" in doc.markdown
    assert "```\nSELECT id, name\n  FROM users WHERE active = 1;\n```\n" in doc.markdown


def test_doc_merged_table(normalized: dict[str, NormalizedDocument]) -> None:
    assert normalized["table.doc"].markdown == fixtures_docx.MERGED_TABLE_MARKDOWN


def test_doc_footnote_revisions_and_text_box(normalized: dict[str, NormalizedDocument]) -> None:
    assert normalized["revisions.doc"].markdown == (
        "Footnoted claim[^1].\n\n"
        "The budget is twenty euros.\n\n"
        "Commented sentence.\n\n"
        "Boxed:\n\nInside the text box\n\n"
        "[^1]: The source of the claim.\n"
    )


def test_xls_goes_through_the_xlsx_normalizer(normalized: dict[str, NormalizedDocument]) -> None:
    doc = normalized["budget.xls"]
    assert doc.metadata["format"] == "xls"
    assert doc.markdown.startswith("## Budget\n\n| Item | Cost |\n")
    assert "| Rent | 1200 |\n| Food | 300 |\n" in doc.markdown


@pytest.mark.parametrize(
    ("name", "version", "words"),
    [
        # the words Apache POI's own tests find in these files
        ("testEXCEL_3.xls", 3, ["Season beginning August", "USDA", "347", "228", "1981/82"]),
        (
            "testEXCEL_4.xls",
            4,
            [
                "Table 10 -- Examination Coverage:",
                "Individual income tax returns, total",
                "$100,000 or more",
                "S corporation returns, Form 1120S [10,15]",
                "individual income tax return \N{LEFT DOUBLE QUOTATION MARK}short forms.",
            ],
        ),
    ],
)
def test_excel_3_and_4_workbooks_are_read(name: str, version: int, words: list[str]) -> None:
    data = (POI / name).read_bytes()
    assert not data.startswith(b"\xd0\xcf\x11\xe0")  # no OLE2 container
    assert biff_version(data) == version
    assert detect_format(data, name) == "xls"
    doc = normalize_bytes(data, name)
    assert doc.metadata["format"] == "xls"
    text = " ".join(doc.markdown.split())
    assert [word for word in words if word not in text] == []


def biff2_worksheet(*labels: str) -> bytes:
    """An Excel 2.x worksheet: BOF (BIFF2, worksheet), a LABEL record a cell down column A,
    EOF; the record layout of Microsoft's Excel binary format documentation."""

    def record(kind: int, body: bytes) -> bytes:
        return struct.pack("<HH", kind, len(body)) + body

    cells = b"".join(
        record(0x0004, struct.pack("<HH3xB", row, 0, len(text)) + text.encode("cp1252"))
        for row, text in enumerate(labels)
    )
    return record(0x0009, struct.pack("<HH", 0x0002, 0x0010)) + cells + record(0x000A, b"")


def test_an_excel_2_worksheet_is_read_whatever_its_name() -> None:
    data = biff2_worksheet("Quarterly rainfall", "Station north")
    assert biff_version(data) == 2
    assert detect_format(data, "rain.bin") == "xls"  # the content says what it is
    doc = normalize_bytes(data, "rain.xls")
    assert "Quarterly rainfall" in doc.markdown and "Station north" in doc.markdown


def test_ppt_goes_through_the_pptx_normalizer(normalized: dict[str, NormalizedDocument]) -> None:
    doc = normalized["plan.ppt"]
    assert doc.metadata["format"] == "ppt"
    assert doc.markdown.startswith(
        "## Slide 1: Quarterly plan\n\n- Hire two engineers\n  - Backend\n"
    )


def test_conversion_gives_ooxml_bytes() -> None:
    legacy = to_binary(fixtures_docx.merged_table_docx(), "doc")
    assert legacy.startswith(b"\xd0\xcf\x11\xe0")  # OLE2: a real binary Word file
    back = convert_with_libreoffice(
        legacy,
        Conversion(".doc", "MS Word 97", "docx", "docx:MS Word 2007 XML"),
        NormalizeContext("t.doc"),
    )
    with zipfile.ZipFile(io.BytesIO(back)) as package:
        assert b"r3c2 | piped" in package.read("word/document.xml")


# --- failures --------------------------------------------------------------------------


def test_damaged_doc_is_corrupt_not_mojibake() -> None:
    garbage = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(range(256)) * 16
    with pytest.raises(IngestError) as caught:
        normalize_bytes(garbage, "damaged.doc")
    assert caught.value.code == ErrorCode.CORRUPT
    assert "damaged.doc" in str(caught.value)
    assert "LibreOffice could not convert" in caught.value.message


def test_missing_soffice_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without soffice
    with pytest.raises(IngestError) as caught:
        normalize_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512), "old.xls")
    assert caught.value.code == ErrorCode.UNSUPPORTED_FORMAT
    assert LIBREOFFICE_APT_INSTALL in caught.value.message
    assert "old.xls" in str(caught.value)


def test_timeout_kills_the_conversion_and_cleans_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    started = time.perf_counter()
    with pytest.raises(IngestError) as caught:
        normalize_bytes(
            b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512),
            "slow.doc",
            limits=LimitsSettings(conversion_timeout_s=0.3),  # type: ignore[call-arg]
        )
    assert caught.value.code == ErrorCode.TOO_LARGE
    assert "conversion_timeout_s" in caught.value.message
    assert time.perf_counter() - started < 5
    assert list(tmp_path.iterdir()) == []  # input, output and profile removed


def test_what_libreoffice_needs_is_known_in_one_module() -> None:
    """Conversions, finding soffice and its command line are normalizers/libreoffice.py's
    alone: a normalizer that converts names a conversion from there."""
    root = Path(__file__).resolve().parent.parent / "normalizers"
    knowledge = ("Conversion(", "UserInstallation", "--convert-to", '"soffice"')
    elsewhere = [
        f"{path.relative_to(root)}: {needle}"
        for path in sorted(root.rglob("*.py"))
        if path.name != "libreoffice.py"
        for needle in knowledge
        if needle in path.read_text()
    ]
    assert elsewhere == []
