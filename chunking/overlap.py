"""Overlap (SPEC §3.5): a paragraph or mixed chunk carries the tail of the previous chunk
of the same section, at most `overlap_tokens` and at most `overlap_max_share` of that
chunk, cut at a sentence boundary where possible. Stored beside the chunk, never in it."""

from __future__ import annotations

import re

from chunking.sentences import sentence_spans
from chunking.tokens import TokenCounter

# Characters of the previous chunk that can hold the overlap (a token is at least one
# character); sentence splitting only ever looks at this tail, so its cost stays flat.
_CHARS_PER_TOKEN_BOUND = 12
_WORD = re.compile(r"\S+")


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
    tail = previous_text[-max(600, budget * _CHARS_PER_TOKEN_BOUND) :]
    spans = sentence_spans(tail)
    if len(tail) < len(previous_text) and len(spans) > 1:
        spans = spans[1:]  # the first span may be a cut sentence
    used, start = 0, None
    for a, b in reversed(spans):  # whole sentences from the end while they fit
        used += counter.count(tail[a:b])
        if used > budget:
            break
        start = a
    if start is not None:
        return tail[start:].strip()
    # The last sentence alone is over budget: take its trailing words instead.
    last = tail[spans[-1][0] :]
    words = [m.start() for m in _WORD.finditer(last)]
    low, high = 0, len(words)
    best = ""
    while low < high:  # fewest leading words dropped that still fit
        mid = (low + high) // 2
        piece = last[words[mid] :].strip()
        if counter.count(piece) <= budget:
            best, high = piece, mid
        else:
            low = mid + 1
    return best
