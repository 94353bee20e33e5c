"""Pieces: what the splitters hand to the packer.

A piece is a whole block, or a part of one that was over budget. `text` is what the
piece contributes to a chunk's `md_text`; it differs from the document slice only where
Markdown must stay valid (a table piece repeats the header, a code or math piece re-opens
its fence or delimiters, a quote piece re-adds `> `): then `synthetic` is true.
Heading pieces carry a heading line into a chunk that merges small sections
(docs/chunking.md#sections).
"""

from __future__ import annotations

from dataclasses import dataclass

PROSE_KINDS = frozenset({"paragraph", "quote"})
UNMIXABLE_KINDS = frozenset({"table", "code"})
HEADING = "heading"


@dataclass(frozen=True, slots=True)
class Piece:
    kind: str  # paragraph | list | table | code | quote | heading
    start: int  # char range of the document this piece covers
    end: int
    text: str
    tokens: int  # exact count of `text`
    block_index: int
    oversize: bool = False
    synthetic: bool = False
    # Offsets where the piece may be divided further (top-level list items); prose pieces
    # are divided at sentence boundaries, found only when needed.
    cuts: tuple[int, ...] = ()
    bound: str | None = None  # before | after | both: bound context joined this block
    header: str | None = None  # the table header this piece does not repeat in full
    end_block: int = -1  # index of the last block the piece covers (-1: block_index)
    # A code piece's role (docs/chunking.md#bound-context): example (prose bound to its block),
    # output (only its output block bound), standalone.
    code_role: str | None = None

    @property
    def last_block(self) -> int:
        return self.end_block if self.end_block >= 0 else self.block_index
