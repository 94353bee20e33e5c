"""A chunk's parts: its text in pieces of whole sentences, lines, table row groups or code
line groups of at most `max_tokens`, each embedded on its own so that a search can score
the chunk by its best-matching part (the `dense_parts` multivector, compared by MaxSim).

A chunk's single vector averages everything it says; a question about one sentence of it
matches that sentence's vector far better. Parts are for embedding only: they are not
stored as text and change no chunk.

Units: a prose block (between blank lines) splits into sentences; a table, list or code
block into lines. Consecutive units join while their counts sum within `max_tokens` (the
limit is the embedder's, soft by the whitespace between units); a unit over it is cut
into token windows. Each part is the source text from its first unit to its last.
"""

from __future__ import annotations

import re

from chunking.chunker import context_header
from chunking.record import Chunk
from chunking.sentences import sentence_spans, window_spans
from chunking.tokens import TokenCounter

# Bumped when the same chunk would split into other parts (collections record the id).
PARTS_VERSION = 1

# A line that makes its block line-structured: a table row, a list item, a code fence or
# an indented code line.
_LINE_BLOCK = re.compile(r"^(?:\s*\||\s*(?:[-*+]|\d{1,9}[.)])\s|\s*(?:```|~~~)|    |\t)")
_BLOCK = re.compile(r"\S(?:.*\S)?(?:\n(?:[ \t]*\S.*))*", re.MULTILINE)
_LINE = re.compile(r"[^\n]*\S[^\n]*")
_WORDS = re.compile(r"\w")


class PartSplitter:
    """What a chunk's `dense_parts` vectors embed: its parts of at most `max_tokens`, each
    headed by the chunk's context header (title and headings), as its embed_text is."""

    def __init__(self, max_tokens: int, counter: TokenCounter) -> None:
        self.max_tokens = max_tokens
        self.counter = counter

    @property
    def id(self) -> str:
        """Names how parts are made; a collection whose parts were made otherwise is
        rebuilt by a re-index."""
        return f"parts-v{PARTS_VERSION}-{self.max_tokens}-{self.counter.name}"

    def texts(self, chunk: Chunk) -> list[str]:
        parts = chunk_parts(chunk.md_text, self.max_tokens, self.counter)
        header = context_header(chunk.document.get("title"), chunk.headings_path)
        return [f"{header}\n\n{part}" if header else part for part in parts]


def chunk_parts(md_text: str, max_tokens: int, counter: TokenCounter) -> list[str]:
    """The parts of `md_text`, in order; one part when it fits `max_tokens` whole."""
    return [md_text[a:b] for a, b in part_spans(md_text, max_tokens, counter)]


def part_spans(md_text: str, max_tokens: int, counter: TokenCounter) -> list[tuple[int, int]]:
    """Where each part of `md_text` lies in it (`chunk_parts`), trimmed of whitespace."""
    if not md_text.strip():
        return []
    units = _units(md_text)
    counts = counter.count_many([md_text[a:b] for a, b in units])
    spans: list[tuple[int, int]] = []
    start = end = used = 0
    for (a, b), count in zip(units, counts, strict=True):
        if count > max_tokens:
            if used:
                spans.append((start, end))
            spans += [(a + x, a + y) for x, y in window_spans(md_text[a:b], max_tokens, counter)]
            used = 0
            continue
        if used and used + count > max_tokens:
            spans.append((start, end))
            used = 0
        if not used:
            start = a
        end, used = b, used + count
    if used:
        spans.append((start, end))
    # A part of punctuation alone (a code fence, a table rule) says nothing to embed.
    return [_trimmed(md_text, a, b) for a, b in spans if _WORDS.search(md_text, a, b)]


def _trimmed(text: str, start: int, end: int) -> tuple[int, int]:
    piece = text[start:end]
    return start + len(piece) - len(piece.lstrip()), end - len(piece) + len(piece.rstrip())


def _units(text: str) -> list[tuple[int, int]]:
    """Sentence spans of prose blocks and line spans of line-structured blocks, in order."""
    units: list[tuple[int, int]] = []
    for block in _BLOCK.finditer(text):
        body = block.group()
        offset = block.start()
        if any(_LINE_BLOCK.match(line) for line in body.splitlines()):
            units += [(offset + m.start(), offset + m.end()) for m in _LINE.finditer(body)]
        else:
            units += [
                (offset + a, offset + len(body[:b].rstrip()))
                for a, b in sentence_spans(body)
                if body[a:b].strip()
            ]
    return units
