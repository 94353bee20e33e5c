"""Tables. A table over `max_tokens` splits between rows into even pieces of about
`target_tokens`, within the packing limit (docs/chunking.md#table-headers):

- the header and delimiter rows head every piece when they cost at most a quarter of a
  piece; a wider header is repeated shortened (each cell cut to its first word) when
  that fits the quarter; otherwise only the first piece holds it and every other piece
  records it in `table_header`. So repeated headers never double a document's tokens;
- a single row over the limit is an oversize piece up to `oversize_block_limit`; above
  that it is cut between cells into rows of consecutive cells (a cell over the limit
  between words), each recording the header.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from chunking.blocks import Block
from chunking.pieces import Piece
from chunking.sentences import window_spans
from chunking.split import SplitContext, even_runs, whole

CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
HEADER_SHARE = 4  # a repeated header costs at most 1/4 of a piece


@dataclass(frozen=True)
class _Header:
    full: str  # header and delimiter rows as written
    tokens: int
    repeat: str  # what heads every piece after the first ("" when none)
    repeat_tokens: int

    @property
    def recorded(self) -> str | None:
        """`table_header` of the pieces after the first: set unless they repeat it in full."""
        return None if self.repeat == self.full else self.full


@dataclass(frozen=True)
class TableSplitter:
    kind: str = "table"

    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        budget, counter = ctx.budget, ctx.counter
        if block.token_count <= budget.max:
            return [whole(block, self.kind)]
        lines = block.text.split("\n")
        if len(lines) < 3:
            return [whole(block, self.kind, oversize=True)]
        header = _header(lines[0], lines[1], ctx)
        rows: list[tuple[int, int]] = []  # offsets within block.text
        offset = len(lines[0]) + len(lines[1]) + 2
        for line in lines[2:]:
            rows.append((offset, offset + len(line)))
            offset += len(line) + 1
        counts = counter.count_many([block.text[a:b] for a, b in rows])
        limit = budget.pack_max

        pieces: list[Piece] = []
        run: list[int] = []  # rows (indices) since the last piece, none over the limit

        def head_cost() -> int:
            return header.tokens + ctx.head_room if not pieces else header.repeat_tokens

        def close_run() -> None:
            if not run:
                return
            costs = [counts[i] for i in run]
            for start, stop in even_runs(
                costs, limit, budget.target, first=head_cost(), later=header.repeat_tokens
            ):
                a, b = rows[run[start]][0], rows[run[stop - 1]][1]
                pieces.append(self._piece(block, header, a, b, ctx, not pieces))
            run.clear()

        for index, ((a, b), n) in enumerate(zip(rows, counts, strict=True)):
            if head_cost() + n + 1 > limit:
                close_run()
                pieces.extend(self._long_row(block, header, a, b, n, ctx, first=not pieces))
                continue
            run.append(index)
        close_run()
        last = pieces[-1]
        if last.end != block.end:  # trailing characters stay covered
            pieces[-1] = Piece(
                last.kind,
                last.start,
                block.end,
                last.text,
                last.tokens,
                last.block_index,
                last.oversize,
                last.synthetic,
                header=last.header,
            )
        return pieces

    def _piece(
        self, block: Block, header: _Header, a: int, b: int, ctx: SplitContext, first: bool
    ) -> Piece:
        """Rows a..b (offsets in the block) under the header this piece carries."""
        if first:
            text = block.text[:b]
            return Piece(
                self.kind, block.start, block.start + b, text, ctx.counter.count(text), block.index
            )
        body = block.text[a:b]
        text = header.repeat + "\n" + body if header.repeat else body
        return Piece(
            self.kind,
            block.start + a,
            block.start + b,
            text,
            ctx.counter.count(text),
            block.index,
            synthetic=bool(header.repeat),
            header=header.recorded,
        )

    def _long_row(
        self,
        block: Block,
        header: _Header,
        a: int,
        b: int,
        tokens: int,
        ctx: SplitContext,
        *,
        first: bool,
    ) -> list[Piece]:
        counter, budget = ctx.counter, ctx.budget
        if first:
            with_header = header.tokens + tokens + 1
            if with_header + ctx.head_room <= budget.oversize:
                text = block.text[:b]
                return [
                    Piece(
                        self.kind,
                        block.start,
                        block.start + b,
                        text,
                        counter.count(text),
                        block.index,
                        oversize=True,
                    )
                ]
            # The header alone opens the table (cut by cells itself when even it is
            # over the oversize limit); the row follows on its own.
            delimiter_end = a - 1
            if header.tokens > budget.oversize:
                header_end = block.text.index("\n")
                return [
                    *self._cells(block, header, 0, header_end, ctx),
                    *self._cells(block, header, header_end + 1, delimiter_end, ctx),
                    *self._bare_row(block, header, a, b, tokens, ctx),
                ]
            head = block.text[:delimiter_end].rstrip()
            opening = Piece(
                self.kind,
                block.start,
                block.start + len(head),
                head,
                header.tokens,
                block.index,
                oversize=header.tokens > budget.max,
            )
            return [opening, *self._bare_row(block, header, a, b, tokens, ctx)]
        if header.repeat_tokens + tokens + 1 <= budget.oversize:
            piece = self._piece(block, header, a, b, ctx, first=False)
            return [
                Piece(
                    piece.kind,
                    piece.start,
                    piece.end,
                    piece.text,
                    piece.tokens,
                    piece.block_index,
                    oversize=piece.tokens > budget.max,
                    synthetic=piece.synthetic,
                    header=piece.header,
                )
            ]
        return self._bare_row(block, header, a, b, tokens, ctx)

    def _bare_row(
        self, block: Block, header: _Header, a: int, b: int, tokens: int, ctx: SplitContext
    ) -> list[Piece]:
        """A row with no room for a header beside it: a piece of its own recording the
        header, up to `oversize_block_limit`; above that cut by cells."""
        if tokens > ctx.budget.oversize:
            return self._cells(block, header, a, b, ctx)
        row = block.text[a:b]
        return [
            Piece(
                self.kind,
                block.start + a,
                block.start + b,
                row,
                tokens,
                block.index,
                oversize=tokens > ctx.budget.max,
                header=header.full,
            )
        ]

    def _cells(
        self, block: Block, header: _Header, a: int, b: int, ctx: SplitContext
    ) -> list[Piece]:
        """Cut one row into rows of consecutive cells within the packing limit; a cell
        over the limit is cut between words. Every fragment records the header."""
        counter = ctx.counter
        limit = ctx.budget.pack_max - 4
        row = block.text[a:b]
        separators = [m.start() for m in CELL_SEPARATOR.finditer(row)]
        if len(separators) < 2:
            separators = [0, len(row)]
        cells = list(itertools.pairwise(separators))
        counts = counter.count_many([row[x:y] for x, y in cells])
        spans: list[tuple[int, int, str]] = []  # (start, end) in the row, piece text
        group_start, group_end, used = -1, -1, 0

        def close_group() -> None:
            nonlocal group_start, used
            if group_start >= 0:
                spans.append((group_start, group_end, row[group_start:group_end] + "|"))
            group_start, used = -1, 0

        for (x, y), n in zip(cells, counts, strict=True):
            if n > limit:
                close_group()
                cell = row[x + 1 : y]
                for u, v in window_spans(cell, limit, counter):
                    if cell[u:v].strip():
                        spans.append((x + 1 + u, x + 1 + v, "| " + cell[u:v].strip() + " |"))
                continue
            if group_start >= 0 and used + n > limit:
                close_group()
            if group_start < 0:
                group_start = x
            group_end = y
            used += n
        close_group()
        texts = [t for _, _, t in spans]
        pieces = []
        start = a  # the ranges partition the row: each piece starts where the last ended
        for index, ((_, y, _), text, n) in enumerate(
            zip(spans, texts, counter.count_many(texts), strict=True)
        ):
            end = b if index == len(spans) - 1 else a + y
            pieces.append(
                Piece(
                    self.kind,
                    block.start + start,
                    block.start + end,
                    text,
                    n,
                    block.index,
                    synthetic=True,
                    header=header.full,
                )
            )
            start = end
        return pieces


def _header(row: str, delimiter: str, ctx: SplitContext) -> _Header:
    full = row + "\n" + delimiter
    counter = ctx.counter
    tokens = counter.count(full)
    share = ctx.budget.pack_max // HEADER_SHARE
    if tokens <= share:
        return _Header(full, tokens, full, tokens)
    short = _shortened(row, delimiter)
    short_tokens = counter.count(short)
    if short_tokens <= share:
        return _Header(full, tokens, short, short_tokens)
    return _Header(full, tokens, "", 0)


def _shortened(row: str, delimiter: str) -> str:
    """The header row with every cell cut to its first word, and a minimal delimiter."""
    indent = row[: len(row) - len(row.lstrip())]
    cells = _cells_of(row)
    aligns = _cells_of(delimiter)
    words = [cell.split()[0] if cell.split() else "" for cell in cells]
    marks = []
    for index in range(len(cells)):
        align = aligns[index].strip() if index < len(aligns) else "-"
        left, right = align.startswith(":"), align.endswith(":")
        marks.append((":" if left else "") + "-" + (":" if right else ""))
    return f"{indent}| {' | '.join(words)} |\n{indent}|{'|'.join(marks)}|"


def _cells_of(row: str) -> list[str]:
    body = row.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    return CELL_SEPARATOR.split(body)
