"""PDF layer 3, rendering: each page's blocks, in reading order, as Markdown: headings
by the font-size ranking, lists nested by indent, code blocks, paragraphs with
hyphenated line breaks joined; a page anchor at the start of every page."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from chunking.text import Anchor
from normalizers.base import AnchoredMarkdown
from normalizers.pdf.extraction import BULLETS, Item, Line, Page
from normalizers.pdf.layout import Styles, heading_text, page_items

_BULLET_ITEM = re.compile(rf"^\s*([{BULLETS}]|[-–—*](?=\s))\s*(.*)$")
_NUMBERED_ITEM = re.compile(r"^\s*(\d{1,3})([.)])\s+(\S.*)$")
_LETTERED_ITEM = re.compile(r"^\s*(\(?[a-zA-Z]\)|[a-z]\.)\s+(\S.*)$")
_SENTENCE_END = (".", ":", ";", "!", "?")
_TOC_ENTRY = re.compile(r" … \S{1,8}$")
_HEADING_MAX_LINES = 3


# --- rendering ----------------------------------------------------------------------


def render(pages: Sequence[Page], styles: Styles) -> tuple[str, tuple[Anchor, ...], str | None]:
    out = AnchoredMarkdown("page")
    first_heading: str | None = None
    for page in pages:
        blocks = _page_blocks(page_items(page), styles)
        if first_heading is None:
            first_heading = next((b.lstrip("# ") for b in blocks if b.startswith("#")), None)
        text = "\n\n".join(blocks)
        out.add(page.number, text + "\n\n" if text else "")
    return out.markdown, out.anchors, first_heading


@dataclass
class _ListState:
    indents: list[tuple[float, int]] = field(default_factory=list)  # (marker x, content indent)


def _page_blocks(items: Iterable[Item], styles: Styles) -> list[str]:
    """Markdown blocks of one page in reading order; list items of one list and lines
    of one code block are gathered into a single block."""
    blocks: list[str] = []
    list_lines: list[str] = []
    code_lines: list[Line] = []
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


def _units(lines: Sequence[Line], styles: Styles) -> list[tuple[str, list[Line]]]:
    """Split one block's lines into headings ("h1".."h3"), list items, code runs and
    paragraphs."""
    units: list[tuple[str, list[Line]]] = []
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


def _heading_level(line: Line, styles: Styles, alone: bool) -> int | None:
    if line.mono or not heading_text(line.text) or _item_marker(line.text):
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


def _starts_item(line: Line, units: list[tuple[str, list[Line]]]) -> bool:
    match = _item_marker(line.text)
    if match is None:
        return False
    if _BULLET_ITEM.match(line.text) and re.match(rf"[{BULLETS}]", line.text.lstrip()):
        return True  # a bullet glyph is never running text
    # "-", "*" or "3." can also sit at the start of a wrapped line of running text.
    if not units:
        return True
    prev_kind, prev_lines = units[-1]
    return prev_kind == "item" or prev_lines[-1].text.rstrip().endswith(_SENTENCE_END)


def _list_line(lines: Sequence[Line], state: _ListState) -> str:
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


def _join_lines(lines: Sequence[Line]) -> str:
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


def _code_block(lines: Sequence[Line]) -> str:
    """A fenced block; indentation and the gaps MuPDF splits a code line at are
    rebuilt from x positions (a monospace character is about 0.6 em wide)."""
    left = min(ln.x0 for ln in lines)
    rows: list[list[Line]] = []
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
