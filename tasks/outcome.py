"""What a batch and a run did, in small records that travel between tasks (counts,
failures, warnings, links, cache keys: chunks travel through the stage cache), and the
run's progress records."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DocumentRef
from tasks.state import DocumentState

STAGES = ("fetch", "normalize", "chunk", "embed", "upsert")
CHUNK_STAGES = ("chunk", "embed", "upsert")
TOKEN_BINS = ((0, 49), (50, 149), (150, 300), (301, 600), (601, 10**9))


# Progress of a run as DEBUG records (`progress_phase`, and for a counted phase
# `progress_total` added to its total and `progress_done` advanced, in their extra): the
# CLI's progress bar listens in the same process; deployments report through artifacts.
progress = logging.getLogger("ingest.progress")
LISTING, PROCESSING, EMBEDDING, RECONCILING, OPTIMIZING = (
    "listing",
    "processing documents",
    "embedding texts",
    "reconciling",
    "building the search index",
)


def progress_phase(phase: str) -> None:
    """The run entered a phase that has no count (listing, reconciling, optimizing)."""
    progress.debug("%s", phase, extra={"progress_phase": phase})


def progress_start(total: int) -> None:
    """`total` documents are to be processed (fetched, normalized, chunked)."""
    progress.debug(
        "%d documents to process",
        total,
        extra={"progress_phase": PROCESSING, "progress_total": total},
    )


def report_progress(documents: int) -> None:
    """`documents` more are processed (prepared, or failed)."""
    progress.debug(
        "%d documents processed",
        documents,
        extra={"progress_phase": PROCESSING, "progress_done": documents},
    )


def embedding_progress(*, more: int = 0, done: int = 0) -> None:
    """`more` texts (chunks, and their parts where the collection holds part vectors)
    are to be embedded; `done` more are embedded."""
    progress.debug(
        "embedding: %d more, %d done",
        more,
        done,
        extra={"progress_phase": EMBEDDING, "progress_total": more, "progress_done": done},
    )


@dataclass(frozen=True)
class Failure:
    document_id: str
    code: str
    message: str
    transient: bool = False


@dataclass(frozen=True)
class DocumentWarning:
    """Something the run report should say about a document that was indexed anyway, e.g.
    which fallback reader converted it; or, under the run's scope as `document_id`, about
    the source (`Listing.notes`)."""

    document_id: str
    message: str


@dataclass(frozen=True)
class DocumentLink:
    """A document a run prepared and where a reader finds it (its page, its file)."""

    document_id: str
    title: str | None
    url: str | None


# How many prepared documents a run's report links to.
LINKS_SHOWN = 20


@dataclass
class StageCount:
    done: int = 0
    cached: int = 0


@dataclass
class PictureTally:
    """What normalizing read of diagrams and pictures, over the documents normalized (not
    those whose normalized form came from the cache)."""

    diagrams: int = 0  # diagram pages read (draw.io, Visio, ...)
    read: int = 0  # pictures OCR'd
    captioned: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # by reason
    ocr_seconds: float = 0.0

    def add_document(self, metadata: dict[str, Any]) -> None:
        """Count a normalized document's `diagram_pages` and `pictures` metadata."""
        diagrams = metadata.get("diagram_pages", 0)
        self.diagrams += len(diagrams) if isinstance(diagrams, list) else int(diagrams)
        pictures = metadata.get("pictures", {})
        self.read += pictures.get("read", 0)
        self.captioned += pictures.get("captioned", 0)
        self.skipped.update(pictures.get("skipped", {}))
        self.ocr_seconds += pictures.get("ocr_seconds", 0.0)

    def merge(self, other: PictureTally) -> None:
        self.diagrams += other.diagrams
        self.read += other.read
        self.captioned += other.captioned
        self.skipped.update(other.skipped)
        self.ocr_seconds += other.ocr_seconds

    def summary(self) -> dict[str, Any]:
        """The run summary's `pictures` object."""
        return {
            "diagrams": self.diagrams,
            "read": self.read,
            "captioned": self.captioned,
            "skipped": dict(sorted(self.skipped.items())),
            "ocr_seconds": round(self.ocr_seconds, 3),
        }


@dataclass
class BatchOutcome:
    """What one batch did: counts, failures, time per stage; merged into the run summary."""

    documents: int = 0
    stages: dict[str, StageCount] = field(default_factory=lambda: {s: StageCount() for s in STAGES})
    # The same in chunks where a stage handles chunks: chunked or read from the chunk
    # cache, embedded or read from the embedding cache, points written or already there.
    chunk_stages: dict[str, StageCount] = field(
        default_factory=lambda: {s: StageCount() for s in CHUNK_STAGES}
    )
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    # Seconds inside the store client's calls while indexing, by work (writes, reads):
    # an index batch may run in another process, so they travel with its outcome.
    store_seconds: dict[str, float] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    warnings: list[DocumentWarning] = field(default_factory=list)
    links: list[DocumentLink] = field(default_factory=list)  # the first LINKS_SHOWN
    gone: list[str] = field(default_factory=list)
    indexed: list[str] = field(default_factory=list)  # documents whose points were synced
    chunks: int = 0
    token_histogram: Counter[str] = field(default_factory=Counter)
    # Chunks embedded this run whose embed_text was longer than the model's input window
    # (embedded window by window): (document_id, ordinal, windows); and that window.
    over_window: list[tuple[str, int, int]] = field(default_factory=list)
    window: int | None = None
    pictures: PictureTally = field(default_factory=PictureTally)

    def merge(self, other: BatchOutcome) -> None:
        self.documents += other.documents
        self.indexed += other.indexed
        for stage in STAGES:
            self.stages[stage].done += other.stages[stage].done
            self.stages[stage].cached += other.stages[stage].cached
        for stage in CHUNK_STAGES:
            self.chunk_stages[stage].done += other.chunk_stages[stage].done
            self.chunk_stages[stage].cached += other.chunk_stages[stage].cached
        add_seconds(self.seconds, other.seconds)
        add_seconds(self.store_seconds, other.store_seconds)
        self.failures += other.failures
        self.warnings += other.warnings
        self.links = (self.links + other.links)[:LINKS_SHOWN]
        self.gone += other.gone
        self.chunks += other.chunks
        self.token_histogram.update(other.token_histogram)
        self.over_window += other.over_window
        self.window = self.window or other.window
        self.pictures.merge(other.pictures)


def add_seconds(into: dict[str, float], more: Mapping[str, float]) -> None:
    """Add seconds by name (a stage, a kind of work) to a tally."""
    for name, seconds in more.items():
        into[name] = into.get(name, 0.0) + seconds


@dataclass(frozen=True)
class PreparedDocument:
    document_id: str
    version: str
    chunk_key: str  # stage-cache digest of the chunk records
    chunks: int
    # False: normalized with a picture whose OCR ran out of time; indexed as it is, and
    # read again by the next run (its state records no fingerprint).
    settled: bool = True


@dataclass
class PreparedBatch:
    outcome: BatchOutcome
    documents: list[PreparedDocument]


def cache_unwritable(settings: Settings, exc: OSError, *, code: ErrorCode) -> IngestError:
    """A write to the cache directory failed (disk full, permissions): transient, so the
    documents are retried by the next run once there is room."""
    return IngestError(
        code,
        f"the cache directory {settings.cache.dir} cannot be written: {exc.strerror or exc}",
        subject=str(exc.filename or settings.cache.dir),
        transient=True,
    )


def failure_of(document_id: str, error: IngestError) -> Failure:
    return Failure(document_id, error.code.value, error.message, error.transient)


def is_transient(error: BaseException) -> bool:
    """Whether another attempt may cure `error`: the source or Qdrant unreachable, the
    cache's disk full; never bad input or a crash on one document's content."""
    return isinstance(error, OSError) or (isinstance(error, IngestError) and error.transient)


def document_failure(document_id: str, error: Exception, crash_code: ErrorCode) -> Failure:
    """`document_id` failed alone with `error`; an error that is no IngestError (a
    library or the pipeline broke on its content) is reported as `crash_code`. Neither is
    transient unless another attempt may cure it."""
    if isinstance(error, IngestError):
        return failure_of(document_id, error)
    return Failure(
        document_id, crash_code.value, f"{type(error).__name__}: {error}", is_transient(error)
    )


def failed_state(ref: DocumentRef, fingerprint: str, error: IngestError) -> DocumentState:
    return DocumentState(ref.version, fingerprint, error.code.value, error.message)


def token_bin(tokens: int) -> str:
    for low, high in TOKEN_BINS:
        if low <= tokens <= high:
            return f"{low}-{high}" if high < 10**9 else f">{low - 1}"
    return "?"
