"""Word recall of a conversion against a reference Markdown (the Docling corpus).

Recall = share of the reference's words found in ours *in order* (the size of a common
subsequence of the two word sequences over the reference's length). Markup is not
words, and Docling's `<!-- image -->` style placeholders are dropped from the reference.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

_WORD = re.compile(r"\w+")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)


def words(markdown: str) -> list[str]:
    return _WORD.findall(_HTML_COMMENT.sub(" ", markdown).lower())


def word_recall(reference: str, ours: str) -> float:
    """Share of reference words matched in order (1.0 for an empty reference)."""
    ref, got = words(reference), words(ours)
    if not ref:
        return 1.0
    # Matching blocks form a common subsequence: a lower bound of the LCS, near it here.
    matcher = SequenceMatcher(None, ref, got, autojunk=False)
    return sum(block.size for block in matcher.get_matching_blocks()) / len(ref)
