"""Typed blocks: the flat stream the parser produces and every later stage reads."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class BlockType(StrEnum):
    HEADING = "heading"
    PARAGRAPH = "paragraph"
    LIST = "list"
    TABLE = "table"
    CODE = "code"
    QUOTE = "quote"
    HTML = "html"
    MATH = "math"
    RULE = "rule"


@dataclass(frozen=True, slots=True)
class ListItem:
    """One list item's char range; `children` are the items of its nested lists, `atoms`
    the code, table, math and HTML blocks directly inside it (never cut inside)."""

    start: int
    end: int
    children: tuple[ListItem, ...] = ()
    atoms: tuple[Block, ...] = ()


@dataclass(slots=True)
class Block:
    index: int
    type: BlockType
    start: int  # char offsets in the normalized document, end exclusive, no trailing newline
    end: int
    text: str  # raw Markdown of the block (document[start:end])
    token_count: int = 0
    level: int = 0  # heading level 1-6
    heading_text: str = ""
    items: tuple[ListItem, ...] = ()  # top-level items of a list
    fence: str = ""  # opening fence marker of a fenced code block ("```", "~~~~"); "" if indented
    info: str = ""  # info string of a fenced code block
    # A list's line counts, where the counter is additive (token_count is their sum): a
    # list over the limit splits between lines without counting them again.
    line_counts: tuple[int, ...] = ()

    @property
    def is_boundary(self) -> bool:
        return self.type in (BlockType.HEADING, BlockType.RULE)
