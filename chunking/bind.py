"""Bound context (SPEC §3.5): a short paragraph (at most `bind_tokens`) directly before
a table or code block in the same section (a caption, a lead-in ending with `:`) joins
the block's first piece; a short paragraph directly after a code block (its output, a
one-line explanation) joins its last piece, and so does a table's footnote (the issue's
"With footnote" orphan: SPEC names code only). The piece keeps its kind and stays
within `max_tokens`, or `oversize_block_limit` for a code block kept whole; otherwise
the paragraph stays a paragraph. A paragraph between two such blocks goes to the next
one when it ends with `:`, else to the block before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chunking.blocks import Block, BlockType
from chunking.pieces import Piece
from chunking.split import SplitContext

_ATOMIC = (BlockType.TABLE, BlockType.CODE)


def run_pieces(blocks: Sequence[Block], ctx: SplitContext, bind_tokens: int) -> list[Piece]:
    """The pieces of one section run, bound context joined to its table or code piece."""
    before, after = _bindings(blocks, bind_tokens)
    bound = set(before.values()) | set(after.values())
    pieces: list[Piece] = []
    for position, block in enumerate(blocks):
        if position in bound:
            continue
        lead = blocks[before[position]] if position in before else None
        tail = blocks[after[position]] if position in after else None
        if lead is None and tail is None:
            pieces.extend(ctx.splitters[block.type].split(block, ctx))
            continue
        room = replace(
            ctx,
            head_room=lead.token_count + 1 if lead else 0,
            tail_room=tail.token_count + 1 if tail else 0,
        )
        split = ctx.splitters[block.type].split(block, room)
        first, last = split[0], split[-1]
        whole_code = len(split) == 1 and block.type is BlockType.CODE
        joined_lead = _join(lead, first, ctx, "before", whole_code) if lead else None
        if lead is not None and joined_lead is None:
            pieces.extend(ctx.splitters[lead.type].split(lead, ctx))
        if joined_lead is not None:
            split[0] = joined_lead
            if len(split) == 1:
                last = joined_lead
        joined_tail = _join(tail, last, ctx, "after", whole_code) if tail else None
        if joined_tail is not None:
            split[-1] = joined_tail
        pieces.extend(split)
        if tail is not None and joined_tail is None:
            pieces.extend(ctx.splitters[tail.type].split(tail, ctx))
    return pieces


def _bindings(blocks: Sequence[Block], bind_tokens: int) -> tuple[dict[int, int], dict[int, int]]:
    """block position -> position of the paragraph bound before it / after it."""
    before: dict[int, int] = {}
    after: dict[int, int] = {}
    taken: set[int] = set()

    def short(position: int) -> bool:
        if not 0 <= position < len(blocks) or position in taken:
            return False
        block = blocks[position]
        return block.type is BlockType.PARAGRAPH and block.token_count <= bind_tokens

    for position, block in enumerate(blocks):
        if block.type not in _ATOMIC:
            continue
        if short(position - 1):
            before[position] = position - 1
            taken.add(position - 1)
        if not short(position + 1):
            continue
        following = position + 2 < len(blocks) and blocks[position + 2].type in _ATOMIC
        if following and blocks[position + 1].text.rstrip().endswith(":"):
            continue  # a lead-in of the next block
        after[position] = position + 1
        taken.add(position + 1)
    return before, after


def _join(
    paragraph: Block, piece: Piece, ctx: SplitContext, side: str, whole_code: bool
) -> Piece | None:
    """The paragraph joined to the piece, or None when the two do not fit."""
    if side == "before":
        text = paragraph.text + ctx.document[paragraph.end : piece.start] + piece.text
        start, end = paragraph.start, piece.end
        bound = "both" if piece.bound == "after" else "before"
    else:
        text = piece.text + ctx.document[piece.end : paragraph.start] + paragraph.text
        start, end = piece.start, paragraph.end
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
        block_index=min(piece.block_index, paragraph.index),
        end_block=max(piece.last_block, paragraph.index),
        oversize=tokens > budget.max,
        bound=bound,
    )
