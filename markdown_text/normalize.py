"""The shared `NORMALIZE_MARKDOWN` pass (docs/sources.md#the-shared-markdown-pass) and positional
anchors.

Every normalizer's Markdown goes through `normalize_markdown`; the chunker runs it too
(it is idempotent), so offsets in chunk records always refer to the normalized text.
Anchors (page, sheet, slide starts) are carried through the pass so that a chunk can
say which pages it spans.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_INNER_WHITESPACE = re.compile(r"[ \t\f\v\u00a0]{2,}|[\t\f\v]")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)


# Kinds of anchor whose every start is a hard break of the source (a chunk's fields of
# the same names say where it lies).
HARD_BREAKS = ("slide", "sheet")


@dataclass(frozen=True)
class Anchor:
    """Marks where a page, sheet or slide starts: `offset` is a line start in the text.
    `hard`: a page that is a unit of its own (a diagram's), not one its text runs on
    from (a PDF's)."""

    offset: int
    kind: str  # "page" | "sheet" | "slide"
    value: int | str
    hard: bool = False

    @property
    def is_hard_break(self) -> bool:
        """Does the source break here, so that no chunk holds text of both sides?"""
        return self.hard or self.kind in HARD_BREAKS


@dataclass(frozen=True)
class NormalizedText:
    text: str
    anchors: tuple[Anchor, ...] = ()
    front_matter: dict[str, Any] | None = None


def split_front_matter(text: str) -> tuple[str, dict[str, Any] | None]:
    """Move a leading YAML front matter block out of the text
    (docs/sources.md#the-shared-markdown-pass)."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return text, None
    try:
        data = yaml.safe_load(match.group(1) or "")
    except yaml.YAMLError:
        return text, None  # not front matter after all: keep it as text
    if not isinstance(data, dict):
        return text, None
    return text[match.end() :], {str(k): v for k, v in data.items()}


def normalize_markdown(
    text: str, anchors: Sequence[Anchor] = (), *, front_matter: bool = False
) -> NormalizedText:
    """Line endings to `\\n`, inner whitespace collapsed outside code and tables,
    blank-line runs collapsed, optional front matter moved to metadata."""
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    meta = None
    if front_matter:
        stripped, meta = split_front_matter(text)
        if meta is not None:
            shift = len(text) - len(stripped)
            anchors = [replace(a, offset=max(0, a.offset - shift)) for a in anchors]
            text = stripped

    lines = text.split("\n")
    old_starts = _line_starts(lines)
    table_lines = _table_lines(lines)
    out: list[str] = []
    new_start_of_line: list[int] = []  # for every input line, the output offset it maps to
    length = 0
    fence: str | None = None
    previous_blank = True  # drops leading blank lines
    for i, line in enumerate(lines):
        new_start_of_line.append(length)
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and set(stripped) == {fence[0]}:
                fence = None
            out.append(line)
            length += len(line) + 1
            previous_blank = False
            continue
        opener = _FENCE_OPEN.match(line)
        if opener:
            fence = opener.group(1)
            kept = line.rstrip()
        elif not line.strip():
            if previous_blank:
                continue
            previous_blank = True
            out.append("")
            length += 1
            continue
        elif i in table_lines:
            kept = line.rstrip()
        else:
            kept = _collapse_inner_whitespace(line)
        previous_blank = False
        out.append(kept)
        length += len(kept) + 1
    while out and out[-1] == "":
        out.pop()
    result = "\n".join(out)
    if result:
        result += "\n"
    if result == text:
        result = text  # already normalized: keep one copy of a large text, not two
    limit = len(result)
    mapped = tuple(
        replace(a, offset=min(limit, new_start_of_line[_line_of(old_starts, a.offset)]))
        for a in anchors
    )
    return NormalizedText(result, mapped, meta)


def _collapse_inner_whitespace(line: str) -> str:
    body = line.lstrip(" \t")
    indent = line[: len(line) - len(body)]
    return indent + _INNER_WHITESPACE.sub(" ", body).rstrip()


def _line_starts(lines: list[str]) -> list[int]:
    starts, pos = [], 0
    for line in lines:
        starts.append(pos)
        pos += len(line) + 1
    return starts


def _line_of(starts: list[int], offset: int) -> int:
    return max(0, bisect.bisect_right(starts, offset) - 1)


def _table_lines(lines: list[str]) -> set[int]:
    """Indices of GFM table lines: a header row, its delimiter row, and the body rows
    up to the next blank line. Cheap: only lines holding '|' are looked at."""
    table: set[int] = set()
    for i, line in enumerate(lines):
        if "|" not in line or "-" not in line or i == 0 or i in table:
            continue
        if _TABLE_DELIMITER.match(line) and "|" in lines[i - 1]:
            table.add(i - 1)
            j = i
            while j < len(lines) and lines[j].strip() and "|" in lines[j]:
                table.add(j)
                j += 1
    return table
