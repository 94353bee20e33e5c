"""Pieces: what the splitters hand to the packer.

A piece is a whole block, or a part of one that was over budget. `text` is what the
piece contributes to a chunk's `md_text`; it differs from the document slice only where
Markdown must stay valid (a table piece repeats the header, a code piece re-opens its
fence, a quote piece re-adds `> `): then `synthetic` is true.
"""

from __future__ import annotations

from dataclasses import dataclass

PROSE_KINDS = frozenset({"paragraph", "quote"})
UNMIXABLE_KINDS = frozenset({"table", "code"})


@dataclass(frozen=True, slots=True)
class Piece:
    kind: str  # paragraph | list | table | code | quote
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
