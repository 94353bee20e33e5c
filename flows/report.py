"""The run summary (SPEC §5, §7 `--json`) and its Markdown artifact."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from config.settings import Settings
from connectors.base import Listing
from tasks.pipeline import STAGES, BatchOutcome, Failure, Plan, SourceSpec

REPORTED_STAGES = ("normalize", "chunk", "embed", "upsert")


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
    ) -> RunSummary:
        unchanged = len(plan.unchanged)
        stages = {}
        for stage in STAGES:
            count = outcome.stages[stage]
            # Unchanged documents passed every stage from cache.
            stages[stage] = {"done": count.done, "cached": count.cached + unchanged}
        processed = {ref.document_id for ref in plan.to_process}
        failed = [*plan.still_failing, *outcome.failures]
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
        )

    def cache_hit_rate(self, stage: str) -> float | None:
        counts = self.stages[stage]
        total = counts["done"] + counts["cached"]
        return counts["cached"] / total if total else None

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object: documents seen/unchanged/changed/new/deleted/failed and,
        per stage, the counts done and cached (also under `stages`, with fetch)."""
        data = asdict(self)
        data["failed"] = [
            {"document_id": f.document_id, "code": f.code, "message": f.message}
            for f in self.failed
        ]
        for stage in REPORTED_STAGES:
            data[stage] = dict(self.stages[stage])
        return data


def _bin_order(item: tuple[str, int]) -> int:
    label = item[0]
    return int(label.lstrip(">").split("-")[0])


_last: list[dict[str, Any]] = []


def remember(summary: RunSummary) -> None:
    """Keep the latest summary in-process, so `ingest run` can print it even when the
    run ends Failed (transient failures) after writing it."""
    _last[:] = [summary.as_dict()]


def last_summary() -> dict[str, Any] | None:
    return _last[0] if _last else None


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
    return "\n".join(lines) + "\n"
