"""Display math (`$$…$$`, `\\begin{env}…\\end{env}`) is atomic like code: one piece up to
`oversize_block_limit`; above it, it splits between lines and every piece is a valid
math block with the block's own delimiters (docs/chunking.md#splitting)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from chunking.blocks import Block
from chunking.code import split_framed
from chunking.pieces import Piece
from chunking.split import SplitContext, whole

OPENER = re.compile(r"\A\s*(\$\$|\\begin\{[^}\n]*\})")
CLOSER = re.compile(r"(\$\$(?:[ \t]*\([^)\n]*\))?|\\end\{[^}\n]*\})\s*\Z")


@dataclass(frozen=True)
class MathSplitter:
    kind: str = "paragraph"  # display math packs like a paragraph (`chunk_type` has none for math)

    def split(self, block: Block, ctx: SplitContext) -> list[Piece]:
        if block.token_count <= ctx.budget.oversize:
            return [whole(block, self.kind, oversize=block.token_count > ctx.budget.max)]
        text = block.text
        opener, closer = OPENER.match(text), CLOSER.search(text)
        if opener is None or closer is None or closer.start() <= opener.end():
            return [whole(block, self.kind, oversize=True)]
        body_start = opener.end() + (1 if text[opener.end() : opener.end() + 1] == "\n" else 0)
        body_end = closer.start()
        if body_end > body_start and text[body_end - 1] == "\n":
            body_end -= 1
        spans: list[tuple[int, int]] = []
        offset = body_start
        for line in text[body_start:body_end].split("\n"):
            if line.strip():
                spans.append((offset, offset + len(line)))
            offset += len(line) + 1
        if not spans:
            return [whole(block, self.kind, oversize=True)]
        return split_framed(block, ctx, self.kind, opener.group(1), closer.group(1), spans)


def math_balanced(text: str) -> bool:
    """Every `$$` paired and every `\\begin{env}` closed by its `\\end{env}`."""
    if text.count("$$") % 2:
        return False
    begins = re.findall(r"\\begin\{([^}\n]*)\}", text)
    ends = re.findall(r"\\end\{([^}\n]*)\}", text)
    return sorted(begins) == sorted(ends)
