"""Rule-based sentence boundaries (razdel: Russian and English) and token windows.

Spans partition their text: each sentence span runs to the next sentence's start, so
the whitespace between sentences belongs to the sentence before it and nothing is lost.
A pipe-table row the parser left in a paragraph (no delimiter row) is one unit of its
own: a row is never cut at a sentence boundary inside it.
"""

from __future__ import annotations

import re

import razdel

from chunking.tokens import TokenCounter

_WORD = re.compile(r"\S+\s*")
_ROW_LINE = re.compile(r"^[ \t]*\|.*$", re.MULTILINE)


# Abbreviations after which razdel (written for Russian) ends a sentence that goes on.
# These never end one: Latin, titles before a name, references ("Fig. 2", "см. рис. 3").
_NEVER_FINAL = frozenset(
    re.findall(r"\S+", "e.g. i.e. cf. viz. vs. fig. figs. eq. eqs. ref. refs. dr. mr. mrs.")
    + re.findall(r"\S+", "ms. prof. рис. см. т.е. т.к. напр.")
)
# These end a sentence unless a number or a lowercase word follows: "et al. 1999",
# "p. 12", "no. 5" (but "the answer was no. Then").
_BEFORE_NUMBER = frozenset(
    re.findall(r"\S+", "al. no. nos. p. pp. vol. sec. ch. tab. approx. стр.")
)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Sentence spans over `text` (offsets relative to it), covering it end to end."""
    starts = [s.start for s in razdel.sentenize(text)]
    if not starts:
        return [(0, len(text))] if text else []
    starts[0] = 0
    starts = [start for start in starts if not _goes_on(text, start)]
    if "|" in text:
        starts = _whole_rows(text, starts)
    return [(a, b) for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]


def _goes_on(text: str, start: int) -> bool:
    """razdel put a sentence start where the sentence goes on: after a semicolon or comma,
    or after an abbreviation that does not end this sentence."""
    before = text[:start].rstrip()
    if not before:
        return False
    if before[-1] in ";,":
        return True
    last_word = before.rsplit(None, 1)[-1].lstrip("([\"'«").casefold()
    if last_word in _NEVER_FINAL:
        return True
    follows = text[start : start + 1]
    return last_word in _BEFORE_NUMBER and (follows.isdigit() or follows.islower())


def _whole_rows(text: str, starts: list[int]) -> list[int]:
    """Sentence starts with none inside a table row, and every row starting a unit."""
    rows = [(m.start(), m.end()) for m in _ROW_LINE.finditer(text)]
    if not rows:
        return starts
    inside: set[int] = set()
    added = set(starts)
    row_index = 0
    for start in starts:
        while row_index < len(rows) and rows[row_index][1] < start:
            row_index += 1
        if row_index < len(rows) and rows[row_index][0] < start <= rows[row_index][1]:
            inside.add(start)
    for a, b in rows:
        added.add(a)
        if b + 1 < len(text):
            added.add(b + 1)
    return sorted(added - inside | {0})


def window_spans(text: str, budget: int, counter: TokenCounter) -> list[tuple[int, int]]:
    """Cut `text` into spans of at most `budget` tokens: between words where possible
    (counts add up exactly at whitespace), inside a word only when one word is too long."""
    words = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    if not words:
        return [(0, len(text))] if text else []
    words[0] = (0, words[0][1])
    counts = counter.count_many([text[a:b] for a, b in words])
    spans: list[tuple[int, int]] = []
    start, used = words[0][0], 0
    for (a, b), n in zip(words, counts, strict=True):
        if n > budget:
            if used:
                spans.append((start, a))
            spans.extend(_split_word(text, a, b, budget, counter))
            start, used = b, 0
            continue
        if used and used + n > budget:
            spans.append((start, a))
            start, used = a, 0
        used += n
    if start < len(text) and (used or text[start:].strip()):
        spans.append((start, len(text)))
    elif spans:
        spans[-1] = (spans[-1][0], len(text))
    return spans


def _split_word(
    text: str, start: int, end: int, budget: int, counter: TokenCounter
) -> list[tuple[int, int]]:
    """Longest prefixes within `budget`, found by bisection on the character count."""
    spans = []
    while start < end:
        if counter.count(text[start:end]) <= budget:
            spans.append((start, end))
            break
        low, high = start + 1, end
        while low < high:
            mid = (low + high + 1) // 2
            if counter.count(text[start:mid]) <= budget:
                low = mid
            else:
                high = mid - 1
        spans.append((start, low))
        start = low
    return spans
