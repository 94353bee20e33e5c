"""The splitter protocol: one rule per block type turns a block into pieces
(docs/chunking.md#splitting).

Each rule lives in its own module (`prose`, `lists`, `table`, `code`, `display_math`)
and is registered in `chunking.registry` by the block type it handles.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from chunking.blocks import Block, BlockType
from chunking.pieces import Piece
from chunking.tokens import TokenCounter


@dataclass(frozen=True, slots=True)
class Budget:
    target: int  # pieces of a split block aim at this
    pack_max: int  # no piece of a split block passes this (docs/chunking.md#budgets)
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


def even_runs(
    costs: Sequence[int],
    limit: int,
    size: int,
    *,
    first: int = 0,
    later: int = 0,
    join: int = 1,
) -> list[tuple[int, int]]:
    """Cut a split block's units (lines, rows, sentences, each costing its tokens plus
    `join`) into contiguous runs `(start, stop)` of about `size` tokens, none over
    `limit`: as many runs as the size needs (or the limit forces), cut where the largest
    run is smallest, so the pieces come out even instead of full ones and a small
    remainder (a 320-token table is 160 + 160, not 250 + 70). `first` / `later`: what
    the first run / every later run carries besides its units (a header, room kept for
    a bound caption). A unit over the limit on its own is a run of its own."""

    def runs_within(cap: int) -> list[tuple[int, int]]:
        runs, start, used = [], 0, first
        for index, cost in enumerate(costs):
            if index > start and used + cost + join > cap:
                runs.append((start, index))
                start, used = index, later
            used += cost + join
        runs.append((start, len(costs)))
        return runs

    total = first + sum(costs) + join * len(costs)
    wanted = max(-(-total // size), len(runs_within(limit)))
    low, high = 0, limit  # the smallest cap that needs no more runs than wanted
    while low < high:
        middle = (low + high) // 2
        if len(runs_within(middle)) <= wanted:
            high = middle
        else:
            low = middle + 1
    return runs_within(high)


def whole(block: Block, kind: str, *, oversize: bool = False) -> Piece:
    """The block as one piece."""
    return Piece(
        kind, block.start, block.end, block.text, block.token_count, block.index, oversize=oversize
    )
