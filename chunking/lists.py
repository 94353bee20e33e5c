"""Lists. A list over `max_tokens` splits between top-level items, nested items staying
with their parent; an item over it splits between its own lines and nested items, a
line over it at sentences (docs/chunking.md#splitting). A code, table or math block inside an item
is never cut inside: it is kept whole, or split by its own rule as a whole block."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace

from chunking.blocks import Block, ListItem
from chunking.pieces import Piece
from chunking.prose import split_prose
from chunking.split import SplitContext, even_runs
from chunking.tokens import TokenCounter

KIND = "list"


class _LineCounts:
    """Counts of a list's text between line boundaries. With an additive counter the
    block's lines are counted once, when the blocks are (`Block.line_counts`), and any
    run of whole lines is a sum (a list over the limit was counted item by item, then
    line by line, then piece by piece: on API reference pages, lists of definitions,
    that tripled the tokenizing)."""

    def __init__(self, block: Block, document: str, counter: TokenCounter) -> None:
        self.document, self.counter = document, counter
        self.starts: list[int] = []
        self.sums = [0]
        if not counter.additive:
            return
        offset = block.start
        spans = []
        for line in block.text.split("\n"):
            spans.append((offset, offset + len(line)))
            offset += len(line) + 1
        self.starts = [a for a, _ in spans]
        counts = block.line_counts or counter.count_many([document[a:b] for a, b in spans])
        self.sums = [0, *itertools.accumulate(counts)]
        self.ends = [b for _, b in spans]

    def count(self, start: int, end: int) -> int:
        """The count of document[start:end]: summed where it holds whole lines."""
        first = bisect.bisect_left(self.starts, start)
        last = bisect.bisect_left(self.ends, end)
        if (
            first < len(self.starts)
            and self.starts[first] == start
            and last < len(self.ends)
            and self.ends[last] == end
            and last >= first
        ):
            return self.sums[last + 1] - self.sums[first]
        return self.counter.count(self.document[start:end])

    def count_many(self, spans: Sequence[tuple[int, int]]) -> list[int]:
        """Counts of several spans: one batch for a counter that cannot sum lines."""
        if not self.counter.additive:
            return self.counter.count_many([self.document[a:b] for a, b in spans])
        return [self.count(a, b) for a, b in spans]


@dataclass(frozen=True)
class _Span:
    """A run of the item that may pack with its neighbours: a line, a nested item or a
    nested block kept whole."""

    start: int
    end: int
    tokens: int


@dataclass(frozen=True)
class ListSplitter:
    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        if block.token_count <= ctx.budget.max:
            cuts = tuple(item.start for item in block.items[1:])
            return [_piece(block, block.start, block.end, block.token_count, ctx.document, cuts)]
        lines = _LineCounts(block, ctx.document, ctx.counter)
        pieces: list[Piece] = []
        for item in block.items:
            pieces.extend(self._split_item(block, item, ctx, lines))
        return pieces

    def _split_item(
        self, block: Block, item: ListItem, ctx: SplitContext, lines: _LineCounts
    ) -> list[Piece]:
        document, budget = ctx.document, ctx.budget
        count = lines.count(item.start, item.end)
        if count <= budget.max:
            return [_piece(block, item.start, item.end, count, document)]
        units = self._units(block, item, ctx, lines)
        # Spans pack into pieces within the packing limit; a piece a rule already cut
        # (a nested block split, a line cut at sentences) stands alone.
        pieces: list[Piece] = []
        run: list[_Span] = []

        def close_run() -> None:
            if not run:
                return
            costs = [unit.tokens for unit in run]
            for a, b in even_runs(costs, budget.pack_max, budget.target):
                pieces.append(_counted(block, run[a].start, run[b - 1].end, document, lines))
            run.clear()

        for unit in units:
            if isinstance(unit, Piece):
                close_run()
                pieces.append(unit)
            else:
                run.append(unit)
        close_run()
        return pieces

    def _units(
        self, block: Block, item: ListItem, ctx: SplitContext, lines: _LineCounts
    ) -> list[_Span | Piece]:
        """The item's own lines, nested blocks and nested items in document order."""
        document, budget = ctx.document, ctx.budget
        nested: list[ListItem | Block] = sorted(
            [*item.children, *item.atoms], key=lambda part: part.start
        )
        spans: list[tuple[int, int, ListItem | Block | None]] = []
        cursor = item.start
        for part in (*nested, None):
            stop = part.start if part is not None else item.end
            line_start = cursor
            for line in document[cursor:stop].split("\n"):  # the item's own lines
                if line.strip():
                    spans.append((line_start, line_start + len(line.rstrip()), None))
                line_start += len(line) + 1
            if part is not None:
                spans.append((part.start, part.end, part))
                cursor = max(cursor, part.end)
        counts = lines.count_many([(a, b) for a, b, _ in spans])
        units: list[_Span | Piece] = []
        for (a, b, part), n in zip(spans, counts, strict=True):
            if isinstance(part, Block):
                part.token_count = n
                splitter = ctx.splitters[part.type]
                units.extend(_as_list_piece(p) for p in splitter.split(part, ctx))
            elif n <= budget.max:
                units.append(_Span(a, b, n))
            elif part is not None:
                units.extend(self._split_item(block, part, ctx, lines))
            else:  # a line over budget alone: the only place a list piece cuts a line
                units.extend(
                    _as_list_piece(p) for p in split_prose(document[a:b], a, KIND, block.index, ctx)
                )
        # A nested block kept whole packs like a line.
        return [
            _Span(u.start, u.end, u.tokens) if isinstance(u, Piece) and _plain(u, document) else u
            for u in units
        ]

    def split_head(
        self, piece: Piece, document: str, budget: int, counter: TokenCounter
    ) -> tuple[Piece, Piece] | None:
        """Divide a whole list at the last top-level item boundary that keeps the head
        within `budget` tokens; None when even the first item does not fit."""
        for cut in reversed(piece.cuts):
            head = document[piece.start : cut].rstrip()
            tokens = counter.count(head)
            if tokens <= budget:
                tail_text = document[cut : piece.end]
                return (
                    Piece(
                        KIND, piece.start, piece.start + len(head), head, tokens, piece.block_index
                    ),
                    Piece(
                        KIND,
                        cut,
                        piece.end,
                        tail_text,
                        counter.count(tail_text),
                        piece.block_index,
                        cuts=tuple(c for c in piece.cuts if c > cut),
                    ),
                )
        return None


def _plain(piece: Piece, document: str) -> bool:
    """A piece that is its document slice, not over budget: it can pack like a line."""
    return (
        not piece.synthetic
        and not piece.oversize
        and piece.header is None
        and (document[piece.start : piece.end] == piece.text)
    )


def _as_list_piece(piece: Piece) -> Piece:
    return replace(piece, kind=KIND)


def _counted(block: Block, start: int, end: int, document: str, lines: _LineCounts) -> Piece:
    # Keep the indentation: a piece starts at a line start so no item line is cut.
    raw = document[start:end]
    text = raw.lstrip("\n").rstrip()
    start += len(raw) - len(raw.lstrip("\n"))
    return _piece(block, start, start + len(text), lines.count(start, start + len(text)), document)


def _piece(
    block: Block, start: int, end: int, tokens: int, document: str, cuts: tuple[int, ...] = ()
) -> Piece:
    return Piece(KIND, start, end, document[start:end], tokens, block.index, cuts=cuts)
