"""The run summary (SPEC §5, §7 `--json`) and its Markdown artifact."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from config.errors import ErrorCode
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
)

# `ingest run` exit codes (README "Exit codes"); a run with several problems reports the
# first that applies in this order.
EXIT_OK = 0
EXIT_LISTING_INCOMPLETE = 4
EXIT_DELETION_REFUSED = 5
EXIT_DOCUMENTS_FAILED = 3
STATUS_EXIT_CODES = MappingProxyType(
    {
        "listing_incomplete": EXIT_LISTING_INCOMPLETE,
        "deletion_refused": EXIT_DELETION_REFUSED,
        "documents_failed": EXIT_DOCUMENTS_FAILED,
        "ok": EXIT_OK,
    }
)


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
    token_histogram: dict[str, int]
    started: str
    wall_seconds: float
    listing_errors: list[str] = field(default_factory=list)
    deletion_refused: bool = False
    warnings: list[DocumentWarning] = field(default_factory=list)
    # The first documents the run prepared, each with where a reader finds it.
    links: list[DocumentLink] = field(default_factory=list)

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
    ) -> RunSummary:
        unchanged = len(plan.unchanged)
        stages = {}
        for stage in STAGES:
            count = outcome.stages[stage]
            # Unchanged documents passed every stage from cache.
            stages[stage] = {"done": count.done, "cached": count.cached + unchanged}
        processed = {ref.document_id for ref in plan.to_process}
        failed = [*plan.still_failing, *outcome.failures]
        if not listing.complete:  # the source is named, so a report never shows "0 seen, ok"
            failed.insert(
                0,
                Failure(
                    spec.scope,
                    ErrorCode.FETCH_FAILED.value,
                    "the listing is incomplete, so nothing was deleted: "
                    + "; ".join(listing.errors[:5])
                    + (f" (and {len(listing.errors) - 5} more)" if len(listing.errors) > 5 else ""),
                    transient=True,
                ),
            )
        return cls(
            source=spec.scope,
            tenant_id=settings.tenant_id,
            mode=mode,
            listing_complete=listing.complete,
            seen=len(listing.refs),
            unchanged=unchanged,
            changed=len(processed - plan.new),
            new=len(plan.new),
            deleted=len(deleted),
            failed=failed,
            stages=stages,
            seconds={k: round(v, 3) for k, v in outcome.seconds.items()},
            chunks=outcome.chunks,
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
            ],
            links=list(outcome.links),
        )

    @property
    def status(self) -> str:
        """`ok` only when every listed document is indexed or reported with a permanent
        error code, the listing was complete and no deletion was refused."""
        if not self.listing_complete:
            return "listing_incomplete"
        if self.deletion_refused:
            return "deletion_refused"
        if any(f.transient for f in self.failed):
            return "documents_failed"
        return "ok"

    def cache_hit_rate(self, stage: str) -> float | None:
        counts = self.stages[stage]
        total = counts["done"] + counts["cached"]
        return counts["cached"] / total if total else None

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object (SPEC §7): documents seen/unchanged/changed/new/deleted/
        failed, one `{done, cached}` object per stage at the top level, and `status`."""
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
        del data["links"]  # the artifact's: not part of the summary's contract (SPEC §7)
        return data


def _bin_order(item: tuple[str, int]) -> int:
    label = item[0]
    return int(label.lstrip(">").split("-")[0])


def exit_code(summary: dict[str, Any]) -> int:
    return STATUS_EXIT_CODES[str(summary["status"])]


def status_message(summary: dict[str, Any]) -> str:
    """Why a run is not `ok`, in one line (the flow run's Failed message)."""
    failed = summary["failed"]
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


def summary_markdown(summary: RunSummary) -> str:
    lines = [
        f"# Ingest `{summary.source}` (tenant `{summary.tenant_id}`, {summary.mode})",
        "",
        f"Started {summary.started}, {summary.wall_seconds:.1f} s. "
        + (
            "Listing complete."
            if summary.listing_complete
            else "**Listing incomplete: nothing deleted.**"
        ),
        "",
        "| documents | seen | unchanged | changed | new | deleted | failed |",
        "|---|---|---|---|---|---|---|",
        f"| | {summary.seen} | {summary.unchanged} | {summary.changed} | {summary.new} "
        f"| {summary.deleted} | {len(summary.failed)} |",
        "",
        "| stage | done | cached | cache hit rate | seconds |",
        "|---|---|---|---|---|",
    ]
    for stage, counts in summary.stages.items():
        rate = summary.cache_hit_rate(stage)
        shown = f"{rate:.0%}" if rate is not None else "–"
        lines.append(
            f"| {stage} | {counts['done']} | {counts['cached']} | {shown} "
            f"| {summary.seconds.get(stage, 0.0):.2f} |"
        )
    lines += ["", f"**{summary.chunks} chunks** written or confirmed.", ""]
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
