"""PDF layer 3, rendering: each page's blocks, in reading order, as Markdown: headings
by the font-size ranking, lists nested by indent, code blocks, paragraphs with
hyphenated line breaks joined; a page anchor at the start of every page."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from markdown_text import Anchor
from normalizers.model import AnchoredMarkdown
from normalizers.pdf.extraction import BULLETS, Item, Line, Page
from normalizers.pdf.layout import Styles, heading_text, page_items

_BULLET_ITEM = re.compile(rf"^\s*([{BULLETS}]|[-–—*](?=\s))\s*(.*)$")
_NUMBERED_ITEM = re.compile(r"^\s*(\d{1,3})([.)])\s+(\S.*)$")
_LETTERED_ITEM = re.compile(r"^\s*(\(?[a-zA-Z]\)|[a-z]\.)\s+(\S.*)$")
_SENTENCE_END = (".", ":", ";", "!", "?")
_TOC_ENTRY = re.compile(r" … \S{1,8}$")
_HEADING_MAX_LINES = 3
_HEADING_MAX_WORDS = 24
# A line of this many words ending like a sentence is a sentence, whatever its size.
_SENTENCE_MIN_WORDS = 8
_SENTENCE_END_MARKS = (".", "!", "?", ";", ",")


# --- rendering ----------------------------------------------------------------------


def render(pages: Sequence[Page], styles: Styles) -> tuple[str, tuple[Anchor, ...], str | None]:
    """The document's Markdown, its page anchors and the title its headings give: the
    most important of the headings that open the document, before any other block (a
    cover's "Front cover" label is a lesser heading than its title; a title set smaller
    than the section headings still opens the document); without such headings, the
    first level-1 heading."""
    out = AnchoredMarkdown("page")
    opening: list[str] = []  # the headings before the first other block
    opened = False  # a block other than a heading came
    first_top: str | None = None  # the first level-1 heading
    for page in pages:
        blocks = _page_blocks(page_items(page), styles)
        for block in blocks:
            if first_top is None and block.startswith("# "):
                first_top = block[2:]
            opened = opened or not block.startswith("#")
            if not opened:
                opening.append(block)
        text = "\n\n".join([*blocks, *page.pictures])
        out.add(page.number, text + "\n\n" if text else "")
    if not opening:
        return out.markdown, out.anchors, first_top
    top = min(len(block) - len(block.lstrip("#")) for block in opening)
    title = next(block[top + 1 :] for block in opening if not block[top:].startswith("#"))
    return out.markdown, out.anchors, title


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
    # The last heading written (level, lines, index in `blocks`) and the one-line
    # paragraphs written after it: the next heading continues it when it is the same
    # heading wrapped into a block of its own, maybe with a margin label set between
    # its lines ("Chapter 1." beside a chapter title), which then follows the heading.
    heading: tuple[int, list[Line], int] | None = None
    labels: list[Line] = []

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
            if kind == "paragraph":
                blocks.append(_join_lines(lines))
                if len(lines) == 1:
                    labels.append(lines[0])
                else:
                    heading = None  # text, not a label: the heading is over
                continue
            level = int(kind[1:])
            if heading is not None and _continues_heading(heading, labels, blocks, level, lines):
                after = blocks[heading[2] + 1 :]
                del blocks[heading[2] :]
                lines = heading[1] + lines
                blocks.append("#" * level + " " + _join_lines(lines))
                blocks.extend(after)
                heading, labels = (level, lines, heading[2]), []
                continue
            blocks.append("#" * level + " " + _join_lines(lines))
            heading, labels = (level, lines, len(blocks) - 1), []
    flush()
    return blocks


def _continues_heading(
    heading: tuple[int, list[Line], int],
    labels: list[Line],
    blocks: list[str],
    level: int,
    lines: list[Line],
) -> bool:
    """Whether heading lines continue `heading`: same level and a similar size, starting
    right below it (a title wrapped onto a second line MuPDF made a block of its own),
    together no longer than a heading may be; what was written between them is no more
    than one-line labels set beside the heading (between its first and next line)."""
    previous_level, previous_lines, index = heading
    last, first = previous_lines[-1], lines[0]
    return (
        previous_level == level
        and index + len(labels) == len(blocks) - 1
        and all(last.y0 <= (label.y0 + label.y1) / 2 <= first.y1 for label in labels)
        and _similar_sizes(last.size, first.size)
        # Lines' boxes overlap a little at tight leading; a heading's next line does not
        # start a line's height below it.
        and -0.5 < (first.y0 - last.y1) / max(last.y1 - last.y0, 1.0) < 0.8
        and len(previous_lines) + len(lines) <= _HEADING_MAX_LINES
    )


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
                and (
                    len(prev_lines) >= _HEADING_MAX_LINES
                    or not _similar_sizes(prev_lines[-1].size, ln.size)
                )
            ):
                prev_lines.append(ln)
                continue
        units.append((kind, [ln]))
    return [
        ("paragraph", ls) if k.startswith("h") and not _heading_sized(ls) else (k, ls)
        for k, ls in units
    ]


def _similar_sizes(a: float, b: float) -> bool:
    """Sizes close enough for two lines of one heading (a title set a size smaller on
    its second line)."""
    return abs(a - b) <= 0.2 * max(a, b)


def _heading_sized(lines: Sequence[Line]) -> bool:
    """A heading is short: a few lines, a few words, and no sentence of many words."""
    if len(lines) > _HEADING_MAX_LINES:
        return False
    text = _join_lines(lines)
    words = len(text.split())
    return words <= _HEADING_MAX_WORDS and not (
        words >= _SENTENCE_MIN_WORDS and text.endswith(_SENTENCE_END_MARKS)
    )


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
