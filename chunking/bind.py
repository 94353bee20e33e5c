"""Bound context (SPEC §3.5): a short paragraph (at most `bind_tokens`) directly before
a table or code block in the same section (a caption, a lead-in ending with `:`) joins
the block's first piece; a short paragraph directly after a code block (its output, a
one-line explanation) joins its last piece, and so does a table's footnote (the issue's
"With footnote" orphan: SPEC names code only). The piece keeps its kind and stays
within `max_tokens`, or `oversize_block_limit` for a code block kept whole; otherwise
the paragraph stays a paragraph. A paragraph between two such blocks goes to the next
one when it ends with `:`, else to the block before it. HTML blocks beside the paragraph
(an image placeholder `<!-- image -->`, a figure) bind with it within the same budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chunking.blocks import BINDABLE, Block, BlockType
from chunking.pieces import Piece
from chunking.split import SplitContext

_ATOMIC = (BlockType.TABLE, BlockType.CODE)


def run_pieces(blocks: Sequence[Block], ctx: SplitContext, bind_tokens: int) -> list[Piece]:
    """The pieces of one section run, bound context joined to its table or code piece."""
    before, after = _bindings(blocks, bind_tokens)
    bound = {p for run in (*before.values(), *after.values()) for p in run}
    pieces: list[Piece] = []
    for position, block in enumerate(blocks):
        if position in bound:
            continue
        lead = [blocks[p] for p in before.get(position, ())]
        tail = [blocks[p] for p in after.get(position, ())]
        if not lead and not tail:
            pieces.extend(ctx.splitters[block.type].split(block, ctx))
            continue
        room = replace(ctx, head_room=_room(lead), tail_room=_room(tail))
        split = ctx.splitters[block.type].split(block, room)
        first, last = split[0], split[-1]
        whole_code = len(split) == 1 and block.type is BlockType.CODE
        joined_lead = _join(lead, first, ctx, "before", whole_code) if lead else None
        if lead and joined_lead is None:
            pieces.extend(_alone(lead, ctx))
        if joined_lead is not None:
            split[0] = joined_lead
            if len(split) == 1:
                last = joined_lead
        joined_tail = _join(tail, last, ctx, "after", whole_code) if tail else None
        if joined_tail is not None:
            split[-1] = joined_tail
        pieces.extend(split)
        if tail and joined_tail is None:
            pieces.extend(_alone(tail, ctx))
    return pieces


def _room(context: Sequence[Block]) -> int:
    return sum(block.token_count + 1 for block in context)


def _alone(context: Sequence[Block], ctx: SplitContext) -> list[Piece]:
    return [piece for block in context for piece in ctx.splitters[block.type].split(block, ctx)]


def _bindings(
    blocks: Sequence[Block], bind_tokens: int
) -> tuple[dict[int, tuple[int, ...]], dict[int, tuple[int, ...]]]:
    """block position -> positions of the context bound before it / after it: one short
    paragraph with the HTML blocks beside it (image placeholders, figures), at most
    `bind_tokens` in all."""
    before: dict[int, tuple[int, ...]] = {}
    after: dict[int, tuple[int, ...]] = {}
    taken: set[int] = set()

    def run(start: int, step: int) -> tuple[int, ...]:
        positions: list[int] = []
        tokens = paragraphs = 0
        position = start
        while 0 <= position < len(blocks) and position not in taken:
            block = blocks[position]
            tokens += block.token_count
            paragraphs += block.type is BlockType.PARAGRAPH
            if block.type not in BINDABLE or paragraphs > 1 or tokens > bind_tokens:
                break
            positions.append(position)
            position += step
        return tuple(sorted(positions))

    for position, block in enumerate(blocks):
        if block.type not in _ATOMIC:
            continue
        lead = run(position - 1, -1)
        if lead:
            before[position] = lead
            taken.update(lead)
        tail = run(position + 1, 1)
        if not tail:
            continue
        following = tail[-1] + 1 < len(blocks) and blocks[tail[-1] + 1].type in _ATOMIC
        if following and blocks[tail[-1]].text.rstrip().endswith(":"):
            continue  # a lead-in of the next block
        after[position] = tail
        taken.update(tail)
    return before, after


def _join(
    context: Sequence[Block], piece: Piece, ctx: SplitContext, side: str, whole_code: bool
) -> Piece | None:
    """The context joined to the piece, or None when the two do not fit."""
    first, last = context[0], context[-1]
    if side == "before":
        text = ctx.document[first.start : piece.start] + piece.text
        start, end = first.start, piece.end
        bound = "both" if piece.bound == "after" else "before"
    else:
        text = piece.text + ctx.document[piece.end : last.end]
        start, end = piece.start, last.end
        bound = "both" if piece.bound == "before" else "after"
    budget = ctx.budget
    limit = budget.oversize if whole_code else budget.max
    tokens = ctx.counter.count(text)
    if tokens > limit:
        return None
    return replace(
        piece,
        start=start,
        end=end,
        text=text,
        tokens=tokens,
        block_index=min(piece.block_index, first.index),
        end_block=max(piece.last_block, last.index),
        oversize=tokens > budget.max,
        bound=bound,
    )
