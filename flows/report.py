"""The run summary (docs/operations.md#reading-a-runs-report) and its Markdown artifact."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import Listing
from tasks.pipeline import (
    STAGES,
    BatchOutcome,
    DocumentLink,
    DocumentWarning,
    Failure,
    Plan,
    SourceSpec,
    add_seconds,
)

# `ingest run` exit codes (docs/operations.md "Exit codes"); a run with several problems reports the
# first that applies in this order.
EXIT_OK = 0
EXIT_LISTING_INCOMPLETE = 4
EXIT_DELETION_REFUSED = 5
EXIT_DOCUMENTS_FAILED = 3
EXIT_STORE_BUSY = 6
STATUS_EXIT_CODES = MappingProxyType(
    {
        "store_busy": EXIT_STORE_BUSY,
        "listing_incomplete": EXIT_LISTING_INCOMPLETE,
        "deletion_refused": EXIT_DELETION_REFUSED,
        "documents_failed": EXIT_DOCUMENTS_FAILED,
        "ok": EXIT_OK,
    }
)


class RunNotOk(Exception):
    """The result of a run that ended Failed on purpose (its status is not `ok`): its
    message says why, and it carries the run's summary, so the summary is the run's
    persisted result whether it ended Completed or Failed."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message, summary)
        self.summary = summary

    def __str__(self) -> str:
        return str(self.args[0])


def summary_of(result: Any) -> dict[str, Any] | None:
    """The summary in a flow run's result (Completed: the summary itself; Failed: the
    RunNotOk carrying it); None for a run that ended before its report."""
    if isinstance(result, RunNotOk):
        return result.summary
    return result if isinstance(result, dict) else None


# The stages whose `{done, cached}` count chunks rather than documents.
CHUNK_UNIT_STAGES = frozenset({"embed"})


@dataclass
class RunSummary:
    source: str
    tenant_id: str
    mode: str
    listing_complete: bool
    seen: int
    unchanged: int
    changed: int
    new: int
    deleted: int
    failed: list[Failure]
    stages: dict[str, dict[str, int]]
    seconds: dict[str, float]
    chunks: int
    # The stages that handle chunks, counted in chunks (`stages` counts documents, but
    # for `embed`, which counts chunks like this).
    chunk_counts: dict[str, dict[str, int]]
    token_histogram: dict[str, int]
    started: str
    wall_seconds: float
    listing_errors: list[str] = field(default_factory=list)
    deletion_refused: bool = False
    warnings: list[DocumentWarning] = field(default_factory=list)
    # The first documents the run prepared, each with where a reader finds it.
    links: list[DocumentLink] = field(default_factory=list)
    # Chunks embedded window by window (longer than the model's window).
    over_window: list[dict[str, Any]] = field(default_factory=list)
    # Points of the tenant in the collection after the run (None: unknown).
    collection_points: int | None = None
    # Diagrams and pictures read while normalizing (`PictureTally.summary`).
    pictures: dict[str, Any] = field(default_factory=dict)
    # Another process held the embedded store: the run stopped before any work.
    store_busy: bool = False
    # Seconds inside the store client's own calls (`writes`, `reads`) and, when the run
    # built the search index, `index_build` (`seconds.optimize`): where the stages'
    # time went in the engine.
    store_seconds: dict[str, float] = field(default_factory=dict)

    @classmethod
    def busy(
        cls,
        *,
        spec: SourceSpec,
        settings: Settings,
        mode: str,
        error: IngestError,
        started: datetime,
    ) -> RunSummary:
        """The summary of a run that found its store held by another process: nothing
        listed, read or written; the failure, under the run's scope, says who holds it."""
        return cls(
            source=spec.scope,
            tenant_id=settings.tenant_id,
            mode=mode,
            listing_complete=False,
            seen=0,
            unchanged=0,
            changed=0,
            new=0,
            deleted=0,
            failed=[Failure(spec.scope, error.code.value, error.message, transient=True)],
            stages={stage: {"done": 0, "cached": 0} for stage in STAGES},
            seconds={},
            chunks=0,
            chunk_counts={},
            token_histogram={},
            started=started.isoformat(timespec="seconds"),
            wall_seconds=round((datetime.now().astimezone() - started).total_seconds(), 3),
            store_busy=True,
        )

    @classmethod
    def build(
        cls,
        *,
        spec: SourceSpec,
        settings: Settings,
        mode: str,
        listing: Listing,
        plan: Plan,
        outcome: BatchOutcome,
        deleted: list[str],
        started: datetime,
        deletion_refused: bool = False,
        points: int | None = None,
        optimize_seconds: float | None = None,
        store_seconds: Mapping[str, float],
    ) -> RunSummary:
        """`store_seconds`: the store client's seconds of this run's calls outside the
        index batches (planning, reconciling), whose own the outcome carries."""
        unchanged = len(plan.unchanged)
        stages = {}
        for stage in STAGES:
            count = outcome.stages[stage]
            # Unchanged documents passed every stage of documents from cache; `embed`
            # counts chunks, and theirs were not looked at.
            skipped = 0 if stage in CHUNK_UNIT_STAGES else unchanged
            stages[stage] = {"done": count.done, "cached": count.cached + skipped}
        failed = [*plan.still_failing, *outcome.failures]
        # A document that failed is neither new nor changed: it is not indexed as listed.
        processed = {ref.document_id for ref in plan.to_process} - {f.document_id for f in failed}
        if not listing.complete:  # the source is named, so a report never shows "0 seen, ok"
            failed.insert(0, _incomplete_listing(spec, listing))
        return cls(
            source=spec.scope,
            tenant_id=settings.tenant_id,
            mode=mode,
            listing_complete=listing.complete,
            seen=len(listing.refs),
            unchanged=unchanged,
            changed=len(processed - plan.new),
            new=len(processed & plan.new),
            deleted=len(deleted),
            failed=failed,
            stages=stages,
            seconds=_stage_seconds(outcome, optimize_seconds),
            chunks=outcome.chunks,
            chunk_counts={
                stage: {"done": count.done, "cached": count.cached}
                for stage, count in outcome.chunk_stages.items()
            },
            token_histogram=dict(sorted(outcome.token_histogram.items(), key=_bin_order)),
            started=started.isoformat(timespec="seconds"),
            wall_seconds=round((datetime.now().astimezone() - started).total_seconds(), 3),
            listing_errors=list(listing.errors),
            deletion_refused=deletion_refused,
            # The source's notes first, under the run's scope: once per run, not per
            # document; then what the plan says of the collection.
            warnings=[
                *(DocumentWarning(spec.scope, n) for n in listing.notes),
                *plan.warnings,
                *outcome.warnings,
                *_over_window_warning(spec, settings, outcome),
            ],
            links=list(outcome.links),
            over_window=[
                {"document_id": document_id, "ordinal": ordinal, "windows": windows}
                for document_id, ordinal, windows in outcome.over_window
            ],
            collection_points=points,
            pictures=outcome.pictures.summary(),
            store_seconds=_store_seconds(store_seconds, outcome, optimize_seconds),
        )

    @property
    def status(self) -> str:
        """`ok` only when every listed document is indexed or reported with a permanent
        error code, the listing was complete and no deletion was refused."""
        if self.store_busy:
            return "store_busy"
        if not self.listing_complete:
            return "listing_incomplete"
        if self.deletion_refused:
            return "deletion_refused"
        if any(f.transient for f in self.failed):
            return "documents_failed"
        return "ok"

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object (docs/operations.md#reading-a-runs-report): documents
        seen/unchanged/changed/new/deleted/failed, one `{done, cached}` object per stage at the top
        level, and `status`."""
        data = asdict(self)
        data["failed"] = [
            {
                "document_id": f.document_id,
                "code": f.code,
                "message": f.message,
                "transient": f.transient,
            }
            for f in self.failed
        ]
        data.update(data.pop("stages"))
        data["status"] = self.status
        del data["links"]  # the artifact's: not part of the summary's contract
        del data["store_busy"]  # said by `status`
        return data


def _over_window_warning(
    spec: SourceSpec, settings: Settings, outcome: BatchOutcome
) -> list[DocumentWarning]:
    """One warning for the chunks longer than the model's window: each was embedded as
    several windows whose vectors were averaged, which blurs what a search finds."""
    if not outcome.over_window:
        return []
    documents = sorted({document_id for document_id, _, _ in outcome.over_window})
    window = f"{outcome.window} tokens" if outcome.window else "its window"
    more = f" and {len(documents) - 3} more" if len(documents) > 3 else ""
    named = ", ".join(documents[:3]) + more
    return [
        DocumentWarning(
            spec.scope,
            f"{len(outcome.over_window)} chunks of {len(documents)} document(s) ({named}) are "
            f"longer than the input window of the model {settings.embedder.model} "
            f"({window}): each was embedded window by window and its vectors averaged. "
            "To avoid it, use a model with a larger window (embedder.model) or smaller "
            "chunk budgets (chunking.max_tokens, chunking.oversize_block_limit)",
        )
    ]


def _bin_order(item: tuple[str, int]) -> int:
    label = item[0]
    return int(label.lstrip(">").split("-")[0])


def exit_code(summary: dict[str, Any]) -> int:
    return STATUS_EXIT_CODES[str(summary["status"])]


def status_message(summary: dict[str, Any]) -> str:
    """Why a run is not `ok`, in one line (the flow run's Failed message)."""
    failed = summary["failed"]
    if summary["status"] == "store_busy":
        return f"{summary['source']}: {failed[0]['message']}; nothing was read or written"
    transient = [f for f in failed if f["transient"]]
    reasons = {
        "listing_incomplete": "the listing was incomplete, nothing was deleted",
        "deletion_refused": "a mass deletion was refused (reconcile.max_delete_share)",
        "documents_failed": f"{len(transient)} document(s) could not be processed for "
        "transient reasons and will be retried by the next run",
    }
    first = ""
    if transient:
        first = f" (first: {transient[0]['document_id']}: {transient[0]['message']})"
    return (
        f"{summary['source']}: {reasons[summary['status']]}{first}; every other document "
        "was processed and nothing indexed was removed"
    )


DOCUMENT_COUNTS = ("seen", "unchanged", "changed", "new", "deleted")
STAGE_COLUMNS = (
    "stage",
    "documents done",
    "documents cached",
    "chunks done",
    "chunks cached",
    "seconds",
)


def _incomplete_listing(spec: SourceSpec, listing: Listing) -> Failure:
    more = f" (and {len(listing.errors) - 5} more)" if len(listing.errors) > 5 else ""
    return Failure(
        spec.scope,
        ErrorCode.FETCH_FAILED.value,
        "the listing is incomplete, so nothing was deleted: "
        + "; ".join(listing.errors[:5])
        + more,
        transient=True,
    )


def _stage_seconds(outcome: BatchOutcome, optimize_seconds: float | None) -> dict[str, float]:
    """Seconds per stage; `optimize` (the search index built at the run's end) only when
    the run built it."""
    seconds = dict(outcome.seconds)
    if optimize_seconds is not None:
        seconds["optimize"] = optimize_seconds
    return {stage: round(value, 3) for stage, value in seconds.items()}


def _store_seconds(
    outside_batches: Mapping[str, float], outcome: BatchOutcome, optimize_seconds: float | None
) -> dict[str, float]:
    """The store client's seconds of the run by work, and `index_build` when the run
    built the search index."""
    seconds = dict(outside_batches)
    add_seconds(seconds, outcome.store_seconds)
    if optimize_seconds is not None:
        seconds["index_build"] = optimize_seconds
    return {work: round(value, 3) for work, value in seconds.items()}


def stage_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The stage table (`STAGE_COLUMNS`) of a summary's `as_dict` form: one unit per
    column, a dash where a stage does not count that unit."""

    def cells(counts: dict[str, int] | None) -> list[str]:
        return [str(counts["done"]), str(counts["cached"])] if counts else ["–", "–"]

    rows = []
    for stage, seconds in summary["seconds"].items():
        # `optimize` counts nothing: the search index is built over the whole collection
        documents = None if stage in CHUNK_UNIT_STAGES else summary.get(stage)
        chunks = summary["chunk_counts"].get(stage)
        rows.append([stage, *cells(documents), *cells(chunks), f"{seconds:.2f}"])
    return rows


def chunks_line(summary: dict[str, Any]) -> str:
    """The run's chunks, and what the collection holds after it."""
    processed = summary["changed"] + summary["new"]
    line = f"{summary['chunks']} chunks prepared from {processed} new or changed documents"
    if summary["collection_points"] is not None:
        line += (
            f"; the collection holds {summary['collection_points']} points of tenant "
            f"{summary['tenant_id']}"
        )
    return line


def store_line(summary: dict[str, Any]) -> str | None:
    """The store client's own seconds (writes, reads, the search index build); None for
    a run that wrote and read nothing (its store was busy)."""
    seconds = summary.get("store_seconds")
    if not seconds:
        return None
    line = f"Qdrant's own time: writes {seconds['writes']:.2f} s, reads {seconds['reads']:.2f} s"
    if "index_build" in seconds:
        line += f", search index build {seconds['index_build']:.2f} s"
    return line


def pictures_line(summary: dict[str, Any]) -> str | None:
    """Diagrams and pictures read, pictures skipped by reason and the OCR time; None
    where the run met none."""
    pictures = summary.get("pictures") or {}
    skipped = pictures.get("skipped", {})
    if not (pictures.get("diagrams") or pictures.get("read") or skipped):
        return None
    line = f"{pictures['diagrams']} diagram pages and {pictures['read']} pictures read"
    if pictures.get("captioned"):
        line += f" ({pictures['captioned']} captioned)"
    if skipped:
        line += ", skipped: " + ", ".join(f"{n} {reason}" for reason, n in skipped.items())
    return line + f"; OCR {pictures['ocr_seconds']:.1f} s"


def _hit_rate(row: list[str]) -> str:
    """The cache hit rate of a stage row, in the unit the stage counts (documents, else
    chunks; neither for `optimize`)."""
    done, cached = row[1:3] if row[1] != "–" else row[3:5]
    if done == "–":
        return "–"
    total = int(done) + int(cached)
    return f"{int(cached) / total:.0%}" if total else "–"


def summary_markdown(summary: RunSummary) -> str:
    data = summary.as_dict()
    lines = [
        f"# Ingest `{summary.source}` (tenant `{summary.tenant_id}`, {summary.mode})",
        "",
        f"Started {summary.started}, {summary.wall_seconds:.1f} s. "
        + (
            "Listing complete."
            if summary.listing_complete
            else "**The store is held by another process: nothing read or written.**"
            if summary.store_busy
            else "**Listing incomplete: nothing deleted.**"
        ),
        "",
        "| documents | " + " | ".join(DOCUMENT_COUNTS) + " | failed |",
        "|---|" + "---|" * (len(DOCUMENT_COUNTS) + 1),
        "| | " + " | ".join(str(data[k]) for k in DOCUMENT_COUNTS) + f" | {len(summary.failed)} |",
        "",
        "| " + " | ".join((*STAGE_COLUMNS, "cache hit rate")) + " |",
        "|" + "---|" * (len(STAGE_COLUMNS) + 1),
    ]
    lines += ["| " + " | ".join((*row, _hit_rate(row))) + " |" for row in stage_rows(data)]
    lines += ["", chunks_line(data) + ".", ""]
    store = store_line(data)
    if store:
        lines += [store + ".", ""]
    pictures = pictures_line(data)
    if pictures:
        lines += [pictures + ".", ""]
    if summary.token_histogram:
        lines += ["| tokens per chunk | chunks |", "|---|---|"]
        lines += [f"| {label} | {n} |" for label, n in summary.token_histogram.items()]
        lines.append("")
    if summary.failed:
        lines += ["## Failures", "", "| document | code | message |", "|---|---|---|"]
        for failure in summary.failed:
            message = failure.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {failure.document_id} | {failure.code} | {message} |")
    if summary.warnings:
        lines += ["", "## Warnings", "", "| document | warning |", "|---|---|"]
        for warning in summary.warnings:
            message = warning.message.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {warning.document_id} | {message} |")
    if summary.links:
        more = summary.changed + summary.new - len(summary.links)
        lines += [
            "",
            "## Indexed documents" + (f" (the first {len(summary.links)})" if more > 0 else ""),
            "",
            "| document | title and link |",
            "|---|---|",
        ]
        for link in summary.links:
            title = (link.title or link.document_id).replace("|", "\\|").replace("]", "\\]")
            shown = f"[{title}](<{link.url}>)" if link.url else title
            lines.append(f"| {link.document_id} | {shown} |")
    return "\n".join(lines) + "\n"
