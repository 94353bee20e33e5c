"""Chroma's public chunking benchmark, searched the way the product searches (run by hand):
`.venv/bin/python -m bench.chunking_evaluation`.

Data: brandonstarxel/chunking_evaluation (MIT, `bench/data/chunking_evaluation/`): 472
questions over 5 corpora, each with reference excerpts at character offsets of its corpus.
Its logic, rewritten here: every piece is placed where the benchmark's
`rigorous_document_search` places it, at the first copy of its text in its corpus (less
one final full stop; the exact text, else the same words whatever the whitespace, case
ignored); a question's recall is the share of its excerpts' characters that the retrieved
pieces of its corpus cover. Beside it, the bench's own placement ("in order": windows at
their true offsets, other pieces searched for from where the previous piece stands),
which credits a repeated passage only where the piece really is; the benchmark's other
reading, "any copy" (a reference is credited whole where a piece holds any copy of its
text, whitespace and case aside, as a passage of several chunks placed where its whole
text stands may hold a later copy of a reference written on the first); and a departure
that sets
piece boundaries aside ("boundaries aside": each piece at its first copy with its final
full stop kept, and the excerpts' whitespace not counted), since a piece that ends on a
sentence loses that full stop and the space after it, which no stripped piece holds.

Methods, in one run, with one embedder (the quickstart's all-MiniLM-L6-v2 through the
project's embedder: a text over its window is embedded window by window, as a run does):
- `product`: each corpus normalized and chunked by this checkout at the default budgets,
  written to a collection of the embedded store (Qdrant Edge by default) by
  `QdrantStore.upsert` and searched by
  `indexing.search` in its default mode (hybrid of every vector the collection holds) and
  densely, its results shaped as the configured search shapes them (`search.expand`:
  passages by default, a result of several chunks a piece of its own text and tokens);
- baselines over the raw corpora: 1,000/200-character windows and the benchmark's
  RecursiveTokenChunker (separators blank line, line, sentence ends, space; no overlap) at
  400 and 200 BGE-M3 tokens, each searched densely (exact cosine) and hybrid: plain BM25
  (lowercase words, a few stop words, k1 1.2, b 0.75) over its pieces fused with its dense
  ranking by reciprocal rank fusion (k = 2, top 50 of each). The benchmark has no BM25;
  the stop words are the bench's own list (`STOP_WORDS`).

Reported per method: pieces, mean BGE-M3 tokens, recall@5, recall of the best-ranked
pieces that fit a 1,000- and a 2,000-token context (in rank order, stopping before the first
that would overflow), per corpus too, each by the benchmark's placement and in order; and,
per question by the benchmark's placement, the product against every baseline (won/lost
on each measure and the sign test's two-sided p). `--half` reports one fixed half of the
questions (`bench/halves.py`); every question is still searched and saved.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench import halves, retrieval, saved_runs
from bench.retrieval import MemoEmbedder
from chunking import Chunk, DocumentInfo, chunk_document
from chunking.parts import PartSplitter
from chunking.tokens import get_token_counter
from config.settings import EmbedderSettings, load_settings
from indexing.embed_cache import embed_with_cache
from indexing.embedders import BgeM3Embedder, Embedding
from indexing.lexical import LexicalEncoder
from indexing.search import ResultShape, SearchHit, SearchMode, search
from query.paired import sign_test
from stage_cache.store import StageCache

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "data" / "chunking_evaluation"
CONTEXTS = (1000, 2000)
RETRIEVED = 40  # enough ranked pieces to fill the largest context
RRF_K, RRF_DEPTH = 2, 50
# The product's default search (auto: hybrid of the vectors its collection holds), and dense.
PRODUCT_MODES: dict[str, SearchMode] = {"hybrid": "auto", "dense": "dense"}
BM25_K1, BM25_B = 1.2, 0.75
# The bench's own list: the benchmark has no BM25 to take one from.
STOP_WORDS = frozenset(
    re.findall(r"\w+", "a an and are as at be by for from has have in is it its of on or")
    + re.findall(r"\w+", "that the this to was were what which who with")
)


Span = tuple[int, int]


@dataclass(frozen=True)
class Question:
    text: str
    corpus: str
    references: tuple[Span, ...]
    solid: tuple[Span, ...]  # the references less their whitespace (boundaries aside)
    words: tuple[str, ...] = ()  # each reference's text, whitespace and case aside

    @property
    def key(self) -> str:
        """What its half (`bench/halves.py`) is drawn from."""
        return f"{self.corpus}/{self.text}"


NOWHERE: Span = (-1, -1)  # a piece not found: covers nothing, still takes its room
FIRST_COPY, ANY_COPY = "first copy", "any copy"
IN_ORDER, BOUNDARIES_ASIDE = "in order", "boundaries aside"


@dataclass(frozen=True)
class Piece:
    corpus: str
    first_copy: Span  # where the benchmark places it: the first copy of its text
    stop_kept: Span  # the first copy with the full stop the benchmark drops
    in_order: Span  # where it really stands (windows) or is found searching on in order
    text: str  # what a reader gets back
    embed_text: str  # what the embedder sees
    tokens: int

    @classmethod
    def placed(
        cls, name: str, corpus: str, in_order: Span, text: str, embed_text: str, tokens: int
    ) -> Piece:
        """A piece of `corpus` (named `name`) with its first copy found."""
        start, end = first_copy(corpus, text)
        kept = (
            end + 1 if start >= 0 and text.endswith(".") and corpus[end : end + 1] == "." else end
        )
        return cls(name, (start, end), (start, kept), in_order, text, embed_text, tokens)

    def span(self, placement: str) -> Span:
        return {
            FIRST_COPY: self.first_copy,
            ANY_COPY: self.first_copy,
            BOUNDARIES_ASIDE: self.stop_kept,
        }.get(placement, self.in_order)


@dataclass(frozen=True)
class Retrieved:
    corpus: str
    start: int
    end: int
    tokens: int
    words: str = ""  # any copy: its text, whitespace and case aside


class CachedEmbedder(MemoEmbedder):
    """The model, each text embedded once whatever method or run carries it: vectors kept
    in the product's embedding cache under `.ingest/bench-cache` (a variant of one method
    costs only its new texts)."""

    def __init__(self, inner: BgeM3Embedder, cache: StageCache) -> None:
        super().__init__(inner)
        self.cache = cache

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.known))
        if len(missing) > 1:
            _progress(f"embedding {len(missing)} texts (cached ones are read)")
        for text, embedding in zip(
            missing, embed_with_cache(self.inner, missing, self.cache).values, strict=True
        ):
            self.known[text] = embedding
        return [self.known[t] for t in texts]


def _progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def load_questions() -> list[Question]:
    corpora = load_corpora()
    questions = []
    with (DATA / "questions_df.csv").open(encoding="utf-8", newline="") as handle:
        for row in csv.DictReader(handle):
            references = tuple(
                (int(r["start_index"]), int(r["end_index"])) for r in json.loads(row["references"])
            )
            corpus = corpora[row["corpus_id"]]
            solid = tuple(
                (start + match.start(), start + match.end())
                for start, end in references
                for match in re.finditer(r"\S+", corpus[start:end])
            )
            words = tuple(_words(corpus[start:end]) for start, end in references)
            questions.append(Question(row["question"], row["corpus_id"], references, solid, words))
    return questions


def _words(text: str) -> str:
    return " ".join(text.split()).casefold()


def load_corpora() -> dict[str, str]:
    return {
        path.stem: path.read_text(encoding="utf-8")
        for path in sorted((DATA / "corpora").glob("*.md"))
    }


# --- locating a piece in its corpus (the benchmark's rigorous_document_search) ---------


def locate(corpus: str, text: str, after: int) -> Span | None:
    """Where `text` stands in `corpus`, looked for from `after` on: the exact text, else
    its words with any whitespace between them, case ignored."""
    text = text.strip()
    found = corpus.find(text, after)
    if found >= 0:
        return found, found + len(text)
    words = text.split()
    if not words:
        return None
    pattern = re.compile(r"\s*".join(re.escape(w) for w in words), re.IGNORECASE)
    match = pattern.search(corpus, after)
    return match.span() if match else None


def locate_loosely(corpus: str, text: str, after: int) -> Span | None:
    """A piece whose text the normalizer changed (Markdown escapes, a heading's marks): from
    where its first words stand to where its last words end."""
    words = text.split()
    for size in (8, 5, 3):
        if len(words) < size:
            continue
        head = locate(corpus, " ".join(words[:size]), after)
        tail = locate(corpus, " ".join(words[-size:]), head[0] if head else after)
        if head and tail and tail[1] > head[0] and tail[1] - head[0] < 3 * len(text) + 200:
            return head[0], tail[1]
    return None


def first_copy(corpus: str, text: str) -> Span:
    """Where the benchmark's `rigorous_document_search` places a piece: its text less one
    final full stop, at its first copy in the corpus, exact or whitespace aside (its
    fuzzy match of a changed sentence stands here as the first and last words)."""
    target = text[:-1] if text.endswith(".") else text
    found = corpus.find(target)
    if found >= 0:
        return found, found + len(target)
    return locate(corpus, target, 0) or locate_loosely(corpus, text, 0) or NOWHERE


# --- pieces ------------------------------------------------------------------------------


def product_chunks(corpora: dict[str, str], settings: Any) -> list[Chunk]:
    from tasks.stages import local_file_source, normalize_source

    chunks: list[Chunk] = []
    for name in corpora:
        path = DATA / "corpora" / f"{name}.md"
        normalized = normalize_source(local_file_source(path), settings.limits)
        info = DocumentInfo(document_id=name, title=normalized.title or path.name)
        chunks += chunk_document(
            normalized.markdown,
            info,
            settings.chunking,
            anchors=normalized.anchors,
            normalized=True,
        ).chunks
    return chunks


def located_pieces(
    corpora: dict[str, str], chunks: Sequence[Chunk]
) -> tuple[list[Piece], Counter[str]]:
    """Each chunk where it stands in its raw corpus (in order: searched for from where the
    previous one stands) and at its first copy; `how` counts how the in-order search
    found them."""
    pieces: list[Piece] = []
    how: Counter[str] = Counter()
    after: dict[str, int] = {}
    for chunk in chunks:
        corpus = corpora[chunk.document_id]
        start = after.get(chunk.document_id, 0)
        span = locate(corpus, chunk.md_text, start)
        if span is not None:
            how["exact or whitespace"] += 1
        else:
            span = locate_loosely(corpus, chunk.md_text, start)
            how["first and last words" if span else "not found"] += 1
        if span is not None:
            after[chunk.document_id] = span[0]
        pieces.append(
            Piece.placed(
                chunk.document_id,
                corpus,
                span or NOWHERE,
                chunk.md_text,
                chunk.embed_text,
                chunk.token_count,
            )
        )
    return pieces, how


def window_pieces(corpora: dict[str, str], count: Callable[[str], int]) -> list[Piece]:
    size, overlap = 1000, 200
    pieces = []
    for name, text in corpora.items():
        for start in range(0, max(len(text) - overlap, 1), size - overlap):
            window = text[start : start + size]
            if window.strip():
                pieces.append(
                    Piece.placed(
                        name,
                        text,
                        (start, start + len(window)),
                        window,
                        window,
                        count(window),
                    )
                )
    return pieces


_SEPARATORS = ("\n\n", "\n", ".", "?", "!", " ", "")


def _split_keeping(text: str, separator: str) -> list[str]:
    """Split before each separator, the separator starting the next part (as the
    benchmark's splitter keeps separators)."""
    if not separator:
        return list(text)
    parts = re.split(f"({re.escape(separator)})", text)
    joined = [parts[0]] + [parts[i] + parts[i + 1] for i in range(1, len(parts) - 1, 2)]
    if len(parts) % 2 == 0:
        joined.append(parts[-1])
    return [p for p in joined if p]


def recursive_token_chunks(
    text: str, size: int, count: Callable[[str], int], separators: Sequence[str] = _SEPARATORS
) -> list[str]:
    """The benchmark's RecursiveTokenChunker (LangChain's recursive splitter) with no
    overlap: split at the first separator the text has, merge the parts up to `size`
    tokens, split a part over it again at the next separator."""
    separator, rest = separators[-1], list[str]()
    for index, candidate in enumerate(separators):
        if candidate == "" or candidate in text:
            separator, rest = candidate, list(separators[index + 1 :])
            break
    chunks: list[str] = []
    good: list[str] = []
    for part in _split_keeping(text, separator):
        if count(part) < size:
            good.append(part)
            continue
        chunks += _merge(good, size, count)
        good = []
        chunks += recursive_token_chunks(part, size, count, rest) if rest else [part]
    return chunks + _merge(good, size, count)


def _merge(parts: Sequence[str], size: int, count: Callable[[str], int]) -> list[str]:
    merged: list[str] = []
    current: list[str] = []
    total = 0
    for part in parts:
        length = count(part)
        if current and total + length > size:
            joined = "".join(current).strip()
            if joined:
                merged.append(joined)
            current, total = [], 0
        current.append(part)
        total += length
    joined = "".join(current).strip()
    return [*merged, joined] if joined else merged


def token_chunker_pieces(
    corpora: dict[str, str], size: int, count: Callable[[str], int]
) -> list[Piece]:
    pieces = []
    for name, text in corpora.items():
        after = 0
        for chunk in recursive_token_chunks(text, size, count):
            span = locate(text, chunk, after)
            if span is None:
                raise ValueError(f"a {size}-token piece of {name} is not in it: {chunk[:80]!r}")
            after = span[0]
            pieces.append(Piece.placed(name, text, span, chunk, chunk, count(chunk)))
    return pieces


# --- searching the baselines ----------------------------------------------------------------


def bm25_terms(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.lower()) if w not in STOP_WORDS]


class Bm25:
    def __init__(self, texts: Sequence[str]) -> None:
        self.docs = [Counter(bm25_terms(t)) for t in texts]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.avg = statistics.mean(self.lengths)
        frequency: Counter[str] = Counter()
        for doc in self.docs:
            frequency.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}
        self.postings: dict[str, list[int]] = {}
        for index, doc in enumerate(self.docs):
            for term in doc:
                self.postings.setdefault(term, []).append(index)

    def rank(self, query: str, depth: int) -> list[int]:
        scores: dict[int, float] = {}
        for term in set(bm25_terms(query)):
            for index in self.postings.get(term, ()):
                tf = self.docs[index][term]
                norm = BM25_K1 * (1 - BM25_B + BM25_B * self.lengths[index] / self.avg)
                scores[index] = scores.get(index, 0.0) + self.idf[term] * tf * (BM25_K1 + 1) / (
                    tf + norm
                )
        return sorted(scores, key=lambda i: -scores[i])[:depth]


def rrf(rankings: Sequence[Sequence[int]], depth: int) -> list[int]:
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, index in enumerate(ranking):
            scores[index] = scores.get(index, 0.0) + 1 / (RRF_K + rank + 1)
    return sorted(scores, key=lambda i: -scores[i])[:depth]


def baseline_rankings(
    pieces: Sequence[Piece], questions: Sequence[Question], embedder: MemoEmbedder
) -> dict[str, list[list[int]]]:
    matrix = np.array([e.dense for e in embedder.embed([p.embed_text for p in pieces])])
    queries = np.array([e.dense for e in embedder.embed([q.text for q in questions])])
    similarity = queries @ matrix.T
    bm25 = Bm25([p.text for p in pieces])
    dense, hybrid = [], []
    for row, question in zip(similarity, questions, strict=True):
        by_dense = [int(i) for i in np.argsort(-row)[:RRF_DEPTH]]
        dense.append(by_dense[:RETRIEVED])
        hybrid.append(rrf([by_dense, bm25.rank(question.text, RRF_DEPTH)], RETRIEVED))
    return {"dense": dense, "hybrid": hybrid}


# --- searching the product ------------------------------------------------------------------


def product_rankings(
    corpora: dict[str, str],
    chunks: Sequence[Chunk],
    pieces: Sequence[Piece],
    questions: Sequence[Question],
    embedder: MemoEmbedder,
    lexical: LexicalEncoder,
    root: Path,
    parts: PartSplitter | None,
) -> dict[str, list[Ranked]]:
    """The chunks written as a run writes them and searched by the product's search, its
    results shaped as the configured search shapes them (`search.expand`): for recall@5
    asked for 5 results, for each context asked for its tokens (`tokens`: the best hits
    until the next would overflow, the measure's own rule, joined where they touch). A
    result of one chunk is that chunk's piece, a passage a piece of its own text."""
    name = "parts" if parts else "plain"
    _progress(f"indexing the product's {len(chunks)} chunks ({name})")
    store = retrieval.index(name, chunks, embedder, lexical, root, parts)
    _progress("searching the product")
    # The questions in one batch: one at a time (as each search asks) pays the model's
    # per-call cost 472 times, minutes on a busy machine.
    embedder.embed([question.text for question in questions])
    position = {chunk.chunk_id: i for i, chunk in enumerate(chunks)}
    shape = ResultShape.of(load_settings().search)

    def piece(hit: SearchHit) -> Piece:
        if not hit.context:
            return pieces[position[hit.chunk_id]]
        first, last = (
            pieces[position[str(c["chunk_id"])]] for c in (hit.context[0], hit.context[-1])
        )
        in_order = (first.in_order[0], last.in_order[1])
        corpus = corpora[hit.document_id]
        return Piece.placed(hit.document_id, corpus, in_order, hit.text, "", hit.tokens)

    def results(
        question: Question, mode: SearchMode, limit: int, tokens: int | None
    ) -> list[Piece]:
        hits = search(
            store,
            embedder,
            question.text,
            limit=limit,
            mode=mode,
            lexical=lexical,
            expand=shape.expand,
            expand_tokens=shape.expand_tokens,
            grow_tokens=shape.grow_tokens,
            tokens=tokens,
        )
        return [piece(hit) for hit in hits]

    found = {
        name: [
            {
                "recall@5": results(question, mode, 5, None),
                **{f"within {c}": results(question, mode, RETRIEVED, c) for c in CONTEXTS},
            }
            for question in questions
        ]
        for name, mode in PRODUCT_MODES.items()
    }
    store.connection.close()
    return found


def embedding_cost(
    chunks: Sequence[Chunk], splitter: PartSplitter, embedder: MemoEmbedder, sample: int = 200
) -> dict[str, Any]:
    """What parts add to a first run's embedding: BGE-M3 tokens of every chunk's embed_text
    and of its part texts, and the model's seconds for an evenly spread sample of chunks,
    embedded without any cache, with and without their parts."""
    part_texts = [splitter.texts(chunk) for chunk in chunks]
    count = splitter.counter.count
    chunk_tokens = sum(count(c.embed_text) for c in chunks)
    part_tokens = sum(count(t) for texts in part_texts for t in texts)
    picked = list(range(0, len(chunks), max(1, len(chunks) // sample)))
    started = time.perf_counter()
    embedder.inner.embed([chunks[i].embed_text for i in picked])
    plain = time.perf_counter() - started
    started = time.perf_counter()
    embedder.inner.embed([t for i in picked for t in part_texts[i]])
    extra = time.perf_counter() - started
    return {
        "parts per chunk": round(sum(map(len, part_texts)) / len(chunks), 2),
        "tokens ratio": round((chunk_tokens + part_tokens) / chunk_tokens, 2),
        "seconds ratio (sample)": round((plain + extra) / plain, 2),
        "sample chunks": len(picked),
    }


# --- scoring (the benchmark's recall) --------------------------------------------------------


def _union(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def recall(question: Question, retrieved: Sequence[Retrieved]) -> float:
    """The share of the question's reference characters the pieces cover where they are
    placed; a piece that carries `words` (any copy) covers a whole reference whose text it
    holds, wherever the copy it holds stands."""
    covered = []
    for piece in retrieved:
        if piece.corpus != question.corpus:
            continue
        for number, (start, end) in enumerate(question.references):
            if piece.words and question.words[number] in piece.words:
                covered.append((start, end))
                continue
            low, high = max(start, piece.start), min(end, piece.end)
            if low < high:
                covered.append((low, high))
    total = sum(end - start for start, end in _union(question.references))
    return sum(end - start for start, end in _union(covered)) / total


def within(retrieved: Sequence[Retrieved], budget: int) -> list[Retrieved]:
    taken, used = [], 0
    for piece in retrieved:
        if used + piece.tokens > budget:
            break
        taken.append(piece)
        used += piece.tokens
    return taken


MEASURES = ("recall@5", *(f"within {c}" for c in CONTEXTS))
# What a method returned for a question, per measure: a baseline's one ranked list for
# every measure; the product's search asked for 5 results, and for each context's tokens.
Ranked = dict[str, list["Piece"]]


def scores(question: Question, retrieved: dict[str, list[Retrieved]]) -> dict[str, float]:
    return {
        "recall@5": recall(question, retrieved["recall@5"][:5]),
        **{f"within {c}": recall(question, within(retrieved[f"within {c}"], c)) for c in CONTEXTS},
    }


# Each measure by the benchmark's placement under its own name, the others beside it.
PLACEMENTS = {
    FIRST_COPY: "",
    ANY_COPY: " any copy",
    IN_ORDER: " in order",
    BOUNDARIES_ASIDE: " boundaries aside",
}
DEPARTURES = (ANY_COPY, IN_ORDER, BOUNDARIES_ASIDE)


def scored(question: Question, ranked: Ranked) -> dict[str, float]:
    """A question's measures for its `ranked` pieces, under each placement."""
    return {
        f"{measure}{suffix}": value
        for placement, suffix in PLACEMENTS.items()
        for measure, value in scores(
            replace(question, references=question.solid, words=())
            if placement == BOUNDARIES_ASIDE
            else question,
            {
                measure: [
                    Retrieved(
                        piece.corpus,
                        *piece.span(placement),
                        piece.tokens,
                        _words(piece.text) if placement == ANY_COPY else "",
                    )
                    for piece in pieces
                ]
                for measure, pieces in ranked.items()
            },
        ).items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    saved_runs.add_arguments(parser)
    halves.add_argument(parser)
    args = parser.parse_args()
    started = time.perf_counter()
    settings = load_settings()
    quickstart = load_settings(config_file=ROOT / "samples" / "quickstart.yaml")
    embedder = CachedEmbedder(
        BgeM3Embedder(
            EmbedderSettings.model_validate({**quickstart.embedder.model_dump(), "device": "cpu"})
        ),
        StageCache(ROOT / ".ingest" / "bench-cache", fsync=False),
    )
    lexical = LexicalEncoder(settings.lexical)
    counter = get_token_counter()
    questions = load_questions()
    corpora = load_corpora()

    chunks = product_chunks(corpora, settings)
    product, located = located_pieces(corpora, chunks)
    splitter = PartSplitter(settings.parts.max_tokens, counter) if settings.parts.enabled else None
    # The product as configured, and without its part vectors (same chunks) to pair with.
    products = {"product": splitter, **({"product without parts": None} if splitter else {})}
    methods: dict[str, list[Piece]] = {
        **{name: product for name in products},
        "windows 1000/200": window_pieces(corpora, counter.count),
        "RecursiveTokenChunker 400": token_chunker_pieces(corpora, 400, counter.count),
        "RecursiveTokenChunker 200": token_chunker_pieces(corpora, 200, counter.count),
    }
    rankings: dict[tuple[str, str], list[Ranked]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-chunking-evaluation-") as tmp:
        for name, parts in products.items():
            found = product_rankings(
                corpora, chunks, product, questions, embedder, lexical, Path(tmp), parts
            )
            for mode, results in found.items():
                rankings[name, mode] = results
    for method, pieces in methods.items():
        if method not in products:
            _progress(f"searching {method}")
            for mode, ranked in baseline_rankings(pieces, questions, embedder).items():
                rankings[method, mode] = [
                    {measure: [pieces[i] for i in order] for measure in MEASURES}
                    for order in ranked
                ]

    per_question = {
        key: [scored(q, results) for q, results in zip(questions, ranked, strict=True)]
        for key, ranked in rankings.items()
    }
    if args.save:
        saved_runs.save(args.save, per_question)
    reported = halves.chosen([q.key for q in questions], args.half)
    picked = [questions[i] for i in reported]
    rows = [
        _row(method, mode, methods[method], picked, [results[i] for i in reported])
        for (method, mode), results in per_question.items()
    ]
    paired = _paired(per_question, reported, args.against)
    report = {
        "questions": len(picked),
        "half": args.half,
        "model": embedder.model_id,
        "product located": dict(located),
        "embedding cost with parts": embedding_cost(chunks, splitter, embedder)
        if splitter
        else None,
        "seconds": round(time.perf_counter() - started, 1),
        "results": rows,
        "paired": paired,
    }
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
    else:
        _print(report)


def _by_corpus(
    measure: str, questions: Sequence[Question], results: Sequence[dict[str, float]]
) -> dict[str, float]:
    corpora = dict.fromkeys(q.corpus for q in questions)
    return {
        corpus: round(
            statistics.mean(
                r[measure] for r, q in zip(results, questions, strict=True) if q.corpus == corpus
            ),
            3,
        )
        for corpus in corpora
    }


def _row(
    method: str,
    mode: str,
    pieces: Sequence[Piece],
    questions: Sequence[Question],
    results: Sequence[dict[str, float]],
) -> dict[str, Any]:
    def mean(measure: str) -> float:
        return round(statistics.mean(r[measure] for r in results), 3)

    return {
        "method": method,
        "mode": mode,
        "pieces": len(pieces),
        "mean_tokens": round(statistics.mean(p.tokens for p in pieces), 1),
        **{m: mean(m) for m in MEASURES},
        **{
            departure: {m: mean(f"{m}{PLACEMENTS[departure]}") for m in MEASURES}
            for departure in DEPARTURES
        },
        "placed at an earlier copy": sum(1 for p in pieces if p.first_copy[0] < p.in_order[0]),
        "recall@5 by corpus": _by_corpus("recall@5", questions, results),
        "within 1000 by corpus": _by_corpus("within 1000", questions, results),
    }


def _paired(
    per_question: dict[tuple[str, str], list[dict[str, float]]],
    reported: Sequence[int],
    against: Path | None,
) -> list[dict[str, Any]]:
    """The product's default search against every other method and mode, and each method
    and mode against itself in the `--against` run, per reported question."""

    def compared(a: str, b: str, now: Sequence[Any], then: Sequence[Any]) -> dict[str, Any]:
        now, then = [now[i] for i in reported], [then[i] for i in reported]
        return {
            "a": a,
            "b": b,
            **{m: sign_test([x[m] for x in now], [y[m] for y in then]) for m in MEASURES},
            # A run saved before a departure was scored has no figures for it.
            **{
                departure: {
                    m: sign_test(
                        [x[f"{m}{PLACEMENTS[departure]}"] for x in now],
                        [y[f"{m}{PLACEMENTS[departure]}"] for y in then],
                    )
                    for m in MEASURES
                }
                if f"recall@5{PLACEMENTS[departure]}" in then[0]
                else None
                for departure in (ANY_COPY, BOUNDARIES_ASIDE)
            },
        }

    default = per_question["product", "hybrid"]
    paired = [
        compared("product hybrid", " ".join(key), default, results)
        for key, results in per_question.items()
        if key != ("product", "hybrid")
    ]
    if against:
        paired += [
            compared(name, f"{name} in {against.name}", now, earlier)
            for name, now, earlier in saved_runs.saved_pairs(against, per_question)
        ]
    return paired


def _print(report: dict[str, Any]) -> None:
    print(
        f"{report['questions']} questions ({report['half']}), model {report['model']}, "
        f"product pieces located: {report['product located']}, {report['seconds']} s"
    )
    print(f"embedding cost with parts: {report['embedding cost with parts']}")
    print(
        "by the benchmark's placement (first copy); any copy: a reference a piece holds "
        "is covered wherever that copy stands; in order: the bench's own; boundaries "
        "aside: first copy, final full stop kept, whitespace not counted"
    )
    departures = DEPARTURES
    print(
        " | ".join(
            ("method", "mode", "pieces", "mean tokens", *MEASURES, *departures, "at earlier copy")
        )
    )
    for row in report["results"]:
        cells = [str(row[k]) for k in ("method", "mode", "pieces", "mean_tokens", *MEASURES)]
        cells += [" / ".join(str(row[d][m]) for m in MEASURES) for d in departures]
        print(" | ".join((*cells, str(row["placed at an earlier copy"]))))
    for measure in ("recall@5", "within 1000"):
        print(f"\n{measure} by corpus")
        for row in report["results"]:
            print(f"{row['method']} {row['mode']}: {row[f'{measure} by corpus']}")
    print("\npaired per question, sign test (diff, won/lost, p)")
    for row in report["paired"]:
        print(f"{row['a']} vs {row['b']}: {_tests(row)}")
        for departure in (ANY_COPY, BOUNDARIES_ASIDE):
            if row[departure]:
                print(f"  {departure}: {_tests(row[departure])}")


def _tests(row: dict[str, Any]) -> str:
    return "; ".join(
        f"{m} {row[m]['diff']:+.3f} {row[m]['won/lost']} p={row[m]['p']}" for m in MEASURES
    )


if __name__ == "__main__":
    main()
