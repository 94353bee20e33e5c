"""PDF layer 1, extraction: every page's text lines (characters with font size and
weight, right-to-left lines in logical order, bullets joined to their text) and its ruled
tables, from MuPDF's character stream."""

from __future__ import annotations

import itertools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pymupdf

from normalizers.tables import gfm_table

# pymupdf's annotations are partial (untyped constructors and methods): its objects are
# handled as Any here rather than silencing strict mypy call by call.
PYMUPDF: Any = pymupdf

# Ligatures expanded (no PRESERVE_LIGATURES), images not loaded: we only need text.
TEXT_FLAGS = pymupdf.TEXT_PRESERVE_WHITESPACE | pymupdf.TEXT_MEDIABOX_CLIP
_BOLD_FLAG = 16
_MONO_FLAG = 8
_MONO_FONT = re.compile(r"mono|courier|consol|menlo|code|typewriter", re.IGNORECASE)
_BOLD_FONT = re.compile(r"bold|black|heavy|semibold|demi", re.IGNORECASE)
_ITALIC_FLAG = 2
_ITALIC_FONT = re.compile(r"italic|oblique", re.IGNORECASE)

# Bullet glyphs, including symbol-font glyphs that map to the Private Use Area or have
# no Unicode mapping at all (U+FFFD) in the PDF.
BULLETS = "•●▪◦‣∙·○■□➢►▶✓✔❖➤\ue000-\uf8ff\ufffd"
# A bullet, item number or section number ("5.1") drawn apart from its text.
_MARKER_ONLY = re.compile(
    rf"^\s*([{BULLETS}]|[-–—*]|\d{{1,3}}(?:\.\d{{1,3}})*[.)]?|\(?[a-zA-Z]\))\s*$"
)
# Dot leaders of a table of contents ("Preface . . . . . xi"): one ellipsis, not dozens
# of tokens of dots.
_LEADER = re.compile(r"\s*(?:\.\s?){5,}\s*")


@dataclass
class Line:
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
class Item:
    """A unit the reading-order pass places: one MuPDF text block or one table."""

    x0: float
    y0: float
    x1: float
    y1: float
    lines: list[Line] = field(default_factory=list)
    table: str | None = None  # a block placed whole: a table's GFM Markdown, a picture's quote


@dataclass
class Page:
    number: int  # 1-based
    height: float
    lines: list[Line]
    tables: list[Item]
    rtl: bool
    # The page's pictures as read: Markdown quotes where the pictures stand.
    pictures: list[Item] = field(default_factory=list)


# --- extraction ---------------------------------------------------------------------


Char = tuple[
    str, tuple[float, float, float, float], float, bool, bool
]  # c, bbox, size, bold or italic, mono


def extract_page(page: Any, textpage: Any) -> Page:
    raw = page.get_text("rawdict", flags=TEXT_FLAGS, textpage=textpage)
    raw_lines = [
        (block_no, raw_line["bbox"], _chars(raw_line))
        for block_no, block in enumerate(raw["blocks"])
        for raw_line in block.get("lines", ())
    ]
    tables = [] if textpage is not None else _tables(page, raw_lines)
    by_block: dict[int, list[_Char_run]] = {}
    for block_no, bbox, chars in raw_lines:
        by_block.setdefault(block_no, []).append((bbox, chars))
    lines: list[Line] = []
    for block_no, runs in by_block.items():
        for bbox, chars in _rows(runs):
            line = _line(chars, bbox, block_no)
            if line is not None and not any(_inside(line, t) for t in tables):
                lines.append(line)
    _attach_markers(lines)
    rtl_chars = sum(len(ln.text) for ln in lines if _is_rtl(ln.text))
    return Page(
        number=page.number + 1,
        height=page.rect.height,
        lines=lines,
        tables=tables,
        rtl=rtl_chars * 2 > sum(len(ln.text) for ln in lines),
    )


_Bbox = tuple[float, float, float, float]
_Char_run = tuple[_Bbox, list[Char]]  # one MuPDF line (or part of it) and its box


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
        chars: list[Char] = []
        previous: list[Char] = []
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
        joined.append((_bounds(r[0] for r in row), chars))
    return joined


def _bounds(boxes: Iterable[_Bbox]) -> _Bbox:
    """The box around `boxes` (at least one)."""
    x0s, y0s, x1s, y1s = zip(*boxes, strict=True)
    return min(x0s), min(y0s), max(x1s), max(y1s)


def _has_rtl(chars: Sequence[Char]) -> bool:
    return any(_strong_direction(c[0]) == "R" for c in chars)


def _chars(raw_line: dict[str, Any]) -> list[Char]:
    chars: list[Char] = []
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


def _chars_text(chars: Sequence[Char]) -> str:
    """The characters of (part of) one line as text, right-to-left lines in logical order."""
    visible = "".join(c[0] for c in chars if not c[0].isspace())
    if not visible:
        return ""
    text = logical_text(chars) if _is_rtl(visible) else _ltr_text(chars)
    return _LEADER.sub(" … ", text)


def _line(
    chars: Sequence[Char], bbox: tuple[float, float, float, float], block_no: int
) -> Line | None:
    text = _chars_text(chars)
    if not text:
        return None
    visible = [c for c in chars if not c[0].isspace()]
    sizes = Counter(round(c[2] * 2) / 2 for c in visible)
    x0, y0, x1, y1 = bbox
    return Line(
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


def _ltr_text(chars: Sequence[Char]) -> str:
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


def _words(chars: Sequence[Char]) -> list[list[_Glyph]]:
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


def logical_text(chars: Sequence[Char]) -> str:
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


def _attach_markers(lines: list[Line]) -> None:
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


def _inside(line: Line, item: Item) -> bool:
    cx, cy = (line.x0 + line.x1) / 2, (line.y0 + line.y1) / 2
    return item.x0 <= cx <= item.x1 and item.y0 <= cy <= item.y1


def _tables(page: Any, raw_lines: Sequence[tuple[int, _Bbox, list[Char]]]) -> list[Item]:
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
        _fill_spans(rows, [row.cells for row in table.rows], [row.bbox for row in table.rows])
        if _is_rtl("".join(c[0] for _, chars in inside for c in chars)):
            rows = [row[::-1] for row in rows]  # a right-to-left table starts at the right
        markdown = _gfm_table(rows)
        if markdown is not None:
            x0, y0, x1, y1 = table.bbox
            items.append(Item(x0, y0, x1, y1, table=markdown))
    return items


def _fill_spans(
    texts: list[list[str]], cells: Sequence[Sequence[_Bbox | None]], rows: Sequence[_Bbox]
) -> None:
    """Repeat a merged cell's text in every slot it covers (docs/sources.md#nothing-is-lost: merged
    cells filled): the finder lists a covered slot as None, and the cell to its left or above whose
    box reaches over the slot's centre is the one covering it."""
    width = max((len(row) for row in cells), default=0)
    centres: list[float | None] = []
    for c in range(width):
        xs = [(box[0] + box[2]) / 2 for row in cells if c < len(row) and (box := row[c])]
        centres.append(sum(xs) / len(xs) if xs else None)
    for r, row in enumerate(cells):
        middle = (rows[r][1] + rows[r][3]) / 2
        for c, cell in enumerate(row):
            x = centres[c]
            if cell is not None or x is None:
                continue
            left = _nearest([(r, cc, row[cc]) for cc in range(c - 1, -1, -1)])
            above = _nearest(
                [(rr, c, cells[rr][c]) for rr in range(r - 1, -1, -1) if c < len(cells[rr])]
            )
            if left is not None and left[2][0] <= x <= left[2][2]:
                texts[r][c] = texts[left[0]][left[1]]
            elif above is not None and above[2][1] <= middle <= above[2][3]:
                texts[r][c] = texts[above[0]][above[1]]


def _nearest(
    slots: Sequence[tuple[int, int, _Bbox | None]],
) -> tuple[int, int, _Bbox] | None:
    """The first slot holding a cell: (row, column, box)."""
    return next(((r, c, box) for r, c, box in slots if box is not None), None)


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
            picked_runs.append((_bounds(c[1] for c in picked), picked))
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
