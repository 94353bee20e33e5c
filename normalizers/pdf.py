"""PDF -> Markdown with pymupdf: our own layout layer over MuPDF's character stream.

Why not pymupdf4llm (2.0): on the 11 PDFs of the Docling corpus (`bench/normalize.py`,
same run, same machine) it reached a word recall of 0.84 mean / 0.56 min against 0.96 /
0.87 here, at about 1.6 pages per CPU-second against 16: its default path runs an ONNX
layout model on every page, and it puts right-to-left lines and two-column and form
pages out of order. It also needs pymupdf_layout and onnxruntime; this layer needs
pymupdf alone.

Pipeline: extract every page's lines (characters with font size/weight, bidi-ordered)
and its ruled tables -> drop running headers/footers and page numbers (document-wide
statistics) -> infer heading levels from the document's font-size ranking -> order the
page's blocks across columns (recursive XY-cut) -> emit Markdown blocks, with a page
anchor at the first line of every page.
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pymupdf

from chunking.text import Anchor
from config.errors import ErrorCode
from normalizers.base import AnchoredMarkdown, NormalizeContext, NormalizedDocument, register
from normalizers.tables import gfm_table

# pymupdf's annotations are partial (untyped constructors and methods): its objects are
# handled as Any here rather than silencing strict mypy call by call.
_PYMUPDF: Any = pymupdf

# Ligatures expanded (no PRESERVE_LIGATURES), images not loaded: we only need text.
_TEXT_FLAGS = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP
_BOLD_FLAG = 16
_MONO_FLAG = 8
_MONO_FONT = re.compile(r"mono|courier|consol|menlo|code|typewriter", re.IGNORECASE)
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)
_ITALIC_FLAG = 2
_ITALIC_FONT = re.compile(r"italic|oblique", re.IGNORECASE)

# Bullet glyphs, including symbol-font glyphs that map to the Private Use Area or have
# no Unicode mapping at all (U+FFFD) in the PDF.
_BULLETS = "•●▪◦‣∙·○■□➢►▶✓✔❖➤\ue000-\uf8ff\ufffd"
_BULLET_ITEM = re.compile(rf"^\s*([{_BULLETS}]|[-–—*](?=\s))\s*(.*)$")
_NUMBERED_ITEM = re.compile(r"^\s*(\d{1,3})([.)])\s+(\S.*)$")
_LETTERED_ITEM = re.compile(r"^\s*(\(?[a-zA-Z]\)|[a-z]\.)\s+(\S.*)$")
# A bullet, item number or section number ("5.1") drawn apart from its text.
_MARKER_ONLY = re.compile(
    rf"^\s*([{_BULLETS}]|[-–—*]|\d{{1,3}}(?:\.\d{{1,3}})*[.)]?|\(?[a-zA-Z]\))\s*$"
)
_PAGE_NUMBER = re.compile(
    r"^\s*(?:page|p\.|seite|стр\.?|страница)?\s*[-–—]?\s*(?:\d{1,5}|[ivxlcdm]{1,7})"
    r"(?:\s*(?:/|of|из|von)\s*\d{1,5})?\s*[-–—]?\s*$",
    re.IGNORECASE,
)
_SENTENCE_END = (".", ":", ";", "!", "?")
# Dot leaders of a table of contents ("Preface . . . . . xi"): one ellipsis, not dozens
# of tokens of dots.
_LEADER = re.compile(r"\s*(?:\.\s?){5,}\s*")
_TOC_ENTRY = re.compile(r" … \S{1,8}$")

# Share of the page height at its top and bottom where running headers/footers live.
_MARGIN_BAND = 0.08
# A line is running if its text (digits masked) recurs at the same height on this share
# of the pages (and on at least two): books alternate even/odd running lines, so the
# share of either is about half the pages or less.
_RUNNING_SHARE = 0.3
_HEADING_MAX_CHARS = 200
_HEADING_MAX_LINES = 3


@dataclass
class _Line:
    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float
    emphasized: bool  # bold or italic throughout
    mono: bool
    block: int


@dataclass
class _Item:
    """A unit the reading-order pass places: one MuPDF text block or one table."""

    x0: float
    y0: float
    x1: float
    y1: float
    lines: list[_Line] = field(default_factory=list)
    table: str | None = None  # GFM Markdown of a table


@dataclass
class _Page:
    number: int  # 1-based
    height: float
    lines: list[_Line]
    tables: list[_Item]
    rtl: bool


@dataclass
class _Styles:
    body_size: float
    size_levels: dict[float, int]  # rounded size -> heading level
    emphasis_level: int | None  # level of bold/italic body-size headings, if those count


@register("pdf", extensions=(".pdf",), mimes=("application/pdf",))
def normalize_pdf(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    try:
        doc = _PYMUPDF.open(stream=data, filetype="pdf")
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
        pages = [_extract_page(page, textpage=None) for page in doc]
        ocr = ctx.limits.ocr and shutil.which("tesseract") is not None
        if ocr:
            pages = [p if p.lines or p.tables else _ocr_page(doc[p.number - 1], ctx) for p in pages]
        if not any(p.lines or p.tables for p in pages):
            raise ctx.fail(ErrorCode.NO_TEXT_LAYER, _no_text_message(doc.page_count, ctx, ocr))
        metadata = dict(doc.metadata or {})
        page_count = doc.page_count
    blank = [p.number for p in pages if not p.lines and not p.tables]
    if blank:
        warnings.append(f"no text on page(s) {_page_list(blank)}")
    _drop_running_lines(pages)
    styles = _document_styles(pages)
    markdown, anchors, first_heading = _render(pages, styles)
    title = (metadata.get("title") or "").strip() or first_heading
    return NormalizedDocument(
        markdown=markdown,
        title=title,
        author=(metadata.get("author") or "").strip() or None,
        created_at=_pdf_date(metadata.get("creationDate")),
        updated_at=_pdf_date(metadata.get("modDate")),
        page_count=page_count,
        metadata={
            k: v
            for k, v in (
                ("producer", metadata.get("producer")),
                ("creator", metadata.get("creator")),
                ("subject", metadata.get("subject")),
                ("keywords", metadata.get("keywords")),
            )
            if v
        },
        anchors=tuple(anchors),
        warnings=tuple(warnings),
    )


def _ocr_page(page: Any, ctx: NormalizeContext) -> _Page:
    """A page without a text layer, read by tesseract (limits.ocr on, tesseract found)."""
    try:
        textpage = page.get_textpage_ocr(flags=_TEXT_FLAGS, dpi=300, full=True)
    except Exception as exc:  # tesseract present but unusable (no language data, ...)
        raise ctx.fail(ErrorCode.NO_TEXT_LAYER, f"no text layer and OCR failed: {exc}") from None
    result = _extract_page(page, textpage=textpage)
    for line in result.lines:
        # OCR text is set in one invisible monospace font: it carries no style.
        line.mono = line.emphasized = False
    return result


def _no_text_message(page_count: int, ctx: NormalizeContext, ocr: bool) -> str:
    where = f"none of its {page_count} page(s) has a text layer (scanned?)"
    if ocr:
        return f"{where}, and OCR found no text either"
    if ctx.limits.ocr:
        return f"{where}; limits.ocr is on but tesseract is missing (apt-get install tesseract-ocr)"
    return f"{where}; set limits.ocr: true with tesseract installed to OCR it"


# --- extraction ---------------------------------------------------------------------


_Char = tuple[
    str, tuple[float, float, float, float], float, bool, bool
]  # c, bbox, size, bold or italic, mono


def _extract_page(page: Any, textpage: Any) -> _Page:
    raw = page.get_text("rawdict", flags=_TEXT_FLAGS, textpage=textpage)
    raw_lines = [
        (block_no, raw_line["bbox"], _chars(raw_line))
        for block_no, block in enumerate(raw["blocks"])
        for raw_line in block.get("lines", ())
    ]
    tables = [] if textpage is not None else _tables(page, raw_lines)
    by_block: dict[int, list[_Char_run]] = {}
    for block_no, bbox, chars in raw_lines:
        by_block.setdefault(block_no, []).append((bbox, chars))
    lines: list[_Line] = []
    for block_no, runs in by_block.items():
        for bbox, chars in _rows(runs):
            line = _line(chars, bbox, block_no)
            if line is not None and not any(_inside(line, t) for t in tables):
                lines.append(line)
    _attach_markers(lines)
    rtl_chars = sum(len(ln.text) for ln in lines if _is_rtl(ln.text))
    return _Page(
        number=page.number + 1,
        height=page.rect.height,
        lines=lines,
        tables=tables,
        rtl=rtl_chars * 2 > sum(len(ln.text) for ln in lines),
    )


_Bbox = tuple[float, float, float, float]
_Char_run = tuple[_Bbox, list[_Char]]  # one MuPDF line (or part of it) and its box


def _rows(runs: Sequence[_Char_run]) -> list[_Char_run]:
    """Runs on one baseline joined into one visual row, left to right, with a space
    where they are apart. MuPDF splits a line at wide gaps and at every direction
    change of right-to-left text, in drawing order: a date "1403/09/19" in a Persian
    form arrives as five runs, right to left."""
    ordered = sorted(runs, key=lambda r: (r[0][1] + r[0][3]) / 2)
    rows: list[list[_Char_run]] = []
    for run in ordered:
        box = run[0]
        if rows:
            last = rows[-1][0][0]
            centre, last_centre = (box[1] + box[3]) / 2, (last[1] + last[3]) / 2
            if abs(centre - last_centre) < 0.5 * min(box[3] - box[1], last[3] - last[1]):
                rows[-1].append(run)
                continue
        rows.append([run])
    joined: list[_Char_run] = []
    for row in rows:
        row.sort(key=lambda r: r[0][0])
        chars: list[_Char] = []
        previous: list[_Char] = []
        for (x0, y0, _, y1), run_chars in row:
            if chars and run_chars:
                end = max(c[1][2] for c in chars)
                # Touching left-to-right runs are one word ("1403" "/" "09"); runs of
                # right-to-left text list their words in logical order, so where two
                # meet is always a word boundary.
                if x0 - end > 0.15 * run_chars[0][2] or _has_rtl(previous) or _has_rtl(run_chars):
                    chars.append((" ", (end, y0, x0, y1), run_chars[0][2], False, False))
            chars.extend(run_chars)
            previous = run_chars
        box = (
            min(r[0][0] for r in row),
            min(r[0][1] for r in row),
            max(r[0][2] for r in row),
            max(r[0][3] for r in row),
        )
        joined.append((box, chars))
    return joined


def _has_rtl(chars: Sequence[_Char]) -> bool:
    return any(_strong_direction(c[0]) == "R" for c in chars)


def _chars(raw_line: dict[str, Any]) -> list[_Char]:
    chars: list[_Char] = []
    for span in raw_line["spans"]:
        flags = span["flags"]
        font = span["font"]
        emphasized = bool(flags & (_BOLD_FLAG | _ITALIC_FLAG)) or bool(
            _BOLD_FONT.search(font) or _ITALIC_FONT.search(font)
        )
        mono = bool(flags & _MONO_FLAG) or bool(_MONO_FONT.search(font))
        # Control characters are glyph-mapping debris (e.g. a symbol-font bullet's U+0084).
        chars.extend(
            (ch["c"], ch["bbox"], span["size"], emphasized, mono)
            for ch in span["chars"]
            if ch["c"].isspace() or unicodedata.category(ch["c"]) != "Cc"
        )
    return chars


def _chars_text(chars: Sequence[_Char]) -> str:
    """The characters of (part of) one line as text, right-to-left lines in logical order."""
    visible = "".join(c[0] for c in chars if not c[0].isspace())
    if not visible:
        return ""
    text = _logical_text(chars) if _is_rtl(visible) else _ltr_text(chars)
    return _LEADER.sub(" … ", text)


def _line(
    chars: Sequence[_Char], bbox: tuple[float, float, float, float], block_no: int
) -> _Line | None:
    text = _chars_text(chars)
    if not text:
        return None
    visible = [c for c in chars if not c[0].isspace()]
    sizes = Counter(round(c[2] * 2) / 2 for c in visible)
    x0, y0, x1, y1 = bbox
    return _Line(
        text=text,
        x0=x0,
        y0=y0,
        x1=x1,
        y1=y1,
        size=sizes.most_common(1)[0][0],
        emphasized=sum(c[3] for c in visible) >= 0.8 * len(visible),
        mono=all(c[4] for c in visible),
        block=block_no,
    )


def _ltr_text(chars: Sequence[_Char]) -> str:
    """Left-to-right text: stream order, which is the visual order, unless the PDF drew
    the words out of order (right-to-left documents set numbers and Latin that way);
    then the words go by position."""
    xs = [c[1][0] for c in chars if not c[0].isspace()]
    if all(b >= a - 1.0 for a, b in itertools.pairwise(xs)):
        return re.sub(r"\s+", " ", "".join(c[0] for c in chars)).strip()
    return " ".join(_word_text(w) for w in sorted(_words(chars), key=_centre))


def _strong_direction(ch: str) -> str | None:
    bidi = unicodedata.bidirectional(ch)
    if bidi in ("R", "AL"):
        return "R"
    if bidi == "L" or ch.isdigit():
        return "L"
    return None


def _is_rtl(text: str) -> bool:
    rtl = ltr = 0
    for ch in text:
        direction = _strong_direction(ch)
        if direction == "R":
            rtl += 1
        elif direction == "L":
            ltr += 1
    return rtl > ltr


_Glyph = tuple[str, tuple[float, float, float, float]]


def _words(chars: Sequence[_Char]) -> list[list[_Glyph]]:
    """Split at spaces and where the strong direction changes (a PDF may set "وPython"
    with no space between the scripts)."""
    words: list[list[_Glyph]] = []
    current: list[_Glyph] = []
    current_dir: str | None = None
    for ch, bbox, *_ in chars:
        if ch.isspace():
            if current:
                words.append(current)
            current, current_dir = [], None
            continue
        direction = _strong_direction(ch)
        if direction and current_dir and direction != current_dir:
            words.append(current)
            current = []
        if direction:
            current_dir = direction
        current.append((ch, bbox))
    if current:
        words.append(current)
    return words


def _centre(word: Sequence[_Glyph]) -> float:
    return sum(b[0] + b[2] for _, b in word) / (2 * len(word))


def _word_text(word: Sequence[_Glyph]) -> str:
    """A right-to-left word's characters go by their right edge, a ligature's extra
    characters (zero width, MuPDF lists them first) after the one they belong to; a
    left-to-right word's by their left edge."""
    if _is_rtl("".join(c for c, _ in word)):
        ordered = sorted(word, key=lambda c: (-c[1][2], c[1][2] - c[1][0] <= 0))
    else:
        ordered = sorted(word, key=lambda c: c[1][0])
    return "".join(c for c, _ in ordered)


def _logical_text(chars: Sequence[_Char]) -> str:
    """A right-to-left line in logical order, whatever order the PDF drew it in: words
    placed right to left, runs of left-to-right words (Latin, numbers, and the
    neutrals between them such as the slashes of a date) left to right inside that."""
    texts = [_word_text(w) for w in sorted(_words(chars), key=lambda w: -_centre(w))]
    strong = [
        "R" if _is_rtl(t) else "L" if any(_strong_direction(c) == "L" for c in t) else None
        for t in texts
    ]
    out: list[str] = []
    ltr_run: list[str] = []
    for i, text in enumerate(texts):
        direction = strong[i]
        if direction is None:  # a neutral takes the direction of its neighbours if shared
            before = next((d for d in reversed(strong[:i]) if d), "R")
            after = next((d for d in strong[i + 1 :] if d), "R")
            direction = "L" if before == after == "L" else "R"
        if direction == "L":
            ltr_run.append(text)
            continue
        out.extend(reversed(ltr_run))
        ltr_run = []
        out.append(text)
    out.extend(reversed(ltr_run))
    return " ".join(out)


def _attach_markers(lines: list[_Line]) -> None:
    """A bullet or number drawn apart from its text (often its own MuPDF block) joins
    the nearest line to its right on the same baseline, so lists stay lists, numbered
    headings keep their number and the markers do not read as a column of their own."""
    for marker in [ln for ln in lines if _MARKER_ONLY.match(ln.text)]:
        mid = (marker.y0 + marker.y1) / 2
        candidates = [
            ln
            for ln in lines
            if ln is not marker
            and ln.x0 >= marker.x1 - 1
            and ln.x0 - marker.x1 < 6 * max(marker.size, 1.0)
            and ln.y0 <= mid <= ln.y1
        ]
        if not candidates:
            continue
        target = min(candidates, key=lambda ln: ln.x0)
        target.text = f"{marker.text.strip()} {target.text}"
        target.x0 = marker.x0
        lines.remove(marker)


def _inside(line: _Line, item: _Item) -> bool:
    cx, cy = (line.x0 + line.x1) / 2, (line.y0 + line.y1) / 2
    return item.x0 <= cx <= item.x1 and item.y0 <= cy <= item.y1


def _tables(page: Any, raw_lines: Sequence[tuple[int, _Bbox, list[_Char]]]) -> list[_Item]:
    # The ruled-line finder alone (use_layout=False: the layout model costs ~0.4 s a
    # page); it finds nothing without vector drawings, so those pages skip it.
    if not page.get_cdrawings():
        return []
    found = page.find_tables(use_layout=False)
    items = []
    for table in found.tables:
        inside = [(box, chars) for _, box, chars in raw_lines if _overlaps(box, table.bbox)]
        # Cell text from our own character pass, so right-to-left cells read in logical
        # order like the rest of the page. Runs are narrowed to the row first: a dense
        # table has hundreds of cells and runs.
        rows = []
        for row in table.rows:
            in_row = [run for run in inside if _overlaps(run[0], row.bbox)]
            rows.append([_cell_text(cell, in_row) for cell in row.cells])
        if _is_rtl("".join(c[0] for _, chars in inside for c in chars)):
            rows = [row[::-1] for row in rows]  # a right-to-left table starts at the right
        markdown = _gfm_table(rows)
        if markdown is not None:
            x0, y0, x1, y1 = table.bbox
            items.append(_Item(x0, y0, x1, y1, table=markdown))
    return items


def _overlaps(a: _Bbox, b: _Bbox) -> bool:
    return a[2] >= b[0] and a[0] <= b[2] and a[3] >= b[1] and a[1] <= b[3]


def _cell_text(cell: _Bbox | None, runs: Sequence[_Char_run]) -> str:
    if cell is None:
        return ""
    x0, y0, x1, y1 = cell
    picked_runs: list[_Char_run] = []
    for box, chars in runs:
        if not _overlaps(box, cell):
            continue
        picked = [
            c
            for c in chars
            if x0 <= (c[1][0] + c[1][2]) / 2 <= x1 and y0 <= (c[1][1] + c[1][3]) / 2 <= y1
        ]
        if picked:
            picked_box = (
                min(c[1][0] for c in picked),
                min(c[1][1] for c in picked),
                max(c[1][2] for c in picked),
                max(c[1][3] for c in picked),
            )
            picked_runs.append((picked_box, picked))
    return " ".join(_chars_text(chars) for _, chars in _rows(picked_runs))


def _gfm_table(rows: list[list[str]]) -> str | None:
    """Empty rows and columns dropped; None where what is left is no table."""
    rows = [r for r in rows if any(r)]
    if not rows:
        return None
    width = max(len(r) for r in rows)
    keep = [j for j in range(width) if any(j < len(r) and r[j] for r in rows)]
    rows = [[r[j] if j < len(r) else "" for j in keep] for r in rows]
    # One row or one column is a ruled box around text, not a table.
    if len(rows) < 2 or len(keep) < 2:
        return None
    return gfm_table(rows[0], rows[1:])


# --- document-wide statistics ---------------------------------------------------------


def _drop_running_lines(pages: list[_Page]) -> None:
    """Remove page numbers and lines that repeat at the same height on most pages."""

    def in_margin(line: _Line, page: _Page) -> bool:
        band = page.height * _MARGIN_BAND
        return line.y1 <= band or line.y0 >= page.height - band

    def key(line: _Line) -> tuple[str, int]:
        return re.sub(r"\d+", "#", line.text.lower()), round(line.y0 / 4)

    seen: Counter[tuple[str, int]] = Counter()
    for page in pages:
        seen.update({key(ln) for ln in page.lines if in_margin(ln, page)})
    threshold = max(2, math.ceil(_RUNNING_SHARE * len(pages)))
    running = {k for k, n in seen.items() if n >= threshold}
    for page in pages:
        # A bare number is a page number in the margin band, or as the page's top- or
        # bottom-most line wherever the margins are (LaTeX sets it well above the band).
        edges = (
            {id(min(page.lines, key=lambda ln: ln.y0)), id(max(page.lines, key=lambda ln: ln.y1))}
            if page.lines
            else set()
        )
        page.lines = [
            ln
            for ln in page.lines
            if not (
                (in_margin(ln, page) and key(ln) in running)
                or ((in_margin(ln, page) or id(ln) in edges) and _PAGE_NUMBER.match(ln.text))
            )
        ]


def _document_styles(pages: Sequence[_Page]) -> _Styles:
    weights: Counter[float] = Counter()
    emphasized_at_body = 0
    for page in pages:
        for ln in page.lines:
            weights[ln.size] += len(ln.text)
    body = weights.most_common(1)[0][0] if weights else 0.0
    body_chars = weights.get(body, 0)
    for page in pages:
        emphasized_at_body += sum(
            len(ln.text) for ln in page.lines if ln.size == body and ln.emphasized
        )
    # How many separate places (page, block) use each size for a heading-like line.
    uses = Counter(
        size
        for size, _, _ in {
            (ln.size, p.number, ln.block)
            for p in pages
            for ln in p.lines
            if _bigger(ln.size, body) and _heading_text(ln.text)
        }
    )
    # Sizes ranked largest first. Where some sizes recur (section headings), display
    # sizes above them (covers, titles) share level 1 and a size used once between
    # two recurring ones shares the level above, so that one-off sizes do not push
    # every section heading down; with no recurring size, every size is its own rank.
    recurring = {size for size, n in uses.items() if n > 1}
    levels: dict[float, int] = {}
    level = 0
    for size in sorted(uses, reverse=True):
        if level == 0 or not recurring or size in recurring:
            level = min(level + 1, 3)
        if recurring and size > max(recurring):
            level = 1
        levels[size] = level
    # Bold/italic body-size lines are headings only where emphasis is rare enough to
    # mean one.
    emphasis_level = min(level + 1, 3) if emphasized_at_body < 0.3 * body_chars else None
    return _Styles(body, levels, emphasis_level)


def _bigger(size: float, body: float) -> bool:
    return size >= body + 1.0


def _heading_text(text: str) -> bool:
    return len(text) <= _HEADING_MAX_CHARS and any(c.isalpha() for c in text)


# --- reading order ------------------------------------------------------------------


def _page_items(page: _Page) -> list[_Item]:
    blocks: dict[int, _Item] = {}
    for ln in page.lines:
        item = blocks.get(ln.block)
        if item is None:
            blocks[ln.block] = _Item(ln.x0, ln.y0, ln.x1, ln.y1, [ln])
        else:
            item.lines.append(ln)
            item.x0, item.y0 = min(item.x0, ln.x0), min(item.y0, ln.y0)
            item.x1, item.y1 = max(item.x1, ln.x1), max(item.y1, ln.y1)
    ordered = _reading_order([*blocks.values(), *page.tables], page.rtl)
    return _merge_wrapped_blocks(ordered)


def _merge_wrapped_blocks(items: list[_Item]) -> list[_Item]:
    """MuPDF sometimes makes every line of a paragraph its own block: rejoin a block
    that starts right under the previous one (less than half a line of gap), in the
    same column and at the same font size."""
    merged: list[_Item] = []
    for item in items:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and prev.lines
            and item.lines
            and 0 <= item.y0 - prev.y1 < 0.5 * (prev.lines[-1].y1 - prev.lines[-1].y0)
            # Same column: the left edges align (or the right ones: right-to-left text)
            and min(abs(item.x0 - prev.x0), abs(item.x1 - prev.x1)) < 2 * prev.lines[-1].size
            and item.lines[0].size == prev.lines[-1].size
        ):
            prev.lines.extend(item.lines)
            prev.x1, prev.y1 = max(prev.x1, item.x1), item.y1
            continue
        merged.append(item)
    return merged


def _reading_order(items: list[_Item], rtl: bool) -> list[_Item]:
    """Recursive XY-cut: columns first (a vertical gap no item crosses), then
    horizontal strips. Strips that are themselves multi-column with a common gutter are
    regrouped so that paragraph gaps that happen to line up across columns do not
    interleave the columns."""
    if len(items) <= 1:
        return items
    columns = _split(items, vertical=True)
    if len(columns) > 1:
        if rtl:
            columns.reverse()
        return [item for column in columns for item in _reading_order(column, rtl)]
    strips = _split(items, vertical=False)
    if len(strips) == 1:
        return sorted(items, key=lambda i: (i.y0, -i.x1 if rtl else i.x0))
    groups: list[list[_Item]] = []
    for strip in strips:
        if groups and _columnar(groups[-1] + strip):
            groups[-1] = groups[-1] + strip
        else:
            groups.append(strip)
    return [item for group in groups for item in _reading_order(group, rtl)]


def _columnar(items: list[_Item]) -> bool:
    """Columns of text: a vertical gap splits the items into at least two parts that are
    each a quarter of the width or more. Narrow parts (labels of a key/value form,
    bullets) read across, with their row."""
    parts = _split(items, vertical=True)
    if len(parts) < 2:
        return False
    width = max(i.x1 for i in items) - min(i.x0 for i in items)
    wide = [p for p in parts if max(i.x1 for i in p) - min(i.x0 for i in p) >= 0.25 * width]
    return len(wide) >= 2


def _split(items: list[_Item], *, vertical: bool) -> list[list[_Item]]:
    def span(i: _Item) -> tuple[float, float]:
        return (i.x0, i.x1) if vertical else (i.y0, i.y1)

    gap = 4.0 if vertical else 0.5
    ordered = sorted(items, key=lambda i: span(i)[0])
    groups: list[list[_Item]] = [[ordered[0]]]
    end = span(ordered[0])[1]
    for item in ordered[1:]:
        start, stop = span(item)
        if start - end >= gap:
            groups.append([item])
        else:
            groups[-1].append(item)
        end = max(end, stop)
    return groups


# --- rendering ----------------------------------------------------------------------


def _render(pages: Sequence[_Page], styles: _Styles) -> tuple[str, tuple[Anchor, ...], str | None]:
    out = AnchoredMarkdown("page")
    first_heading: str | None = None
    for page in pages:
        blocks = _page_blocks(_page_items(page), styles)
        if first_heading is None:
            first_heading = next((b.lstrip("# ") for b in blocks if b.startswith("#")), None)
        text = "\n\n".join(blocks)
        out.add(page.number, text + "\n\n" if text else "")
    return out.markdown, out.anchors, first_heading


@dataclass
class _ListState:
    indents: list[tuple[float, int]] = field(default_factory=list)  # (marker x, content indent)


def _page_blocks(items: Iterable[_Item], styles: _Styles) -> list[str]:
    """Markdown blocks of one page in reading order; list items of one list and lines
    of one code block are gathered into a single block."""
    blocks: list[str] = []
    list_lines: list[str] = []
    code_lines: list[_Line] = []
    state = _ListState()

    def flush() -> None:
        nonlocal list_lines, code_lines
        if list_lines:
            blocks.append("\n".join(list_lines))
            list_lines = []
            state.indents.clear()
        if code_lines:
            blocks.append(_code_block(code_lines))
            code_lines = []

    for item in items:
        if item.table is not None:
            flush()
            blocks.append(item.table)
            continue
        for kind, lines in _units(item.lines, styles):
            if kind == "code":
                if list_lines:
                    flush()
                code_lines.extend(lines)
                continue
            if code_lines:
                flush()
            if kind == "item":
                list_lines.append(_list_line(lines, state))
                continue
            flush()
            text = _join_lines(lines)
            if kind == "paragraph":
                blocks.append(text)
            else:
                blocks.append("#" * int(kind[1:]) + " " + text)
    flush()
    return blocks


def _units(lines: Sequence[_Line], styles: _Styles) -> list[tuple[str, list[_Line]]]:
    """Split one block's lines into headings ("h1".."h3"), list items, code runs and
    paragraphs."""
    units: list[tuple[str, list[_Line]]] = []
    block_width = max(ln.x1 for ln in lines) - min(ln.x0 for ln in lines)
    for ln in lines:
        # An emphasized line inside a block is a run-in heading only if it does not fill
        # the line (a wrapped italic phrase does).
        alone = len(lines) == 1 or ln.x1 - ln.x0 < 0.7 * block_width
        level = _heading_level(ln, styles, alone)
        kind = f"h{level}" if level else "code" if ln.mono else "paragraph"
        if kind == "paragraph" and _starts_item(ln, units):
            units.append(("item", [ln]))
            continue
        if units:
            prev_kind, prev_lines = units[-1]
            continues = prev_kind == kind or (prev_kind == "item" and kind == "paragraph")
            # A table-of-contents entry ends at its page number.
            continues = continues and not _TOC_ENTRY.search(prev_lines[-1].text)
            if continues and not (
                kind.startswith("h")
                and (len(prev_lines) >= _HEADING_MAX_LINES or prev_lines[-1].size != ln.size)
            ):
                prev_lines.append(ln)
                continue
        units.append((kind, [ln]))
    return [
        ("paragraph", ls) if k.startswith("h") and len(ls) > _HEADING_MAX_LINES else (k, ls)
        for k, ls in units
    ]


def _heading_level(line: _Line, styles: _Styles, alone: bool) -> int | None:
    if line.mono or not _heading_text(line.text) or _item_marker(line.text):
        return None
    if line.size in styles.size_levels:
        return styles.size_levels[line.size]
    # A bold/italic body-size line is a heading when it stands alone and is no sentence.
    if (
        line.emphasized
        and alone
        and styles.emphasis_level
        and abs(line.size - styles.body_size) <= 0.5
        and not line.text.rstrip().endswith((".", ",", ";", ":"))
    ):
        return styles.emphasis_level
    return None


def _item_marker(text: str) -> re.Match[str] | None:
    return _BULLET_ITEM.match(text) or _NUMBERED_ITEM.match(text) or _LETTERED_ITEM.match(text)


def _starts_item(line: _Line, units: list[tuple[str, list[_Line]]]) -> bool:
    match = _item_marker(line.text)
    if match is None:
        return False
    if _BULLET_ITEM.match(line.text) and re.match(rf"[{_BULLETS}]", line.text.lstrip()):
        return True  # a bullet glyph is never running text
    # "-", "*" or "3." can also sit at the start of a wrapped line of running text.
    if not units:
        return True
    prev_kind, prev_lines = units[-1]
    return prev_kind == "item" or prev_lines[-1].text.rstrip().endswith(_SENTENCE_END)


def _list_line(lines: Sequence[_Line], state: _ListState) -> str:
    first = lines[0]
    text = _join_lines(lines)
    if (bullet := _BULLET_ITEM.match(text)) is not None:
        marker, body = "-", bullet.group(2)
    elif (number := _NUMBERED_ITEM.match(text)) is not None:
        marker, body = number.group(1) + number.group(2), number.group(3)
    else:
        lettered = _LETTERED_ITEM.match(text)
        assert lettered is not None
        marker, body = "-", f"{lettered.group(1)} {lettered.group(2)}"
    # Nesting by the marker's indent: deeper than the open item nests under it.
    tolerance = 3.0
    while state.indents and first.x0 < state.indents[-1][0] - tolerance:
        state.indents.pop()
    if state.indents and first.x0 > state.indents[-1][0] + tolerance:
        parent_indent = sum(width for _, width in state.indents)
        state.indents.append((first.x0, len(marker) + 1))
        indent = parent_indent
    else:
        if state.indents:
            state.indents.pop()
        indent = sum(width for _, width in state.indents)
        state.indents.append((first.x0, len(marker) + 1))
    return " " * indent + f"{marker} {body}"


def _join_lines(lines: Sequence[_Line]) -> str:
    """Lines of one paragraph as one line; a word hyphenated across lines is joined."""
    text = ""
    for ln in lines:
        piece = ln.text.strip()
        if not text:
            text = piece
        elif text.endswith("\u00ad"):
            text = text[:-1] + piece
        elif len(text) >= 2 and text[-1] == "-" and text[-2].isalpha():
            # "infor-" + "mation": a word broken at the margin; "well-" + "Known": a real
            # hyphen that happened to fall there.
            text = (text[:-1] if piece[:1].islower() else text) + piece
        else:
            text += " " + piece
    return text.replace("\u00ad", "")


def _code_block(lines: Sequence[_Line]) -> str:
    """A fenced block; indentation and the gaps MuPDF splits a code line at are
    rebuilt from x positions (a monospace character is about 0.6 em wide)."""
    left = min(ln.x0 for ln in lines)
    rows: list[list[_Line]] = []
    for ln in sorted(lines, key=lambda ln: (ln.y0, ln.x0)):
        if rows and abs(ln.y0 - rows[-1][0].y0) < 0.5 * (ln.y1 - ln.y0):
            rows[-1].append(ln)
        else:
            rows.append([ln])
    body = []
    for row in rows:
        text, end = "", left
        for ln in sorted(row, key=lambda ln: ln.x0):
            gap = round((ln.x0 - end) / max(0.6 * ln.size, 1.0))
            text += " " * max(gap, 1 if text else 0) + ln.text
            end = ln.x1
        body.append(text)
    fence = "````" if any("```" in line for line in body) else "```"
    return "\n".join([fence, *body, fence])


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


def _page_list(numbers: Sequence[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")
