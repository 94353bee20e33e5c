"""A document a re-index finds without its normalized text in the stage cache (pruned,
or indexed before the cache recorded it), prepared again as a run prepares it: the
source whose last sync holds the document is listed, and the document fetched,
normalized and chunked under the current settings by the run's own batch step."""

from __future__ import annotations

from dataclasses import dataclass, field

from chunking.record import Chunk
from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DocumentRef
from stage_cache.keys import CacheKey
from stage_cache.sync_log import SourceLog
from tasks.plan import SourceSpec, discover
from tasks.prepare import prepare_batch
from tasks.resources import Resources
from tasks.stages import handoff_cache
from tasks.state import SyncState


@dataclass
class Refetch:
    """Prepares documents again, one at a time; each source is listed once (for each
    tenant)."""

    settings: Settings
    resources: Resources
    listings: dict[str, dict[str, DocumentRef]] = field(default_factory=dict)

    def chunks(self, tenant_id: str, document_id: str) -> list[Chunk]:
        """The tenant's document's chunks as a run would make them now, from its source."""
        settings = self.settings.model_copy(update={"tenant_id": tenant_id})
        spec, ref = self._find(settings, document_id)
        prepared = prepare_batch(spec, settings, [ref], self.resources)
        if not prepared.documents:
            failures = prepared.outcome.failures
            why = failures[0].message if failures else "it is gone from its source"
            raise IngestError(
                ErrorCode.FETCH_FAILED,
                f"its normalized text is not in the stage cache and fetching it again failed "
                f"({why}): run `ingest run` on {spec.scope}, then `ingest reindex` again",
                subject=document_id,
                transient=bool(failures) and failures[0].transient,
            )
        key = CacheKey("chunk", prepared.documents[0].chunk_key)
        records = handoff_cache(settings).get_json(key) or []
        return [Chunk.from_record(record) for record in records]

    def _find(self, settings: Settings, document_id: str) -> tuple[SourceSpec, DocumentRef]:
        """The source scope whose sync state (of `settings`' tenant) holds the document,
        and its listing's ref."""
        for sync in SourceLog.for_settings(settings).read(settings.tenant_id):
            spec = SourceSpec(sync.scope.split(":", 1)[0], sync.targets)
            if SyncState.for_scope(settings, spec.scope).get(document_id) is None:
                continue
            listed = f"{settings.tenant_id}|{spec.scope}"
            if listed not in self.listings:
                refs = discover(spec, settings, self.resources).refs
                self.listings[listed] = {ref.document_id: ref for ref in refs}
            ref = self.listings[listed].get(document_id)
            if ref is not None:
                return spec, ref
        raise IngestError(
            ErrorCode.CHUNKING_FAILED,
            "its normalized text is not in the stage cache and no source synced here lists "
            "it now: run `ingest run --force` on its source (a document gone from it is "
            "removed), then `ingest reindex` again",
            subject=document_id,
        )
