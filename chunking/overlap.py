"""Overlap (SPEC §3.5): a paragraph or mixed chunk carries the tail of the previous chunk
of the same section, at most `overlap_tokens` and at most `overlap_max_share` of that
chunk, cut at a sentence boundary where possible. Stored beside the chunk, never in it."""

from __future__ import annotations

import re

from chunking.sentences import sentence_spans
from chunking.tokens import TokenCounter

# Enough characters for any overlap budget up to a few hundred tokens; sentence
# splitting only ever looks at this tail, so its cost does not grow with the chunk.
_TAIL_CHARS = 4000
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
    tail = previous_text[-_TAIL_CHARS:]
    spans = sentence_spans(tail)
    if len(tail) < len(previous_text) and len(spans) > 1:
        spans = spans[1:]  # the first span may be a cut sentence
    candidates = spans[-8:]
    counts = counter.count_many([tail[a:b] for a, b in candidates])
    used, start = 0, None
    for (a, _), n in zip(reversed(candidates), reversed(counts), strict=True):
        if used + n > budget:
            break
        used += n
        start = a
    if start is not None:
        return tail[start:].strip()
    # The last sentence alone is over budget: take its trailing words instead.
    last = tail[candidates[-1][0] :]
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
