"""Small PDFs built in code with pymupdf for the PDF normalizer tests.

Each builder returns the file's bytes. Text goes in with `insert_text` (one line per
call, Base-14 fonts: `helv` regular, `hebo` bold, `cour` monospace), so the tests
control sizes, weights and positions exactly.
"""

from __future__ import annotations

from typing import Any

import pymupdf

# pymupdf's constructors are untyped; documents and pages are Any here.
_PYMUPDF: Any = pymupdf

BODY = (
    "Body text sets the most common font size of the document.",
    "A second line of body text keeps that size the majority.",
    "A third line makes sure the statistics are unambiguous.",
)


def new_doc() -> Any:
    return _PYMUPDF.open()


def to_bytes(doc: Any, **save: Any) -> bytes:
    data: bytes = doc.tobytes(**save)
    doc.close()
    return data


def lines(page: Any, x: float, y: float, texts: tuple[str, ...] | list[str], **kw: Any) -> float:
    """Write `texts` one per line from (x, y); returns the y after the last line."""
    size = kw.get("fontsize", 11)
    for text in texts:
        page.insert_text((x, y), text, **kw)
        y += size * 1.3
    return y


def headings_pdf(title: str = "") -> bytes:
    doc = new_doc()
    page = doc.new_page()
    y = lines(page, 72, 72, ["Annual Report"], fontsize=22, fontname="hebo")
    y = lines(page, 72, y + 12, ["Results"], fontsize=16, fontname="hebo")
    y = lines(page, 72, y + 10, BODY)
    y = lines(page, 72, y + 12, ["Details"], fontsize=13, fontname="helv")
    y = lines(page, 72, y + 10, BODY)
    y = lines(page, 72, y + 12, ["Bold Label"], fontname="hebo")
    lines(page, 72, y + 8, BODY)
    doc.set_metadata(
        {
            "title": title,
            "author": "Ann Author",
            "creationDate": "D:20240131120000+02'00'",
            "modDate": "D:20240301083000Z",
        }
    )
    return to_bytes(doc)


def two_column_pdf() -> bytes:
    """A full-width title over two columns whose paragraph gaps line up; the right
    column is drawn first so content-stream order is wrong."""
    doc = new_doc()
    page = doc.new_page()
    lines(page, 72, 60, ["Columns Title"], fontsize=18, fontname="hebo")
    right = ["Right one alpha text here.", "Right one bravo text here."]
    right2 = ["Right two charlie text.", "Right two delta text."]
    left = ["Left one echo text here.", "Left one foxtrot text here."]
    left2 = ["Left two golf text here.", "Left two hotel text here."]
    lines(page, 320, 100, right)
    lines(page, 320, 150, right2)
    lines(page, 72, 100, left)
    lines(page, 72, 150, left2)
    return to_bytes(doc)


def running_headers_pdf(pages: int = 4) -> bytes:
    doc = new_doc()
    for n in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 36), "ACME Corp - Confidential", fontsize=9)
        y = lines(page, 72, 100, [f"Body of page {n} starts here."])
        lines(page, 72, y, BODY)
        page.insert_text((72, 810), "Quarterly report 2024", fontsize=9)
        page.insert_text((500, 810), f"Page {n} of {pages}", fontsize=9)
    return to_bytes(doc)


def hyphenation_pdf() -> bytes:
    doc = new_doc()
    page = doc.new_page()
    lines(page, 72, 72, ["The system keeps infor-", "mation about every well-", "Known item."])
    return to_bytes(doc)


def lists_pdf() -> bytes:
    doc = new_doc()
    page = doc.new_page()
    y = lines(page, 72, 72, ["Shopping notes for the week:"])
    y = lines(page, 72, y + 10, ["\u2022 First item", "\u2022 Second item"])
    y = lines(page, 90, y, ["\u2022 Nested item"])
    y = lines(page, 72, y, ["\u2022 Third item"])
    y = lines(page, 72, y + 20, ["Then follow these steps:"])
    lines(page, 72, y + 10, ["1. Open the box.", "2. Remove the lid."])
    return to_bytes(doc)


def toc_pdf() -> bytes:
    doc = new_doc()
    entries = ["Introduction " + ". " * 30 + "1", "Methods " + ". " * 33 + "5"]
    lines(doc.new_page(), 72, 100, entries)
    return to_bytes(doc)


def table_pdf() -> bytes:
    """A ruled 3x3 table; one cell holds a `|`, one wraps over two lines."""
    doc = new_doc()
    page = doc.new_page()
    lines(page, 72, 60, ["Text before the table."])
    rows = [["Name", "Value", "Note"], ["alpha", "1 | 2", "first"], ["beta", "3", "two"]]
    top, height, width = 100.0, 36.0, 120.0
    for i in range(len(rows) + 1):
        page.draw_line((72, top + i * height), (72 + 3 * width, top + i * height))
    for j in range(4):
        page.draw_line((72 + j * width, top), (72 + j * width, top + len(rows) * height))
    for i, row in enumerate(rows):
        for j, text in enumerate(row):
            page.insert_text((76 + j * width, top + i * height + 14), text, fontsize=10)
    page.insert_text((76 + 2 * width, top + 2 * height + 28), "lines", fontsize=10)
    lines(page, 72, top + len(rows) * height + 30, ["Text after the table."])
    return to_bytes(doc)


def encrypted_pdf(user_password: str) -> bytes:
    doc = new_doc()
    lines(doc.new_page(), 72, 72, ["Secret content."])
    return to_bytes(
        doc,
        encryption=_PYMUPDF.PDF_ENCRYPT_AES_256,
        owner_pw="owner-secret",
        user_pw=user_password,
    )


def image_only_pdf() -> bytes:
    doc = new_doc()
    page = doc.new_page()
    pixmap = _PYMUPDF.Pixmap(pymupdf.csRGB, _PYMUPDF.IRect(0, 0, 40, 40), False)
    pixmap.clear_with(200)
    page.insert_image(_PYMUPDF.Rect(72, 72, 272, 272), pixmap=pixmap)
    return to_bytes(doc)


def scanned_pdf(text_first_page: bool = False) -> bytes:
    """A page that is only a 200 dpi picture of two lines of text; optionally after a
    page with a text layer."""
    source = new_doc()
    lines(source.new_page(), 72, 100, SCANNED, fontsize=16)
    pixmap = source[0].get_pixmap(dpi=200)
    source.close()
    doc = new_doc()
    if text_first_page:
        lines(doc.new_page(), 72, 100, ["A page with a real text layer."])
    page = doc.new_page()
    page.insert_image(page.rect, pixmap=pixmap)
    return to_bytes(doc)


SCANNED = ("Scanned Invoice Number 4711", "Total amount due: 250 EUR")


def plain_pdf(pages: int) -> bytes:
    doc = new_doc()
    for n in range(1, pages + 1):
        lines(doc.new_page(), 72, 100, [f"Page {n} body line one.", f"Page {n} body line two."])
    return to_bytes(doc)


# A structurally valid PDF whose page tree is empty.
ZERO_PAGE_PDF = (
    b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n"
    b"2 0 obj<</Type/Pages/Kids[]/Count 0>>endobj\n"
    b"trailer<</Root 1 0 R>>\n%%EOF\n"
)
