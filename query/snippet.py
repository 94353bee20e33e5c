"""A chunk's Markdown as one line of plain text for a terminal: `ingest search` shows the
words a reader scans, not pipes, hashes and link targets, cut around the words the query
asked for and with those words marked."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token

from chunking.record import ChunkPayload

_SPACES = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_ELLIPSIS = "…"
# Words too common to say where a passage answers (a query's "how do I ..."); a query of
# nothing else still marks them.
# fmt: off
_COMMON = frozenset([
    "a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from",
    "has", "have", "how", "i", "if", "in", "is", "it", "its", "my", "no", "not", "of", "on",
    "or", "so", "that", "the", "their", "there", "this", "to", "was", "what", "when",
    "where", "which", "who", "why", "will", "with", "you", "your",
])
# fmt: on


@dataclass(frozen=True)
class Marks:
    """How a matched word is set off: `open` and `close` around it, `visible` of their
    characters taking room on the line (a terminal's bold takes none)."""

    open: str = "**"
    close: str = "**"
    visible: int = 4


BOLD = Marks("\x1b[1m", "\x1b[22m", 0)


def location(payload: Mapping[str, Any]) -> str:
    """Where in its document a chunk is (its page, sheet or slide, else its part), to tell
    apart hits whose headings are the same."""
    chunk = ChunkPayload.of(payload)
    if chunk.page_start is not None:
        return f"page {chunk.page_start}"
    if chunk.sheet is not None:
        return f"sheet {chunk.sheet}"
    if chunk.slide is not None:
        return f"slide {chunk.slide}"
    return f"part {chunk.ordinal + 1}"


def plain_text(markdown: str) -> str:
    """The words of `markdown` on one line: emphasis, code marks, heading marks and link
    targets dropped, table cells and blocks separated by ` · `."""
    parser = MarkdownIt("commonmark").enable("table")
    pieces: list[str] = []
    for token in parser.parse(markdown):
        if token.type == "inline":
            pieces.append(_inline_text(token.children or []))
        elif token.type in ("fence", "code_block"):
            pieces.append(token.content)
    return " · ".join(_SPACES.sub(" ", piece).strip() for piece in pieces if piece.strip())


def _inline_text(children: list[Token]) -> str:
    words = []
    for child in children:
        if child.type in ("text", "code_inline"):
            words.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            words.append(" ")
        elif child.type == "image":
            words.append(child.content)  # the alt text
    return "".join(words)


def query_terms(query: str) -> tuple[str, ...]:
    """The words of `query` worth finding in a passage, lower-cased: the common ones left
    out unless there is nothing else."""
    words = list(dict.fromkeys(word.lower() for word in _WORD.findall(query)))
    telling = [word for word in words if word not in _COMMON]
    return tuple(telling or words)


def snippet(markdown: str, width: int, terms: Sequence[str] = (), marks: Marks = Marks()) -> str:
    """`plain_text(markdown)` in at most `width` characters: where it is longer, the part
    holding most of `terms` (a word starting with a term matches: "restart" finds
    "restarting"), cut at words, an ellipsis at each cut end; the matched words set off
    by `marks`."""
    text = plain_text(markdown)
    found = _matches(text, terms)
    room = width
    while True:
        start, end = _window(text, found, room)
        shown = [(a - start, b - start) for a, b in found if start <= a and b <= end]
        line = (
            (_ELLIPSIS if start else "") + text[start:end] + (_ELLIPSIS if end < len(text) else "")
        )
        if len(line) + len(shown) * marks.visible <= width or room <= 1:
            return _marked(line, shown, marks, 1 if start else 0)
        room -= len(line) + len(shown) * marks.visible - width


def _matches(text: str, terms: Sequence[str]) -> list[tuple[int, int]]:
    """The spans of the words in `text` that start with one of `terms`, in order."""
    if not terms:
        return []
    starts = "|".join(re.escape(term) for term in sorted(terms, key=len, reverse=True))
    pattern = re.compile(rf"\b(?:{starts})\w*", re.IGNORECASE)
    return [match.span() for match in pattern.finditer(text)]


def _window(text: str, found: list[tuple[int, int]], room: int) -> tuple[int, int]:
    """The start and end in `text` of what fits in `room` characters with its ellipses:
    the beginning where no term matched or the first matches fit there; else around the
    run of matches with the most distinct words, a little context before it."""
    if len(text) <= room:
        return 0, len(text)
    inner = max(room - 2, 1)  # an ellipsis at each end
    best, anchor, anchor_end = -1, 0, 0
    for i, (first, last) in enumerate(found):
        words = {text[a:b].lower() for a, b in found[i:] if b <= first + inner}
        if len(words) > best:
            best, anchor, anchor_end = len(words), first, last
    if not found or anchor_end < room - 1:
        return 0, _cut_back(text, 0, room - 1)
    start = _cut_forward(text, max(anchor - inner // 4, 0), anchor)
    end = _cut_back(text, start, inner)
    return start, end


def _cut_back(text: str, start: int, room: int) -> int:
    """Where a line of at most `room` characters from `start` ends, at a word."""
    end = min(start + room, len(text))
    if end == len(text):
        return end
    space = text.rfind(" ", start + room // 2, end + 1)
    end = space if space > start else end
    while end > start and text[end - 1] in " ·":
        end -= 1
    return end


def _cut_forward(text: str, start: int, limit: int) -> int:
    """`start` moved on to the next word's beginning (not past `limit`)."""
    if start == 0 or text[start - 1] == " ":
        return start
    space = text.find(" ", start, limit)
    return space + 1 if space != -1 else start


def _marked(line: str, spans: list[tuple[int, int]], marks: Marks, offset: int) -> str:
    pieces, at = [], 0
    for a, b in spans:
        a, b = a + offset, b + offset
        pieces += [line[at:a], marks.open, line[a:b], marks.close]
        at = b
    return "".join([*pieces, line[at:]])
