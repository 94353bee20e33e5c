"""Markdown writing shared by the format modules: GFM pipe tables and plain text lines.

A GFM table needs a header row and a delimiter row, the same cell count in every row,
no raw `|` inside a cell and no line break inside a cell. `gfm_table` guarantees all
of that for any rows it is given, so format modules only decide *what* goes in a cell.
Text from a document that lands at the start of a Markdown line (`one_line` +
`escape_block_start`) must not turn into a heading, list or quote by accident.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# A table inside a table cell, flattened into the cell's one line: "a; b / c; d".
NESTED_CELL_SEPARATOR = "; "
NESTED_ROW_SEPARATOR = " / "
_LINE_BREAKS = re.compile(r"\s*(?:\r\n|[\r\n\v\f\u2028\u2029])\s*")
# Text that Markdown would read as a heading, quote, list item or table row.
_BLOCK_START = re.compile(r"^(#{1,6}(?=\s|$)|>|[-+*](?=\s)|\d{1,9}(?=[.)](?:\s|$))|\|)")


def one_line(text: str) -> str:
    """Text on one line with single spaces (line breaks, tabs and runs of spaces too)."""
    return " ".join(text.split())


def escape_block_start(text: str) -> str:
    """Backslash-escape what would otherwise open a Markdown block: `# of units`,
    `1. Finalize`, `- note`, `> quote`, `| cell`."""
    match = _BLOCK_START.match(text)
    if match is None:
        return text
    token = match.group(0)
    if token[0].isdigit():
        return token + "\\" + text[len(token) :]
    return "\\" + text


def gfm_cell(text: str) -> str:
    """One cell's text made safe for a pipe table: line breaks become a space, `|` and
    a backslash before it are escaped, surrounding whitespace dropped."""
    if text.isprintable() and "|" not in text:  # the common case, without a regex pass
        return text.strip()
    flat = _LINE_BREAKS.sub(" ", text).strip()
    return flat.replace("\\|", "\\\\|").replace("|", "\\|")


def format_number(value: float) -> str:
    """A number as a person would write it: integral floats without `.0`, others with
    at most 15 significant digits (what Excel keeps), so binary float noise such as
    0.30000000000000004 never reaches the text."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".15g")


def gfm_table(header: Sequence[str], rows: Sequence[Sequence[str]] = ()) -> str:
    """A GFM table (no trailing newline). Every row is padded to, or cut at, the widest
    row (the header included), so the delimiter row always matches each row."""
    width = max([len(header), *(len(row) for row in rows)], default=0)
    if width == 0:
        return ""

    def line(cells: Sequence[str]) -> str:
        padded = [gfm_cell(c) for c in cells] + [""] * (width - len(cells))
        return "| " + " | ".join(padded) + " |"

    out = [line(header), "|" + " --- |" * width]
    out.extend(line(row) for row in rows)
    return "\n".join(out)


def flat_table(rows: Sequence[Sequence[str]]) -> str:
    """A table as one line for a cell of another table: non-empty cells joined by
    `NESTED_CELL_SEPARATOR`, rows by `NESTED_ROW_SEPARATOR`."""
    lines = (NESTED_CELL_SEPARATOR.join(cell for cell in row if cell) for row in rows)
    return NESTED_ROW_SEPARATOR.join(line for line in lines if line)


def comment_line(kind: str, author: str, created: str | None, text: str) -> str:
    """One review comment as a line: "Comment by Ann on 2024-05-01: text" (empty when
    the comment has no text); the date is the day of an ISO 8601 timestamp."""
    text = one_line(text)
    if not text:
        return ""
    by = f" by {one_line(author)}" if author.strip() else ""
    day = (created or "")[:10]
    on = f" on {day}" if re.fullmatch(r"\d{4}-\d{2}-\d{2}", day) else ""
    return escape_block_start(f"{kind}{by}{on}: {text}")
