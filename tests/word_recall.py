"""Word recall against a reference Markdown, for the corpus tests of every format.

One implementation serves tests and benchmark: `bench/normalize.py` holds it (exact
longest-common-subsequence recall of the reference's words, the words of
`normalizers.selfcheck`); this module is the name the tests import it by.
"""

from __future__ import annotations

from bench.normalize import word_recall
from normalizers.selfcheck import words

__all__ = ["word_recall", "words"]
