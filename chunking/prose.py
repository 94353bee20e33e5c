"""ProseSplitter: paragraphs and quotes over budget split at sentence boundaries; a
sentence over budget splits at token windows (SPEC §3.5)."""

from __future__ import annotations

from dataclasses import dataclass

from chunking.pieces import Piece
from chunking.sentences import sentence_spans, window_spans
from chunking.tokens import TokenCounter


@dataclass(frozen=True)
class ProseSplitter:
    counter: TokenCounter
    target_tokens: int
    max_tokens: int

    def split(self, text: str, base: int, kind: str, block_index: int) -> list[Piece]:
        """Pieces of at most `max_tokens`, each filled towards `target_tokens`."""
        # A quote piece that starts mid-line gets `> ` re-added: keep room for it.
        budget = self.max_tokens - (2 if kind == "quote" else 0)
        spans = self._units(text, budget)
        counts = self.counter.count_many([text[a:b] for a, b in spans])
        # Even pieces: aim at total / pieces-needed rather than filling to the target and
        # leaving a small remainder.
        total = sum(counts)
        aim = total / max(1, -(-total // self.target_tokens))
        groups: list[tuple[int, int]] = []
        start, used = spans[0][0], 0
        for (a, b), n in zip(spans, counts, strict=True):
            if used and (used + n > budget or used >= aim):
                groups.append((start, a))
                start, used = a, 0
            used += n
            end = b
        groups.append((start, end))
        pieces = self._pieces(text, base, kind, block_index, groups)
        if all(p.tokens <= self.max_tokens for p in pieces):
            return pieces
        # Sums of sentence counts can miss by a token where a boundary falls inside a
        # word: re-cut the rare piece that ends up over budget by token windows.
        exact: list[Piece] = []
        for piece in pieces:
            if piece.tokens <= self.max_tokens:
                exact.append(piece)
                continue
            local = piece.start - base
            windows = window_spans(text[local : piece.end - base], budget - 2, self.counter)
            exact.extend(
                self._pieces(
                    text, base, kind, block_index, [(local + a, local + b) for a, b in windows]
                )
            )
        return exact

    def split_head(self, piece: Piece, document: str, budget: int) -> tuple[Piece, Piece] | None:
        """Divide `piece` at the last sentence boundary that keeps the head within
        `budget` tokens; None when even the first sentence does not fit."""
        text = document[piece.start : piece.end] if not piece.synthetic else piece.text
        if piece.synthetic:
            return None
        spans = sentence_spans(text)
        if len(spans) < 2:
            return None
        counts = self.counter.count_many([text[a:b] for a, b in spans])
        used, cut = 0, 0
        for (_, b), n in zip(spans[:-1], counts[:-1], strict=True):
            if used + n > budget:
                break
            used += n
            cut = b
        if cut == 0:
            return None
        head, tail = self._pieces(
            text, piece.start, piece.kind, piece.block_index, [(0, cut), (cut, len(text))]
        )
        return head, tail

    def split_tail(
        self, piece: Piece, document: str, least: int, most: int
    ) -> tuple[Piece, Piece] | None:
        """Divide `piece` so its tail (whole trailing sentences) holds at least `least`
        and at most `most` tokens; None when no sentence boundary allows it."""
        if piece.synthetic:
            return None
        text = document[piece.start : piece.end]
        spans = sentence_spans(text)
        if len(spans) < 2:
            return None
        counts = self.counter.count_many([text[a:b] for a, b in spans])
        used = 0
        for index in range(len(spans) - 1, 0, -1):
            used += counts[index]
            if used >= least:
                if used > most:
                    return None
                cut = spans[index][0]
                head, tail = self._pieces(
                    text, piece.start, piece.kind, piece.block_index, [(0, cut), (cut, len(text))]
                )
                return head, tail
        return None

    def _units(self, text: str, budget: int) -> list[tuple[int, int]]:
        units: list[tuple[int, int]] = []
        spans = sentence_spans(text)
        counts = self.counter.count_many([text[a:b] for a, b in spans])
        for (a, b), n in zip(spans, counts, strict=True):
            if n <= budget:
                units.append((a, b))
            else:
                units.extend(
                    (a + x, a + y) for x, y in window_spans(text[a:b], budget, self.counter)
                )
        return units

    def _pieces(
        self, text: str, base: int, kind: str, block_index: int, groups: list[tuple[int, int]]
    ) -> list[Piece]:
        trimmed = []
        for a, b in groups:
            raw = text[a:b]
            lead = len(raw) - len(raw.lstrip())
            body = raw.strip()
            if body:
                trimmed.append((a + lead, a + lead + len(body), body))
        texts = [
            body if kind != "quote" or body.startswith(">") else "> " + body
            for _, _, body in trimmed
        ]
        counts = self.counter.count_many(texts)
        return [
            Piece(
                kind=kind,
                start=base + a,
                end=base + b,
                text=t,
                tokens=n,
                block_index=block_index,
                synthetic=t != body,
            )
            for (a, b, body), t, n in zip(trimmed, texts, counts, strict=True)
        ]
