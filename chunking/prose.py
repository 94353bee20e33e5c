"""Paragraphs and quotes: a block over `max_tokens` splits at sentence boundaries into
pieces aimed at `target_tokens`, never over the packing limit; a sentence over it splits
at token windows (SPEC §3.5). Every quote piece stays a quote."""

from __future__ import annotations

from dataclasses import dataclass

from chunking.blocks import Block
from chunking.pieces import Piece
from chunking.sentences import sentence_spans, window_spans
from chunking.split import SplitContext, whole
from chunking.tokens import TokenCounter


@dataclass(frozen=True)
class ParagraphSplitter:
    kind: str = "paragraph"

    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        if block.token_count <= ctx.budget.max:
            return [whole(block, self.kind)]
        return split_prose(block.text, block.start, self.kind, block.index, ctx)


@dataclass(frozen=True)
class QuoteSplitter(ParagraphSplitter):
    kind: str = "quote"


def split_prose(
    text: str, base: int, kind: str, block_index: int, ctx: SplitContext
) -> list[Piece]:
    """Pieces of at most the packing limit, each filled towards the target."""
    counter, budget = ctx.counter, ctx.budget
    # A quote piece that starts mid-line gets `> ` re-added: keep room for it.
    limit = budget.pack_max - (2 if kind == "quote" else 0)
    spans = _units(text, limit, counter)
    counts = counter.count_many([text[a:b] for a, b in spans])
    # Even pieces: aim at total / pieces-needed rather than filling to the target and
    # leaving a small remainder.
    total = sum(counts)
    aim = total / max(1, -(-total // budget.target))
    groups: list[tuple[int, int]] = []
    start, used = spans[0][0], 0
    end = start
    for (a, b), n in zip(spans, counts, strict=True):
        if used and (used + n > limit or used >= aim):
            groups.append((start, a))
            start, used = a, 0
        used += n
        end = b
    groups.append((start, end))
    pieces = _pieces(text, base, kind, block_index, groups, counter)
    if all(p.tokens <= budget.pack_max for p in pieces):
        return pieces
    # Sums of sentence counts can miss by a token where a boundary falls inside a
    # word: re-cut the rare piece that ends up over budget by token windows.
    exact: list[Piece] = []
    for piece in pieces:
        if piece.tokens <= budget.pack_max:
            exact.append(piece)
            continue
        local = piece.start - base
        windows = window_spans(text[local : piece.end - base], limit - 2, counter)
        exact.extend(
            _pieces(
                text,
                base,
                kind,
                block_index,
                [(local + a, local + b) for a, b in windows],
                counter,
            )
        )
    return exact


def split_head(
    piece: Piece, document: str, budget: int, counter: TokenCounter
) -> tuple[Piece, Piece] | None:
    """Divide `piece` at the last sentence boundary that keeps the head within
    `budget` tokens; None when even the first sentence does not fit."""
    if piece.synthetic:
        return None
    text = document[piece.start : piece.end]
    spans = sentence_spans(text)
    if len(spans) < 2:
        return None
    counts = counter.count_many([text[a:b] for a, b in spans])
    used, cut = 0, 0
    for (_, b), n in zip(spans[:-1], counts[:-1], strict=True):
        if used + n > budget:
            break
        used += n
        cut = b
    if cut == 0:
        return None
    head, tail = _pieces(
        text, piece.start, piece.kind, piece.block_index, [(0, cut), (cut, len(text))], counter
    )
    return head, tail


def split_tail(
    piece: Piece, document: str, least: int, most: int, counter: TokenCounter
) -> tuple[Piece, Piece] | None:
    """Divide `piece` so its tail (whole trailing sentences) holds at least `least`
    and at most `most` tokens; None when no sentence boundary allows it."""
    if piece.synthetic:
        return None
    text = document[piece.start : piece.end]
    spans = sentence_spans(text)
    if len(spans) < 2:
        return None
    counts = counter.count_many([text[a:b] for a, b in spans])
    used = 0
    for index in range(len(spans) - 1, 0, -1):
        used += counts[index]
        if used >= least:
            if used > most:
                return None
            cut = spans[index][0]
            head, tail = _pieces(
                text,
                piece.start,
                piece.kind,
                piece.block_index,
                [(0, cut), (cut, len(text))],
                counter,
            )
            return head, tail
    return None


def _units(text: str, limit: int, counter: TokenCounter) -> list[tuple[int, int]]:
    units: list[tuple[int, int]] = []
    spans = sentence_spans(text)
    counts = counter.count_many([text[a:b] for a, b in spans])
    for (a, b), n in zip(spans, counts, strict=True):
        if n <= limit:
            units.append((a, b))
        else:
            units.extend((a + x, a + y) for x, y in window_spans(text[a:b], limit, counter))
    return units


def _pieces(
    text: str,
    base: int,
    kind: str,
    block_index: int,
    groups: list[tuple[int, int]],
    counter: TokenCounter,
) -> list[Piece]:
    trimmed = []
    for a, b in groups:
        raw = text[a:b]
        lead = len(raw) - len(raw.lstrip())
        body = raw.strip()
        if body:
            trimmed.append((a + lead, a + lead + len(body), body))
    texts = [
        body if kind != "quote" or body.startswith(">") else "> " + body for _, _, body in trimmed
    ]
    counts = counter.count_many(texts)
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
