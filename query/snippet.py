"""A chunk's Markdown as one line of plain text for a terminal: `ingest search` shows the
words a reader scans, not pipes, hashes and link targets."""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

_SPACES = re.compile(r"\s+")
_ELLIPSIS = "…"


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


def snippet(markdown: str, width: int) -> str:
    """`plain_text(markdown)` cut at a word to at most `width` characters, an ellipsis
    saying where."""
    text = plain_text(markdown)
    if len(text) <= width:
        return text
    cut = text[: max(width - 1, 1)]
    if " " in cut[width // 2 :]:
        cut = cut[: cut.rindex(" ")]
    return cut.rstrip(" ·") + _ELLIPSIS
