"""Groups: runs of pieces that become one chunk each (packing, small blocks, table
grouping and small sections all build and combine them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from chunking.pieces import HEADING, UNMIXABLE_KINDS, Piece

ExactCounter = Callable[[list[Piece]], int]  # the exact count of pieces joined as a chunk


@dataclass
class Group:
    pieces: list[Piece] = field(default_factory=list)
    tokens: int = 0  # an upper bound while `exact` is false
    exact: bool = True

    @property
    def chunk_type(self) -> str:
        """Heading lines of merged sections do not count: a chunk of paragraphs and the
        headings between them is a paragraph chunk. Tables or code blocks that merged
        (small blocks, table groups) make a `mixed` chunk when one brought its bound
        prose along: the chunk holds prose (docs/chunking.md#packing)."""
        content = [p for p in self.pieces if p.kind != HEADING]
        kinds = {p.kind for p in content}
        if not kinds:
            return "paragraph"
        if len(kinds) > 1:
            return "mixed"
        kind = kinds.pop()
        if kind in UNMIXABLE_KINDS and len(content) > 1 and any(p.bound for p in content):
            return "mixed"
        return kind

    def large(self, min_tokens: int) -> bool:
        """A table or code chunk of at least `min_tokens`: it never mixes
        (docs/chunking.md#packing)."""
        return self.chunk_type in UNMIXABLE_KINDS and self.tokens >= min_tokens

    def add(self, piece: Piece) -> None:
        self.tokens += piece.tokens + (1 if self.pieces else 0)
        self.pieces.append(piece)
        self.exact = len(self.pieces) == 1

    def extend(self, other: Group, tokens: int) -> None:
        """Take `other`'s pieces; `tokens`: the exact count of the two joined."""
        self.pieces.extend(other.pieces)
        self.tokens = tokens
        self.exact = True
