"""PDF -> Markdown with pymupdf: our own layout layer over MuPDF's character stream.

Why not pymupdf4llm (2.0): on the 11 PDFs of the Docling corpus (`bench/normalize.py`,
same run, same machine) it reached a word recall of 0.84 mean / 0.56 min against 0.96 /
0.87 here, at about 1.6 pages per CPU-second against 16: its default path runs an ONNX
layout model on every page, and it puts right-to-left lines and two-column and form
pages out of order. It also needs pymupdf_layout and onnxruntime; this layer needs
pymupdf alone.

Pipeline: extract every page's lines (characters with font size/weight, bidi-ordered)
and its ruled tables -> drop running headers/footers and page numbers (document-wide
statistics; how many lines went is in the metadata) -> infer heading levels from the
document's font-size ranking -> order the page's blocks across columns (recursive
XY-cut) -> emit Markdown blocks, with a page anchor at the first line of every page.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from config.errors import ErrorCode
from normalizers.boilerplate import report_dropped
from normalizers.model import NormalizeContext, NormalizedDocument, PictureText
from normalizers.pdf.extraction import PYMUPDF, TEXT_FLAGS, Item, Page, extract_page
from normalizers.pdf.layout import document_styles, drop_running_lines
from normalizers.pdf.rendering import render


def normalize_pdf(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    try:
        doc = PYMUPDF.open(stream=data, filetype="pdf")
    except Exception as exc:  # MuPDF raises its own error types for unreadable files
        raise ctx.fail(ErrorCode.CORRUPT, f"not a readable PDF ({exc})") from None
    with doc:
        if doc.needs_pass and not doc.authenticate(""):
            raise ctx.fail(ErrorCode.ENCRYPTED, "the PDF is password-protected")
        if doc.is_repaired and b"%%EOF" not in data[-2048:]:
            # MuPDF rebuilds a cut-off file from what is left: pages and text go missing
            # silently, so a truncated file is refused rather than half-indexed.
            raise ctx.fail(ErrorCode.CORRUPT, "the PDF is truncated (no end-of-file marker)")
        if doc.page_count == 0:
            raise ctx.fail(ErrorCode.CORRUPT, "the PDF has no pages (truncated or damaged)")
        if doc.page_count > ctx.limits.max_pdf_pages:
            raise ctx.fail(
                ErrorCode.TOO_LARGE,
                f"{doc.page_count:,} pages, over limits.max_pdf_pages "
                f"({ctx.limits.max_pdf_pages:,})",
            )
        warnings = ["the PDF is damaged; MuPDF repaired it"] if doc.is_repaired else []
        pages = [extract_page(page, textpage=None) for page in doc]
        # pages with a text layer: their pictures are read; the others are scans, OCR'd whole
        layered = [p for p in pages if p.lines or p.tables]
        languages = ctx.pictures.languages if ctx.pictures is not None else None
        if languages is not None:
            pages = [
                p if p.lines or p.tables else _ocr_page(doc[p.number - 1], ctx, languages)
                for p in pages
            ]
        if not any(p.lines or p.tables for p in pages):
            raise ctx.fail(
                ErrorCode.NO_TEXT_LAYER, _no_text_message(doc.page_count, languages is not None)
            )
        if ctx.pictures is not None:
            for page in layered:
                page.pictures = _page_pictures(doc, page, ctx.pictures)
        metadata = dict(doc.metadata or {})
        page_count = doc.page_count
    blank = [p.number for p in pages if not (p.lines or p.tables or p.pictures)]
    if blank:
        warnings.append(f"no text on page(s) {_page_list(blank)}")
    dropped = drop_running_lines(pages)
    styles = document_styles(pages)
    markdown, anchors, first_heading = render(pages, styles)
    title = _metadata_title(metadata.get("title")) or first_heading
    described: dict[str, Any] = {
        k: v
        for k, v in (
            ("producer", metadata.get("producer")),
            ("creator", metadata.get("creator")),
            ("subject", metadata.get("subject")),
            ("keywords", metadata.get("keywords")),
        )
        if v
    }
    report_dropped(described, dropped)
    return NormalizedDocument(
        markdown=markdown,
        title=title,
        author=(metadata.get("author") or "").strip() or None,
        created_at=_pdf_date(metadata.get("creationDate")),
        updated_at=_pdf_date(metadata.get("modDate")),
        page_count=page_count,
        metadata=described,
        anchors=tuple(anchors),
        warnings=tuple(warnings),
    )


def _ocr_page(page: Any, ctx: NormalizeContext, languages: str) -> Page:
    """A page without a text layer, read by tesseract in `languages` (pictures.ocr on,
    tesseract found)."""
    try:
        textpage = page.get_textpage_ocr(flags=TEXT_FLAGS, dpi=300, full=True, language=languages)
    except Exception as exc:  # tesseract present but unusable (no language data, ...)
        raise ctx.fail(ErrorCode.NO_TEXT_LAYER, f"no text layer and OCR failed: {exc}") from None
    result = extract_page(page, textpage=textpage)
    for line in result.lines:
        # OCR text is set in one invisible monospace font: it carries no style.
        line.mono = line.emphasized = False
    return result


def _no_text_message(page_count: int, ocr: bool) -> str:
    where = f"none of its {page_count} page(s) has a text layer (scanned?)"
    if ocr:
        return f"{where}, and OCR found no text either"
    return (
        f"{where}; to OCR it set pictures.ocr: true with tesseract installed "
        "(apt-get install tesseract-ocr)"
    )


# Image streams tesseract's reader takes as they are (by pymupdf's `ext`); others (JPEG
# 2000, JBIG2, raw samples) are drawn as PNG by MuPDF.
_AS_STORED = frozenset({"png", "jpeg", "jpg", "bmp", "tiff", "tif", "gif", "webp"})
# A picture under this much text of the text layer is the scan behind it: already read.
_COVERED_CHARS = 20


def _page_pictures(doc: Any, page: Page, pictures: PictureText) -> list[Item]:
    """The pictures a page with a text layer shows, read, each where it stands; one per
    image where it is drawn several times."""
    read: list[Item] = []
    seen: set[int] = set()
    drawn = doc[page.number - 1]
    if not drawn.get_images():  # the page's resources name no image: no drawing pass
        return read
    for number, info in enumerate(drawn.get_image_info(xrefs=True), start=1):
        xref = info.get("xref", 0)
        if xref <= 0 or xref in seen:
            continue  # inline images carry no xref: MuPDF's drawing pieces, rarely text
        seen.add(xref)
        if _covered_chars(page, info["bbox"]) >= _COVERED_CHARS:
            continue
        try:
            data = _image_bytes(doc, xref)
        except Exception:  # MuPDF cannot draw it: the reader counts it unreadable
            data = b""
        text = pictures.text(data, f"page {page.number}, picture {number}")
        if text:
            x0, y0, x1, y1 = info["bbox"]
            read.append(Item(x0, y0, x1, y1, table=text))
    return read


def _covered_chars(page: Page, bbox: Sequence[float]) -> int:
    """Characters of the page's text layer whose line's middle lies on `bbox`."""
    x0, y0, x1, y1 = bbox
    return sum(
        len(line.text)
        for line in page.lines
        if x0 <= (line.x0 + line.x1) / 2 <= x1 and y0 <= (line.y0 + line.y1) / 2 <= y1
    )


def _image_bytes(doc: Any, xref: int) -> bytes:
    """The image as stored where tesseract's reader takes it, else as PNG (with its soft
    mask as transparency, which the reader lays on white)."""
    extracted = doc.extract_image(xref)
    smask = extracted.get("smask", 0) if extracted else 0
    if extracted and extracted.get("ext") in _AS_STORED and not smask:
        return bytes(extracted["image"])
    pixmap = PYMUPDF.Pixmap(doc, xref)
    if pixmap.n - pixmap.alpha >= 4:  # CMYK: PNG holds RGB
        pixmap = PYMUPDF.Pixmap(PYMUPDF.csRGB, pixmap)
    if smask and not pixmap.alpha:
        pixmap = PYMUPDF.Pixmap(pixmap, PYMUPDF.Pixmap(doc, smask))
    return bytes(pixmap.tobytes("png"))


# --- metadata -----------------------------------------------------------------------

_PDF_DATE = re.compile(
    r"^D?:?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*(?:([+\-Z])(\d{2})?'?(\d{2})?'?)?"
)


def _pdf_date(value: str | None) -> str | None:
    """`D:YYYYMMDDHHmmSS+HH'mm'` (any tail optional) as ISO 8601."""
    match = _PDF_DATE.match((value or "").strip())
    if not match:
        return None
    year, month, day, hour, minute, second, sign, tz_hours, tz_minutes = match.groups()
    tz: timezone | None = None
    if sign == "Z":
        tz = UTC
    elif sign in ("+", "-"):
        delta = timedelta(hours=int(tz_hours or 0), minutes=int(tz_minutes or 0))
        tz = timezone(delta if sign == "+" else -delta)
    try:
        stamp = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            tzinfo=tz,
        )
    except ValueError:
        return None
    return stamp.isoformat()


# Titles that producers write by default: they name the program, not the document.
_DEFAULT_TITLE = re.compile(
    r"^(?:untitled(?:\s*\d*)?|(?:powerpoint )?presentation\s*\d*|document\s*\d*|slide \d+"
    r"|microsoft (?:word|powerpoint|excel) - .*)$",
    re.IGNORECASE,
)


def _metadata_title(value: str | None) -> str | None:
    title = " ".join((value or "").split())
    return title if title and not _DEFAULT_TITLE.match(title) else None


def _page_list(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")
