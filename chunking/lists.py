"""ListSplitter: a list over budget splits between top-level items, nested items staying
with their parent; an item over budget splits between its sub-items, then sentences."""

from __future__ import annotations

from dataclasses import dataclass

from chunking.blocks import Block, ListItem
from chunking.pieces import Piece
from chunking.prose import ProseSplitter
from chunking.tokens import TokenCounter


@dataclass(frozen=True)
class ListSplitter:
    counter: TokenCounter
    target_tokens: int
    max_tokens: int
    prose: ProseSplitter

    def split(self, block: Block, document: str) -> list[Piece]:
        cuts = tuple(item.start for item in block.items[1:])
        if block.token_count <= self.max_tokens:
            return [self._piece(block, block.start, block.end, block.token_count, document, cuts)]
        pieces: list[Piece] = []
        for item in block.items:
            pieces.extend(self._split_item(block, item, document))
        return pieces

    def _split_item(self, block: Block, item: ListItem, document: str) -> list[Piece]:
        count = self.counter.count(document[item.start : item.end])
        if count <= self.max_tokens:
            return [self._piece(block, item.start, item.end, count, document)]
        # The item's own lines and its nested items, in document order, pack into pieces
        # of at most max_tokens. A line over budget alone is cut at
        # sentences: the only place a list piece may start or end inside a line.
        segments: list[tuple[int, int, ListItem | None]] = []
        cursor = item.start
        for child in (*item.children, None):
            stop = child.start if child is not None else item.end
            line_start = cursor
            for line in document[cursor:stop].split("\n"):  # the item's own lines
                if line.strip():
                    segments.append((line_start, line_start + len(line), None))
                line_start += len(line) + 1
            if child is not None:
                segments.append((child.start, child.end, child))
                cursor = child.end
        texts = [document[a:b].rstrip() for a, b, _ in segments]
        counts = self.counter.count_many(texts)
        pieces: list[Piece] = []
        run_start, run_end, used = segments[0][0], segments[0][0], 0
        for (a, _, child), text, n in zip(segments, texts, counts, strict=True):
            end = a + len(text)
            if n > self.max_tokens:
                if used:
                    pieces.append(self._counted(block, run_start, run_end, document))
                if child is not None:
                    pieces.extend(self._split_item(block, child, document))
                else:
                    pieces.extend(
                        Piece("list", p.start, p.end, p.text, p.tokens, block.index)
                        for p in self.prose.split(text, a, "list", block.index)
                    )
                run_start, used = end, 0
                continue
            if used and (used + n + 1 > self.max_tokens or used >= self.target_tokens):
                pieces.append(self._counted(block, run_start, run_end, document))
                used = 0
            if not used:
                run_start = a
            used += n + (1 if used else 0)
            run_end = end
        if used:
            pieces.append(self._counted(block, run_start, run_end, document))
        return pieces

    def _counted(self, block: Block, start: int, end: int, document: str) -> Piece:
        # Keep the indentation: a piece starts at a line start so no item line is cut.
        raw = document[start:end]
        text = raw.lstrip("\n").rstrip()
        start += len(raw) - len(raw.lstrip("\n"))
        return self._piece(block, start, start + len(text), self.counter.count(text), document)

    def split_head(self, piece: Piece, document: str, budget: int) -> tuple[Piece, Piece] | None:
        """Divide a whole list at the last top-level item boundary that keeps the head
        within `budget` tokens; None when even the first item does not fit."""
        for cut in reversed(piece.cuts):
            head = document[piece.start : cut].rstrip()
            tokens = self.counter.count(head)
            if tokens <= budget:
                tail_cuts = tuple(c for c in piece.cuts if c > cut)
                tail_text = document[cut : piece.end]
                return (
                    Piece(
                        "list",
                        piece.start,
                        piece.start + len(head),
                        head,
                        tokens,
                        piece.block_index,
                    ),
                    Piece(
                        "list",
                        cut,
                        piece.end,
                        tail_text,
                        self.counter.count(tail_text),
                        piece.block_index,
                        cuts=tail_cuts,
                    ),
                )
        return None

    def _piece(
        self,
        block: Block,
        start: int,
        end: int,
        tokens: int,
        document: str,
        cuts: tuple[int, ...] = (),
    ) -> Piece:
        return Piece("list", start, end, document[start:end], tokens, block.index, cuts=cuts)
