"""TableSplitter: a table over budget splits between rows into pieces of about
`target_tokens`, never over `max_tokens`, each repeating the header and delimiter rows.
A single row over the limit is an oversize piece up to `oversize_block_limit`; above
that its cells are cut into rows of their own (SPEC §3.5)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from chunking.blocks import Block
from chunking.pieces import Piece
from chunking.sentences import window_spans
from chunking.tokens import TokenCounter

_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class TableSplitter:
    counter: TokenCounter
    target_tokens: int
    max_tokens: int
    oversize_block_limit: int

    def split(self, block: Block) -> list[Piece]:
        if block.token_count <= self.max_tokens:
            return [
                Piece("table", block.start, block.end, block.text, block.token_count, block.index)
            ]
        lines = block.text.split("\n")
        if len(lines) < 3:
            return [self._whole_oversize(block)]
        header = lines[0] + "\n" + lines[1]
        header_tokens = self.counter.count(header)
        rows: list[tuple[int, int]] = []  # offsets within block.text
        offset = len(lines[0]) + len(lines[1]) + 2
        for line in lines[2:]:
            rows.append((offset, offset + len(line)))
            offset += len(line) + 1
        counts = self.counter.count_many([block.text[a:b] for a, b in rows])

        pieces: list[Piece] = []
        run: list[tuple[int, int]] = []
        used = header_tokens

        def close_run() -> None:
            nonlocal run, used
            if run:
                pieces.append(self._piece(block, header, run, first=not pieces))
            run, used = [], header_tokens

        for (a, b), n in zip(rows, counts, strict=True):
            if header_tokens + n + 1 > self.max_tokens:
                close_run()
                pieces.extend(
                    self._oversize_row(block, header, header_tokens, a, b, first=not pieces)
                )
                continue
            if run and (used + n + 1 > self.max_tokens or used >= self.target_tokens):
                close_run()
            run.append((a, b))
            used += n + 1
        close_run()
        pieces[-1] = _extend_to(pieces[-1], block.end)
        return pieces

    def _piece(
        self, block: Block, header: str, rows: list[tuple[int, int]], *, first: bool
    ) -> Piece:
        body = block.text[rows[0][0] : rows[-1][1]]
        text = header + "\n" + body
        start = block.start if first else block.start + rows[0][0]
        return Piece(
            "table",
            start,
            block.start + rows[-1][1],
            text,
            self.counter.count(text),
            block.index,
            synthetic=not first,
        )

    def _oversize_row(
        self, block: Block, header: str, header_tokens: int, a: int, b: int, *, first: bool
    ) -> list[Piece]:
        row = block.text[a:b]
        text = header + "\n" + row
        tokens = self.counter.count(text)
        start = block.start if first else block.start + a
        if tokens <= self.oversize_block_limit:
            return [
                Piece(
                    "table",
                    start,
                    block.start + b,
                    text,
                    tokens,
                    block.index,
                    oversize=True,
                    synthetic=not first,
                )
            ]
        # Cut every cell into fragments that fit beside the header; each fragment becomes
        # a row of its own with the other cells empty. The char ranges partition the row.
        separators = [m.start() for m in _CELL_SEPARATOR.finditer(row)]
        bounds = list(itertools.pairwise(separators))
        width = max(1, len(bounds))
        budget = max(8, self.max_tokens - header_tokens - 2 * width - 2)
        fragments: list[tuple[int, int, int]] = []  # (column, start, end) within the row
        for column, (left, right) in enumerate(bounds):
            cell = row[left + 1 : right]
            for x, y in window_spans(cell, budget, self.counter):
                if cell[x:y].strip():
                    fragments.append((column, left + 1 + x, left + 1 + y))
        pieces: list[Piece] = []
        cursor = 0
        for index, (column, x, y) in enumerate(fragments):
            cells = [""] * width
            cells[column] = row[x:y].strip()
            line = "| " + " | ".join(cells) + " |"
            piece_text = header + "\n" + line
            end = len(row) if index == len(fragments) - 1 else y
            piece_start = start if index == 0 else block.start + a + cursor
            pieces.append(
                Piece(
                    "table",
                    piece_start,
                    block.start + a + end,
                    piece_text,
                    self.counter.count(piece_text),
                    block.index,
                    synthetic=True,
                )
            )
            cursor = end
        return pieces

    def _whole_oversize(self, block: Block) -> Piece:
        return Piece(
            "table",
            block.start,
            block.end,
            block.text,
            block.token_count,
            block.index,
            oversize=True,
        )


def _extend_to(piece: Piece, end: int) -> Piece:
    """The last piece runs to the block's end so trailing characters stay covered."""
    if piece.end == end:
        return piece
    return Piece(
        piece.kind,
        piece.start,
        end,
        piece.text,
        piece.tokens,
        piece.block_index,
        piece.oversize,
        piece.synthetic,
        piece.cuts,
    )
