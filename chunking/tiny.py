"""Chunks under 50 tokens (docs/chunking.md#short-chunks): such a chunk is allowed only where it is
the whole document or sits between two hard breaks of its source (a slide, a sheet), which
no merge crosses; anywhere else it counts against the chunker, whatever its
`undersize_reason`."""

from __future__ import annotations

from collections.abc import Sequence

from chunking.record import Chunk
from markdown_text import HARD_BREAKS

TINY_TOKENS = 50


def tiny_allowance(chunks: Sequence[Chunk], index: int) -> str | None:
    """Why `chunks[index]` (a chunk of one document, in order) may be under
    `TINY_TOKENS`: `whole_document`, `between_hard_breaks` (its slide or sheet is
    neither the previous chunk's nor the next's: a document's edge is a break too, in
    a document that has such breaks); None when it may not."""
    if len(chunks) == 1:
        return "whole_document"
    chunk = chunks[index]
    before = chunks[index - 1] if index else None
    after = chunks[index + 1] if index + 1 < len(chunks) else None
    for field in HARD_BREAKS:
        value = getattr(chunk, field)
        if value is None:
            continue
        if all(other is None or getattr(other, field) != value for other in (before, after)):
            return "between_hard_breaks"
    return None
