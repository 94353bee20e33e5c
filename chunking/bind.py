"""Bound context (docs/chunking.md#bound-context): code and tables keep the words that
explain them.

- Before a table or code block, the nearest prose of its section run (whole paragraphs,
  lists, quotes, and HTML blocks such as an `<!-- image -->` placeholder beside them),
  nearest first, joins the block's first piece while it stays within
  `bind_before_tokens`.
- After a code block, its output block (a code block right after it whose info string
  is `text`/`console`/`output`/`shell-session`, or one introduced by a paragraph
  starting "Output"/"Результат"/"Вывод") and the nearest prose join its last piece
  within `bind_after_tokens`; so does a table's footnote (the prose after it). A
  paragraph ending with `:` is a lead-in: it binds forward, never after a block; so
  does the prose right before the next table or code block, unless it is all there is
  between the two.

The piece keeps its kind and stays within `max_tokens` (`oversize_block_limit` for a
block kept whole over `max_tokens`); context that does not fit stays prose. A
paragraph binds to one block only: blocks take their context in document order. Code
pieces record their role: `example` (prose bound to the code), `output` (only its
output block bound), `standalone`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from chunking.blocks import Block, BlockType
from chunking.pieces import Piece
from chunking.split import SplitContext

ATOMIC = frozenset({BlockType.TABLE, BlockType.CODE})
# What binds as context: prose blocks and HTML blocks (image placeholders, figures).
CONTEXT = frozenset({BlockType.PARAGRAPH, BlockType.LIST, BlockType.QUOTE, BlockType.HTML})
OUTPUT_INFO = frozenset({"text", "console", "output", "shell-session"})
OUTPUT_INTRO = re.compile(r"[*_]{0,2}(?:output|результат|вывод)(?![\w-])", re.IGNORECASE)


@dataclass(frozen=True)
class Binding:
    """The context one table or code block takes: positions in the section run."""

    before: tuple[int, ...] = ()
    after: tuple[int, ...] = ()
    output: tuple[int, ...] = ()  # the output block (and its introducing paragraph), in `after`


def is_output_block(blocks: Sequence[Block], position: int) -> bool:
    """Is the code block at `position` the output of the code block before it?"""
    block = blocks[position]
    if block.type is not BlockType.CODE or position == 0:
        return False
    words = block.info.split()
    if words and words[0].lower() in OUTPUT_INFO and blocks[position - 1].type is BlockType.CODE:
        return True
    intro = blocks[position - 1]
    return (
        intro.type is BlockType.PARAGRAPH
        and position >= 2
        and blocks[position - 2].type is BlockType.CODE
        and OUTPUT_INTRO.match(intro.text) is not None
    )


def lead_in(block: Block) -> bool:
    """A paragraph introducing what follows it ("To run the sample:")."""
    return block.type is BlockType.PARAGRAPH and block.text.rstrip().endswith(":")


def run_pieces(
    blocks: Sequence[Block], ctx: SplitContext, before_tokens: int, after_tokens: int
) -> list[Piece]:
    """The pieces of one section run, bound context joined to its table or code piece."""
    bindings = _bindings(blocks, ctx, before_tokens, after_tokens)
    bound = {p for b in bindings.values() for p in (*b.before, *b.after)}
    pieces: list[Piece] = []
    for position, block in enumerate(blocks):
        if position in bound:
            continue
        binding = bindings.get(position)
        if binding is None:
            pieces.extend(_alone([block], ctx))
        else:
            pieces.extend(_bound_pieces(blocks, block, binding, ctx))
    return pieces


def _bound_pieces(
    blocks: Sequence[Block], block: Block, binding: Binding, ctx: SplitContext
) -> list[Piece]:
    lead = [blocks[p] for p in binding.before]
    tail = [blocks[p] for p in binding.after]
    room = replace(ctx, head_room=_room(lead), tail_room=_room(tail))
    split = ctx.splitters[block.type].split(block, room)
    joined_lead = _join(lead, split[0], ctx, "before") if lead else None
    if joined_lead is not None:
        split[0] = joined_lead
    joined_tail = _join(tail, split[-1], ctx, "after") if tail else None
    if joined_tail is not None:
        split[-1] = joined_tail
    if block.type is BlockType.CODE:
        explained = joined_lead is not None or (
            joined_tail is not None and len(binding.after) > len(binding.output)
        )
        role = "example" if explained else "output" if joined_tail is not None else "standalone"
        split = [replace(p, code_role=role) for p in split]
    before = _alone(lead, ctx) if lead and joined_lead is None else []
    after = _alone(tail, ctx) if tail and joined_tail is None else []
    return [*before, *split, *after]


def _room(context: Sequence[Block]) -> int:
    return sum(block.token_count + 1 for block in context)


def _alone(context: Sequence[Block], ctx: SplitContext) -> list[Piece]:
    """Blocks split on their own, nothing bound (code recorded as standalone)."""
    pieces = []
    for block in context:
        split = ctx.splitters[block.type].split(block, ctx)
        if block.type is BlockType.CODE:
            split = [replace(p, code_role="standalone") for p in split]
        pieces.extend(split)
    return pieces


def _bindings(
    blocks: Sequence[Block], ctx: SplitContext, before_tokens: int, after_tokens: int
) -> dict[int, Binding]:
    """block position -> the context it takes, blocks taking theirs in document order."""
    budget = ctx.budget
    taken: set[int] = set()
    bindings: dict[int, Binding] = {}

    def fits(block: Block, context_tokens: int) -> bool:
        """Does a block kept whole have room for this much context beside it?"""
        if block.type is BlockType.TABLE and block.token_count > budget.max:
            return True  # split: its first and last pieces keep the room
        if block.type is BlockType.CODE and block.token_count > budget.oversize:
            return True
        limit = budget.oversize if block.token_count > budget.max else budget.max
        return block.token_count + context_tokens <= limit

    for position, block in enumerate(blocks):
        if block.type not in ATOMIC or position in taken:
            continue
        before: list[int] = []
        used = 0
        at = position - 1
        while at >= 0 and at not in taken and blocks[at].type in CONTEXT:
            cost = blocks[at].token_count
            if used + cost > before_tokens or not fits(block, used + cost + len(before) + 1):
                break
            before.append(at)
            used += cost
            at -= 1
        after: list[int] = []
        output: list[int] = []
        spent = 0
        at = position + 1
        if block.type is BlockType.CODE:
            # the output block right after the code, or after a paragraph introducing it
            introduced = at + 1 < len(blocks) and blocks[at].type is BlockType.PARAGRAPH
            stop = at + 2 if introduced and is_output_block(blocks, at + 1) else at + 1
            if stop <= len(blocks) and is_output_block(blocks, stop - 1):
                cost = sum(blocks[p].token_count for p in range(at, stop))
                if cost <= after_tokens and fits(block, used + cost + stop - at + len(before)):
                    output = list(range(at, stop))
                    after.extend(output)
                    spent, at = cost, stop
        first_prose = at
        while at < len(blocks) and blocks[at].type in CONTEXT and not lead_in(blocks[at]):
            if at > first_prose and at + 1 < len(blocks) and blocks[at + 1].type in ATOMIC:
                break  # the nearest prose of the next block is its own
            cost = blocks[at].token_count
            joins = len(before) + len(after) + 1
            if spent + cost > after_tokens or not fits(block, used + spent + cost + joins):
                break
            after.append(at)
            spent += cost
            at += 1
        if before or after:
            bindings[position] = Binding(tuple(sorted(before)), tuple(after), tuple(output))
            taken.update(before)
            taken.update(after)
    return bindings


def _join(context: Sequence[Block], piece: Piece, ctx: SplitContext, side: str) -> Piece | None:
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
    limit = budget.oversize if piece.oversize else budget.max
    counter = ctx.counter
    # Only whitespace lies between the blocks: an additive count is a sum.
    own = sum(block.token_count for block in context)
    tokens = piece.tokens + own if counter.additive else counter.count(text)
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
