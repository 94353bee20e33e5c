"""Overlap (docs/chunking.md#overlap): a paragraph or mixed chunk carries the tail of the previous
chunk of the same section, at most `overlap_tokens` and at most `overlap_max_share` of that
chunk, starting at a sentence, line or list-item start: never inside a word, a list
line, a formula or a table row. Stored beside the chunk, never in it.

`overlap_start_ok` is the rule itself; the validator checks overlaps with it.
"""

from __future__ import annotations

import bisect
import re

from chunking.tokens import TokenCounter

# Characters of the previous chunk that can hold the overlap (a token is at least one
# character): only this tail is searched, so the cost stays flat.
_CHARS_PER_TOKEN_BOUND = 12
_SENTENCE_END = re.compile(r"[.!?…][\"'»”’)\]]*[ \t]+")
_LIST_OR_ROW = re.compile(r"[ \t]*(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)|[ \t]*\||[ \t]")
_CLOSERS = "\"'»”’)]"
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})", re.MULTILINE)


def overlap_start_ok(text: str, position: int) -> bool:
    """May an overlap taken from `text` start at `position`?"""
    if not 0 <= position < len(text) or text[position].isspace():
        return False
    if _inside_math(text, position) or _inside_fence(text, position):
        return False
    line_start = text.rfind("\n", 0, position) + 1
    if not text[line_start:position].strip():
        return True  # the start of a line (or of a list item)
    line = text[line_start : text.find("\n", position) if "\n" in text[position:] else len(text)]
    if _LIST_OR_ROW.match(line):
        return False  # never mid list-line, never inside a table row (or an indented line)
    if not text[position - 1].isspace() or text[position].islower():
        return False
    before = text[line_start:position].rstrip().rstrip(_CLOSERS)
    return before.endswith((".", "!", "?", "…"))


def _inside_fence(text: str, position: int) -> bool:
    """Inside a fenced code block (one nested in a list item of a mixed chunk)."""
    if text.find("```", 0, position) == -1 and text.find("~~~", 0, position) == -1:
        return False
    fence = ""
    for match in _FENCE.finditer(text, 0, position):
        marker = match.group(1)
        if not fence:
            fence = marker
        elif marker[0] == fence[0] and len(marker) >= len(fence):
            fence = ""
    return bool(fence)


def _inside_math(text: str, position: int) -> bool:
    if text.count("$$", 0, position) % 2:
        return True
    begins = text.count("\\begin{", 0, position)
    return begins > 0 and begins > text.count("\\end{", 0, position)


def overlap_prefix(
    previous_text: str,
    previous_tokens: int,
    overlap_tokens: int,
    max_share: float,
    counter: TokenCounter,
) -> str:
    budget = min(overlap_tokens, int(previous_tokens * max_share))
    if budget <= 0 or not previous_text.strip():
        return ""
    offset = max(0, len(previous_text) - max(600, budget * _CHARS_PER_TOKEN_BOUND))
    tail = previous_text[offset:]
    candidates = sorted(
        {offset + m.end() for m in _SENTENCE_END.finditer(tail)}
        | {offset + i + 1 for i, ch in enumerate(tail) if ch == "\n"}
    )
    starts = [p for p in candidates if overlap_start_ok(previous_text, p)]
    # The earliest start whose suffix fits: suffixes shrink as the start moves right.
    low = bisect.bisect_left(starts, offset)
    high = len(starts)
    best = ""
    while low < high:
        middle = (low + high) // 2
        suffix = previous_text[starts[middle] :].strip()
        if counter.count(suffix) <= budget:
            best, high = suffix, middle
        else:
            low = middle + 1
    return best
