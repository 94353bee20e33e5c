"""The splitter protocol: one rule per block type turns a block into pieces (SPEC §3.5).

Each rule lives in its own module (`prose`, `lists`, `table`, `code`, `display_math`)
and is registered in `chunking.registry` by the block type it handles.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from chunking.blocks import Block, BlockType
from chunking.pieces import Piece
from chunking.tokens import TokenCounter


@dataclass(frozen=True, slots=True)
class Budget:
    target: int  # pieces of a split block aim at this
    pack_max: int  # no piece of a split block passes this (seed 002's soft max)
    max: int  # a block up to this stays whole
    oversize: int  # a code block up to this stays whole; a table row up to this is one piece


@dataclass(frozen=True, slots=True)
class SplitContext:
    document: str  # the normalized text all offsets refer to
    counter: TokenCounter
    budget: Budget
    splitters: Mapping[BlockType, Splitter]  # for blocks nested in a list item
    # Tokens to keep free in the first / last piece for a bound caption or output.
    head_room: int = 0
    tail_room: int = 0


class Splitter(Protocol):
    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        """Pieces covering the block's char range end to end, in order."""
        ...


def whole(block: Block, kind: str, *, oversize: bool = False) -> Piece:
    """The block as one piece."""
    return Piece(
        kind, block.start, block.end, block.text, block.token_count, block.index, oversize=oversize
    )
