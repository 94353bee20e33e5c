"""Contextual BM25 for the `lexical` sparse vector (docs/qdrant.md#lexical-retrieval): pure,
deterministic, no model, the same terms on every machine and in every process.

A text's terms: its Unicode word tokens (letters, digits, `_`), lowercased with ё read as
е; an identifier joined by underscores (`max_tokens`) also gives its parts, so a query in
words finds the option and a query naming it finds it exactly. Stop words of the word's
language are dropped. A word is stemmed by the Snowball stemmer of its script (Cyrillic:
Russian, Latin: English) when `lexical.languages` lists that language; digits, ids and
other scripts are kept as they are. A term is cut to `max_term_chars` and its id is the
unsigned 32-bit MurmurHash3 (seed 0) of its UTF-8 bytes.

Documents weigh each term by BM25's term-frequency part,
`tf·(k1+1) / (tf + k1·(1−b+b·len/avg_len))` with `len` the text's term count; a query
weighs each distinct term 1. Qdrant multiplies by the inverse document frequency
(`Modifier.IDF` on the collection's `lexical` vector), so the dot product is BM25.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache, cached_property
from importlib.resources import files
from types import MappingProxyType

import mmh3
import Stemmer

from config.settings import Language, LexicalSettings
from stage_cache.keys import config_hash

# Bump when the terms or weights of a text change for the same settings: it is part of
# every lexical cache key and of a collection's recorded lexical id.
LEXICAL_VERSION = "1"

_WORD = re.compile(r"\w+")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_LATIN = re.compile(r"[a-z\u00df-\u024f]")
_STEMMER_NAMES = MappingProxyType({"en": "english", "ru": "russian"})

SparseWeights = dict[int, float]


@cache
def stop_words(language: Language) -> frozenset[str]:
    """The Snowball stop words of a language (indexing/stopwords/, BSD licence)."""
    text = files("indexing").joinpath(f"stopwords/{_STEMMER_NAMES[language]}.txt")
    words = (line.split("|", 1)[0].strip() for line in text.read_text("utf-8").splitlines())
    return frozenset(word for word in words if word)


def term_id(term: str) -> int:
    """A term's sparse index: stable across processes, machines and versions."""
    return int(mmh3.hash(term.encode("utf-8"), 0, signed=False))


@dataclass(frozen=True)
class LexicalEncoder:
    settings: LexicalSettings
    # Snowball stemmers are not thread-safe: each thread stems with its own.
    _local: threading.local = field(
        default_factory=threading.local, init=False, repr=False, compare=False
    )

    @cached_property
    def id(self) -> str:
        """What produced a lexical vector: part of its cache key and of the collection's
        metadata, so a change of settings or version is never mixed up with the old."""
        return f"bm25-v{LEXICAL_VERSION}-{config_hash(self.settings)[:16]}"

    def _stemmers(self) -> dict[str, Stemmer.Stemmer]:
        stemmers: dict[str, Stemmer.Stemmer] | None = getattr(self._local, "stemmers", None)
        if stemmers is None:
            languages = self.settings.languages
            stemmers = {lang: Stemmer.Stemmer(_STEMMER_NAMES[lang]) for lang in languages}
            self._local.stemmers = stemmers
        return stemmers

    @cached_property
    def _stop_words(self) -> frozenset[str]:
        return frozenset().union(*(stop_words(lang) for lang in self.settings.languages))

    def terms(self, text: str) -> list[str]:
        """The text's terms in order, repeats kept."""
        return list(self._terms(text))

    def _terms(self, text: str) -> Iterator[str]:
        cut = self.settings.max_term_chars
        stemmers = self._stemmers()
        for token in _WORD.findall(text.lower().replace("ё", "е")):
            word = token.strip("_")
            if not word:
                continue
            if "_" in word:
                yield word[:cut]
                for part in word.split("_"):
                    if part:
                        yield from self._word_term(part, cut, stemmers)
            else:
                yield from self._word_term(word, cut, stemmers)

    def _word_term(
        self, word: str, cut: int, stemmers: dict[str, Stemmer.Stemmer]
    ) -> Iterator[str]:
        if word in self._stop_words:
            return
        language = "ru" if _CYRILLIC.search(word) else "en" if _LATIN.search(word) else None
        stemmer = stemmers.get(language) if language else None
        yield (stemmer.stemWord(word) if stemmer else word)[:cut]

    def encode(self, text: str) -> SparseWeights:
        """A document's (a chunk's embed_text) BM25 term-frequency weights by term id;
        empty for a text without terms."""
        counts = Counter(term_id(term) for term in self._terms(text))
        length = sum(counts.values())
        k1, b = self.settings.k1, self.settings.b
        norm = k1 * (1 - b + b * length / self.settings.avg_len)
        return {term: tf * (k1 + 1) / (tf + norm) for term, tf in sorted(counts.items())}

    def encode_query(self, text: str) -> SparseWeights:
        """A query's weights: 1 for each distinct term (IDF comes from the collection)."""
        return dict.fromkeys(sorted({term_id(term) for term in self._terms(text)}), 1.0)
