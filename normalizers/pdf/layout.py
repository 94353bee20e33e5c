"""PDF layer 2, layout: document-wide statistics (running headers and footers, page
numbers, the font-size ranking of headings) and each page's reading order across
columns (recursive XY-cut)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from normalizers.boilerplate import Dropped
from normalizers.pdf.extraction import Item, Line, Page
from normalizers.selfcheck import words

_PAGE_NUMBER = re.compile(
    r"^\s*(?:page|p\.|seite|стр\.?|страница)?\s*[-–—]?\s*(?:\d{1,5}|[ivxlcdm]{1,7})"
    r"(?:\s*(?:/|of|из|von)\s*\d{1,5})?\s*[-–—]?\s*$",
    re.IGNORECASE,
)

# A page number (arabic or roman) at either end of a running line: "Chapter 2. Roles 11",
# "12 Annual report", "All rights reserved. iv".
_PAGE_LABEL = re.compile(
    r"^(?:\d{1,4}|[ivxlcdm]{1,6})\s+\S|\S\s+(?:\d{1,4}|[ivxlcdm]{1,6})$", re.IGNORECASE
)
_RUNNING_MAX_CHARS = 150
# Share of the page height at its top and bottom where running headers/footers live.
_MARGIN_BAND = 0.08
# A line is running if its text (digits masked) recurs at the same height on this share
# of the pages (and on at least two): books alternate even/odd running lines, so the
# share of either is about half the pages or less.
_RUNNING_SHARE = 0.3
_HEADING_MAX_CHARS = 200
# A font size holding more than this share of the characters, in lines longer than
# this on average, is body text.
_BODY_SHARE = 0.2
_BODY_LINE_CHARS = 50


@dataclass
class Styles:
    body_size: float
    size_levels: dict[float, int]  # rounded size -> heading level
    emphasis_level: int | None  # level of bold/italic body-size headings, if those count


# --- document-wide statistics ---------------------------------------------------------


def drop_running_lines(pages: list[Page]) -> Dropped:
    """Remove page numbers, lines that repeat at the same height on most pages, and
    running lines whose text changes from page to page (the chapter's name) but which
    carry the page number at one end: a page's outermost line, in the margin band, no
    larger than body text, at a height where other pages have such a line too. Returns
    how many lines went, and their words."""

    def in_margin(line: Line, page: Page) -> bool:
        band = page.height * _MARGIN_BAND
        return line.y1 <= band or line.y0 >= page.height - band

    def key(line: Line) -> tuple[str, int]:
        return re.sub(r"\d+", "#", line.text.lower()), round(line.y0 / 4)

    seen: Counter[tuple[str, int]] = Counter()
    for page in pages:
        seen.update({key(ln) for ln in page.lines if in_margin(ln, page)})
    threshold = max(2, math.ceil(_RUNNING_SHARE * len(pages)))
    running = {k for k, n in seen.items() if n >= threshold}
    numbered = _numbered_running_lines(pages, in_margin)
    parts = dropped_words = 0
    for page in pages:
        # A bare number is a page number in the margin band, or as the page's top- or
        # bottom-most line wherever the margins are (LaTeX sets it well above the band).
        edges = (
            {id(min(page.lines, key=lambda ln: ln.y0)), id(max(page.lines, key=lambda ln: ln.y1))}
            if page.lines
            else set()
        )
        kept: list[Line] = []
        for ln in page.lines:
            running_line = (
                (in_margin(ln, page) and key(ln) in running)
                or ((in_margin(ln, page) or id(ln) in edges) and _PAGE_NUMBER.match(ln.text))
                or id(ln) in numbered
            )
            if not running_line:
                kept.append(ln)
                continue
            parts += 1
            dropped_words += len(words(ln.text))
        page.lines = kept
    return Dropped(parts, dropped_words)


def _numbered_running_lines(
    pages: Sequence[Page], in_margin: Callable[[Line, Page], bool]
) -> set[int]:
    """Ids of the running lines with a page number (see `drop_running_lines`)."""
    body = _body_size(_size_weights(pages))
    by_height: dict[tuple[str, int], list[Line]] = {}
    for page in pages:
        if not page.lines:
            continue
        top = min(page.lines, key=lambda ln: ln.y0)
        bottom = max(page.lines, key=lambda ln: ln.y1)
        for edge, line in (("top", top), ("bottom", bottom)):
            if (
                in_margin(line, page)
                and line.size <= body
                and len(line.text) <= _RUNNING_MAX_CHARS
                and _PAGE_LABEL.search(line.text.strip())
            ):
                by_height.setdefault((edge, round(line.y0 / 4)), []).append(line)
    return {id(line) for lines in by_height.values() if len(lines) >= 2 for line in lines}


def _size_weights(pages: Sequence[Page]) -> Counter[float]:
    """Characters set in each font size."""
    weights: Counter[float] = Counter()
    for page in pages:
        for ln in page.lines:
            weights[ln.size] += len(ln.text)
    return weights


def _body_size(weights: Counter[float]) -> float:
    """The font size most of the text is set in."""
    return weights.most_common(1)[0][0] if weights else 0.0


def document_styles(pages: Sequence[Page]) -> Styles:
    weights = _size_weights(pages)
    emphasized_at_body = 0
    body = _body_size(weights)
    body_chars = weights.get(body, 0)
    for page in pages:
        emphasized_at_body += sum(
            len(ln.text) for ln in page.lines if ln.size == body and ln.emphasized
        )
    # A size that sets a good share of the text in long lines is a second body text (a
    # technical description whose larger body is outweighed by small print), never a
    # heading size: headings are short and rarer than the text they head.
    line_counts = Counter(ln.size for p in pages for ln in p.lines)
    total = sum(weights.values())
    bodies = {
        size
        for size, chars in weights.items()
        if chars > _BODY_SHARE * total and chars / line_counts[size] > _BODY_LINE_CHARS
    }
    # How many separate places (page, block) use each size for a heading-like line.
    uses = Counter(
        size
        for size, _, _ in {
            (ln.size, p.number, ln.block)
            for p in pages
            for ln in p.lines
            if _bigger(ln.size, body) and ln.size not in bodies and heading_text(ln.text)
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
    return Styles(body, levels, emphasis_level)


def _bigger(size: float, body: float) -> bool:
    return size >= body + 1.0


def heading_text(text: str) -> bool:
    return len(text) <= _HEADING_MAX_CHARS and any(c.isalpha() for c in text)


# --- reading order ------------------------------------------------------------------


def page_items(page: Page) -> list[Item]:
    blocks: dict[int, Item] = {}
    for ln in page.lines:
        item = blocks.get(ln.block)
        if item is None:
            blocks[ln.block] = Item(ln.x0, ln.y0, ln.x1, ln.y1, [ln])
        else:
            item.lines.append(ln)
            item.x0, item.y0 = min(item.x0, ln.x0), min(item.y0, ln.y0)
            item.x1, item.y1 = max(item.x1, ln.x1), max(item.y1, ln.y1)
    ordered = _reading_order([*blocks.values(), *page.tables, *page.pictures], page.rtl)
    return _merge_wrapped_blocks(ordered)


def _merge_wrapped_blocks(items: list[Item]) -> list[Item]:
    """MuPDF sometimes makes every line of a paragraph its own block: rejoin a block
    that starts right under the previous one (less than half a line of gap), in the
    same column and at the same font size."""
    merged: list[Item] = []
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


def _reading_order(items: list[Item], rtl: bool) -> list[Item]:
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
    groups: list[list[Item]] = []
    for strip in strips:
        if groups and _columnar(groups[-1] + strip):
            groups[-1] = groups[-1] + strip
        else:
            groups.append(strip)
    return [item for group in groups for item in _reading_order(group, rtl)]


def _columnar(items: list[Item]) -> bool:
    """Columns of text: a vertical gap splits the items into at least two parts that are
    each a quarter of the width or more. Narrow parts (labels of a key/value form,
    bullets) read across, with their row."""
    parts = _split(items, vertical=True)
    if len(parts) < 2:
        return False
    width = max(i.x1 for i in items) - min(i.x0 for i in items)
    wide = [p for p in parts if max(i.x1 for i in p) - min(i.x0 for i in p) >= 0.25 * width]
    return len(wide) >= 2


def _split(items: list[Item], *, vertical: bool) -> list[list[Item]]:
    def span(i: Item) -> tuple[float, float]:
        return (i.x0, i.x1) if vertical else (i.y0, i.y1)

    gap = 4.0 if vertical else 0.5
    ordered = sorted(items, key=lambda i: span(i)[0])
    groups: list[list[Item]] = [[ordered[0]]]
    end = span(ordered[0])[1]
    for item in ordered[1:]:
        start, stop = span(item)
        if start - end >= gap:
            groups.append([item])
        else:
            groups[-1].append(item)
        end = max(end, stop)
    return groups
