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


def pdf_with_pictures(pictures: list[bytes]) -> bytes:
    """A page of text per picture, the picture drawn below it."""
    doc = new_doc()
    for n, picture in enumerate(pictures, start=1):
        page = doc.new_page()
        label = "Page one shows a chart." if n == 1 else f"Page {_ORDINALS[n]} shows it again."
        lines(page, 72, 100, [label])
        page.insert_image(_PYMUPDF.Rect(72, 140, 472, 240), stream=picture)
    return to_bytes(doc)


_ORDINALS = {2: "two", 3: "three"}


def searchable_scan_pdf() -> bytes:
    """A scanned page with its OCR text layer (invisible text over the picture), as
    scanners write them."""
    source = new_doc()
    lines(source.new_page(), 72, 100, SCANNED, fontsize=16)
    pixmap = source[0].get_pixmap(dpi=200)
    source.close()
    doc = new_doc()
    page = doc.new_page()
    page.insert_image(page.rect, pixmap=pixmap)
    lines(page, 72, 100, SCANNED, fontsize=16, render_mode=3)  # 3: invisible text
    return to_bytes(doc)


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


def chapters_pdf() -> bytes:
    """A report of three chapters on six pages: a cover with a small "Front cover" label
    above the title, a chapter title wrapped onto a second line (its own MuPDF block)
    with a margin label between, and running footers that name the current chapter and
    end with the page number, alternating with the book's title on even pages."""
    doc = new_doc()
    cover = doc.new_page()
    cover.insert_text((400, 40), "Front cover", fontsize=14, fontname="hebo")
    lines(cover, 72, 200, ["Storage Engines in Practice"], fontsize=30, fontname="hebo")
    chapters = [("Chapter 1. Getting started", 2), ("Chapter 2. Tuning the cache", 2)]
    number = 1
    for chapter, count in chapters:
        for first in [True] + [False] * (count - 1):
            page = doc.new_page()
            y = 100.0
            if first:
                title = chapter.split(". ", 1)[1]
                page.insert_text((72, y), f"{title} for", fontsize=24, fontname="hebo")
                page.insert_text((20, y + 14), chapter.split(". ")[0] + ".", fontsize=7)
                page.insert_text((72, y + 30), "engineers", fontsize=24, fontname="hebo")
                y += 70
            y = lines(page, 72, y, [f"Text of page {number} about {chapter[11:]}."])
            lines(page, 72, y, BODY)
            footer = f"{chapter} {number}" if number % 2 else f"{number} Storage Engines"
            page.insert_text((72 if number % 2 == 0 else 300, 810), footer, fontsize=9)
            number += 1
    doc.set_metadata({"title": "PowerPoint Presentation"})  # a producer's default
    return to_bytes(doc)


def large_body_pdf() -> bytes:
    """Body text set at 13 pt, larger than usual, outweighed by 8 pt small print (a long
    footnote apparatus), with real headings at 18 pt: a paragraph, and one-line entries
    that end without a full stop, each its own block."""
    doc = new_doc()
    paragraph = [
        "The model reads its inputs once and keeps a summary of each in memory,",
        "which the later stages consult instead of the raw data.",
    ]
    entries = [
        "Input shape: the batch size, the sequence length, the hidden size",
        "Output shape: the batch size and the number of classes it predicts",
        "Memory: one summary per input, about the size of one hidden state",
    ]
    small = "Note: measured on the reference machine with the default settings enabled."
    for n in range(1, 4):
        page = doc.new_page()
        y = lines(page, 72, 72, [f"Stage {n}"], fontsize=18, fontname="hebo")
        y = lines(page, 72, y + 8, paragraph, fontsize=13)
        for entry in entries:
            y = lines(page, 72, y + 14, [entry], fontsize=13)
        lines(page, 72, y + 20, [small] * 14, fontsize=8)
    return to_bytes(doc)


def merged_header_table_pdf() -> bytes:
    """A ruled table whose header cell "Scores" spans two columns, over "low" and "high",
    and whose "Model" cell spans the two header rows."""
    doc = new_doc()
    page = doc.new_page()
    x0, top, width, height = 72.0, 100.0, 100.0, 24.0
    xs = [x0 + i * width for i in range(4)]
    ys = [top + i * height for i in range(5)]
    page.draw_line((xs[0], ys[0]), (xs[3], ys[0]))
    page.draw_line((xs[1], ys[1]), (xs[3], ys[1]))  # under "Scores" only: "Model" spans down
    for y in ys[2:]:
        page.draw_line((xs[0], y), (xs[3], y))
    for i, x in enumerate(xs):
        start = ys[1] if i == 2 else ys[0]  # no line inside "Scores": it spans columns
        page.draw_line((x, start), (x, ys[4]))
    cells = [
        (0, 0, "Model"), (0, 1, "Scores"), (1, 1, "low"), (1, 2, "high"),
        (2, 0, "alpha"), (2, 1, "0.1"), (2, 2, "0.9"), (3, 0, "beta"), (3, 1, "0.2"), (3, 2, "0.8"),
    ]  # fmt: skip
    for r, c, text in cells:
        page.insert_text((xs[c] + 4, ys[r] + 16), text, fontsize=10)
    return to_bytes(doc)
