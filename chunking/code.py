"""Code and HTML blocks. A code block is one piece up to `oversize_block_limit` (kept
whole even over `max_tokens`); above it, it splits between lines into even pieces within
the packing limit, each a valid fenced block with the original info string
(docs/chunking.md#splitting). An HTML block over `max_tokens` splits between lines the same way,
unframed.

`split_framed` is the shared line packer: display math uses it with its delimiters.
"""

from __future__ import annotations

from dataclasses import dataclass

from chunking.blocks import Block
from chunking.pieces import Piece
from chunking.sentences import window_spans
from chunking.split import SplitContext, even_runs, whole


@dataclass(frozen=True)
class CodeSplitter:
    kind: str = "code"

    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        budget = ctx.budget
        if block.token_count <= budget.oversize:
            return [whole(block, self.kind, oversize=block.token_count > budget.max)]
        lines = block.text.split("\n")
        if not block.fence:  # indented code: every run of lines is still indented code
            return split_framed(block, ctx, self.kind, "", "", _line_spans(lines, 0, len(lines)))
        has_closer = len(lines) > 1 and lines[-1].strip().startswith(block.fence)
        indent = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
        closer = lines[-1].rstrip() if has_closer else indent + block.fence
        body_end = len(lines) - 1 if has_closer else len(lines)
        return split_framed(
            block, ctx, self.kind, lines[0], closer, _line_spans(lines, 1, body_end)
        )


@dataclass(frozen=True)
class HtmlSplitter:
    kind: str = "paragraph"

    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        if block.token_count <= ctx.budget.max:
            return [whole(block, self.kind)]
        lines = block.text.split("\n")
        return split_framed(block, ctx, self.kind, "", "", _line_spans(lines, 0, len(lines)))


def _line_spans(lines: list[str], first: int, stop: int) -> list[tuple[int, int]]:
    """Char spans (within the block text) of lines[first:stop]."""
    offset = sum(len(line) + 1 for line in lines[:first])
    spans = []
    for line in lines[first:stop]:
        spans.append((offset, offset + len(line)))
        offset += len(line) + 1
    return spans


def split_framed(
    block: Block,
    ctx: SplitContext,
    kind: str,
    opener: str,
    closer: str,
    body: list[tuple[int, int]],
) -> list[Piece]:
    """Pack the body lines (spans within `block.text`) into pieces within the packing
    limit, each wrapped in `opener`/`closer` when the block has a frame. Char ranges
    partition the block: the first piece starts at the block, the last ends with it."""
    counter = ctx.counter
    framed = bool(opener or closer)
    frame_tokens = counter.count(opener + "\n" + closer) if framed else 0
    limit = ctx.budget.pack_max - frame_tokens - (2 if framed else 0)
    counts = counter.count_many([block.text[a:b] for a, b in body])

    runs: list[list[tuple[int, int, int]]] = []  # per piece: (start, end, tokens) of lines
    lines: list[tuple[int, int, int]] = []  # lines since the last piece, within the limit

    def close_lines() -> None:
        if not lines:
            return
        # Code splits only past `oversize_block_limit`: pieces as full as the limit
        # allows, evened out so the last is not a remainder of a few lines.
        first = 0 if runs else ctx.head_room
        costs = [n for _, _, n in lines]
        runs.extend(lines[a:b] for a, b in even_runs(costs, limit, limit, first=first))
        lines.clear()

    for (a, b), n in zip(body, counts, strict=True):
        if n > limit:
            close_lines()
            runs.extend(
                [(a + x, a + y, limit)]
                for x, y in window_spans(block.text[a:b], max(1, limit - ctx.head_room), counter)
            )
            continue
        lines.append((a, b, n))
    close_lines()
    if not runs:
        return [whole(block, kind, oversize=True)]
    if ctx.tail_room and sum(n + 1 for _, _, n in runs[-1]) + ctx.tail_room > limit:
        runs[-1:] = _room_at_end(runs[-1], limit - ctx.tail_room)

    pieces: list[Piece] = []
    for index, run in enumerate(runs):
        a, b = run[0][0], run[-1][1]
        text = f"{opener}\n{block.text[a:b]}\n{closer}" if framed else block.text[a:b]
        start = block.start if index == 0 else block.start + a
        end = block.end if index == len(runs) - 1 else block.start + b
        pieces.append(Piece(kind, start, end, text, 0, block.index, synthetic=framed))
    counts = counter.count_many([p.text for p in pieces])
    return [
        Piece(p.kind, p.start, p.end, p.text, n, p.block_index, synthetic=p.synthetic)
        for p, n in zip(pieces, counts, strict=True)
    ]


def _room_at_end(run: list[tuple[int, int, int]], limit: int) -> list[list[tuple[int, int, int]]]:
    """Re-cut the last run so its final piece keeps `limit` free for a bound paragraph."""
    used, cut = 0, len(run)
    while cut > 1 and used + run[cut - 1][2] + 1 <= limit:
        used += run[cut - 1][2] + 1
        cut -= 1
    return [run[:cut], run[cut:]] if cut < len(run) else [run]
