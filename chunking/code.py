"""CodeSplitter: a code block is one piece up to `oversize_block_limit` (kept whole even
over `max_tokens`); above it, it splits between lines into pieces of at most
`max_tokens`, each a valid fenced block with the original info string (SPEC §3.5).
HTML blocks and display math over budget split between lines the same way, unfenced."""

from __future__ import annotations

from dataclasses import dataclass

from chunking.blocks import Block, BlockType
from chunking.pieces import Piece
from chunking.sentences import window_spans
from chunking.tokens import TokenCounter


@dataclass(frozen=True)
class CodeSplitter:
    counter: TokenCounter
    max_tokens: int
    oversize_block_limit: int

    def split(self, block: Block, kind: str) -> list[Piece]:
        limit = self.oversize_block_limit if block.type is BlockType.CODE else self.max_tokens
        if block.token_count <= limit:
            return [
                Piece(
                    kind,
                    block.start,
                    block.end,
                    block.text,
                    block.token_count,
                    block.index,
                    oversize=block.token_count > self.max_tokens,
                )
            ]
        lines = block.text.split("\n")
        opener, closer = "", ""
        if block.fence:
            opener = lines[0]
            has_closer = len(lines) > 1 and lines[-1].strip().startswith(block.fence)
            closer = lines[-1].strip() if has_closer else block.fence
            body_lines = lines[1:-1] if has_closer else lines[1:]
            body_offset = len(lines[0]) + 1
        else:
            body_lines = lines
            body_offset = 0
        frame_tokens = self.counter.count(opener + "\n" + closer) if block.fence else 0
        budget = self.max_tokens - frame_tokens - 2

        spans: list[tuple[int, int]] = []  # body line spans within block.text
        offset = body_offset
        for line in body_lines:
            spans.append((offset, offset + len(line)))
            offset += len(line) + 1
        counts = self.counter.count_many([block.text[a:b] for a, b in spans])

        runs: list[tuple[int, int]] = []
        run_start, run_end, used = -1, -1, 0
        for (a, b), n in zip(spans, counts, strict=True):
            if n > budget:
                if run_start >= 0:
                    runs.append((run_start, run_end))
                runs.extend(
                    (a + x, a + y) for x, y in window_spans(block.text[a:b], budget, self.counter)
                )
                run_start, used = -1, 0
                continue
            if run_start >= 0 and used + n + 1 > budget:
                runs.append((run_start, run_end))
                run_start, used = -1, 0
            if run_start < 0:
                run_start = a
            run_end = b
            used += n + 1
        if run_start >= 0:
            runs.append((run_start, run_end))

        pieces: list[Piece] = []
        for index, (a, b) in enumerate(runs):
            body = block.text[a:b]
            text = f"{opener}\n{body}\n{closer}" if block.fence else body
            start = block.start if index == 0 else block.start + a
            end = block.end if index == len(runs) - 1 else block.start + b
            pieces.append(
                Piece(kind, start, end, text, 0, block.index, synthetic=bool(block.fence))
            )
        counts = self.counter.count_many([p.text for p in pieces])
        return [
            Piece(p.kind, p.start, p.end, p.text, n, p.block_index, synthetic=p.synthetic)
            for p, n in zip(pieces, counts, strict=True)
        ]
