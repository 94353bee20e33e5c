"""The "nothing is lost" self-check (docs/sources.md#nothing-is-lost): the words of a source's own
text (a DOCX package's `w:t`, a deck's `a:t`, a workbook's strings, an HTML page's visible text)
against the words of the Markdown made from it.

A word is a maximal run of Unicode letters and digits, NFKC-normalized and lowercased,
so Markdown syntax (`#`, `|`, `-`, escapes such as `\\_`) is never a word. The check
compares word counts (a multiset), not order: it is linear, and order is the layout
layer's business. `bench/normalize.py` and the corpus tests measure recall against a
reference with the same `words`.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

# Words are runs of letters and digits: `\w` without "_", which is replaced first
# (twice as fast as the class [^\W_]).
_WORD = re.compile(r"\w+")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
# Emphasis and strike-through markers, which may sit inside a word.
_EMPHASIS = re.compile(r"[*~]")
# A file whose Markdown misses more than this share of its source's words is flagged.
MAX_LOST_SHARE = 0.02
_SHOWN = 8  # missing words named in a warning


def words(text: str) -> list[str]:
    """The words of `text` (HTML comments, such as Docling's image placeholders, skipped)."""
    text = _HTML_COMMENT.sub(" ", unicodedata.normalize("NFKC", text))
    return _WORD.findall(text.lower().replace("_", " "))


@dataclass(frozen=True)
class Loss:
    lost: int  # source words with no counterpart in the Markdown
    total: int  # source words
    examples: tuple[str, ...]  # some of the lost words, most frequent first

    @property
    def share(self) -> float:
        return self.lost / self.total if self.total else 0.0

    @property
    def significant(self) -> bool:
        return self.share > MAX_LOST_SHARE


def word_loss(source_texts: Iterable[str], markdown: str) -> Loss:
    """How many words of the source texts the Markdown lacks (counted with repeats)."""
    source: Counter[str] = Counter()
    for text in source_texts:
        source.update(_WORD.findall(text.lower().replace("_", " ")))
    # Both sides come from the same text, so no Unicode normalization; "**t**wo" is the
    # word "two".
    found = Counter(_WORD.findall(_EMPHASIS.sub("", markdown).lower().replace("_", " ")))
    missing = source - found
    examples = tuple(word for word, _ in missing.most_common(_SHOWN))
    return Loss(sum(missing.values()), sum(source.values()), examples)


def loss_warning(loss: Loss, what: str) -> str | None:
    """A warning naming the loss when it is over `MAX_LOST_SHARE`, else None."""
    if not loss.significant:
        return None
    return (
        f"the Markdown lacks {loss.lost} of the {loss.total} words of {what} "
        f"({loss.share:.1%}), e.g. {', '.join(loss.examples)}"
    )
