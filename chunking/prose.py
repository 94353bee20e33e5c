"""Paragraphs and quotes: a block over `max_tokens` splits at sentence boundaries into
pieces aimed at `target_tokens`, never over the packing limit; a sentence over it splits
at token windows (docs/chunking.md#splitting). Every quote piece stays a quote."""

from __future__ import annotations

from dataclasses import dataclass

from chunking.blocks import Block
from chunking.pieces import Piece
from chunking.sentences import sentence_spans, window_spans
from chunking.split import SplitContext, even_runs, whole
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
    """Pieces of at most the packing limit, each filled towards the target. A sentence
    (or pipe row) over the packing limit but within `max_tokens` is a piece of its own;
    only one over `max_tokens` is cut at token windows."""
    counter, budget = ctx.counter, ctx.budget
    # A quote piece that starts mid-line gets `> ` re-added: keep room for it.
    margin = 2 if kind == "quote" else 0
    limit = budget.pack_max - margin
    spans = _units(text, budget.max - margin, limit, counter)
    counts = counter.count_many([text[a:b] for a, b in spans])
    groups = [
        (spans[first][0], spans[stop][0] if stop < len(spans) else spans[-1][1])
        for first, stop in even_runs(counts, limit, budget.target, join=0)
    ]
    pieces = _pieces(text, base, kind, block_index, groups, counter)
    if all(p.tokens <= budget.max for p in pieces):
        return pieces
    # Sums of sentence counts can miss by a token where a boundary falls inside a
    # word: re-cut the rare piece that ends up over budget by token windows.
    exact: list[Piece] = []
    for piece in pieces:
        if piece.tokens <= budget.max:
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
    found = _sentences(piece, document, counter)
    if found is None:
        return None
    text, spans, counts = found
    used, cut = 0, 0
    for (_, b), n in zip(spans[:-1], counts[:-1], strict=True):
        if used + n > budget:
            break
        used += n
        cut = b
    return _halves(piece, text, cut, counter) if cut else None


def split_tail(
    piece: Piece, document: str, least: int, most: int, counter: TokenCounter
) -> tuple[Piece, Piece] | None:
    """Divide `piece` so its tail (whole trailing sentences) holds at least `least`
    and at most `most` tokens; None when no sentence boundary allows it."""
    found = _sentences(piece, document, counter)
    if found is None:
        return None
    text, spans, counts = found
    used = 0
    for index in range(len(spans) - 1, 0, -1):
        used += counts[index]
        if used >= least:
            return _halves(piece, text, spans[index][0], counter) if used <= most else None
    return None


def _sentences(
    piece: Piece, document: str, counter: TokenCounter
) -> tuple[str, list[tuple[int, int]], list[int]] | None:
    """The piece's text, sentence spans and their counts; None when it cannot divide."""
    if piece.synthetic:
        return None
    text = document[piece.start : piece.end]
    spans = sentence_spans(text)
    if len(spans) < 2:
        return None
    return text, spans, counter.count_many([text[a:b] for a, b in spans])


def _halves(piece: Piece, text: str, cut: int, counter: TokenCounter) -> tuple[Piece, Piece]:
    head, tail = _pieces(
        text, piece.start, piece.kind, piece.block_index, [(0, cut), (cut, len(text))], counter
    )
    return head, tail


def _units(text: str, whole: int, window: int, counter: TokenCounter) -> list[tuple[int, int]]:
    """Sentences (whole up to `whole` tokens) and token windows of longer ones."""
    units: list[tuple[int, int]] = []
    spans = sentence_spans(text)
    counts = counter.count_many([text[a:b] for a, b in spans])
    for (a, b), n in zip(spans, counts, strict=True):
        if n <= whole:
            units.append((a, b))
        else:
            units.extend((a + x, a + y) for x, y in window_spans(text[a:b], window, counter))
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
