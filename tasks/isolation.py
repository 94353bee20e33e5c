"""One document's failure never reaches another.

A batch's documents are fetched, converted, normalized and chunked together, and embedded
and written together. Each document's own failure is caught where that document is
handled; what escapes is a failure of the batch as a whole. When its cause is transient
(the source or Qdrant unreachable, the cache's disk full) every document of the batch
waits for the retry. Any other cause is some document's: the batch is then run again one
document at a time, so that document fails with its own error and code, and every other
one comes out as it would alone. Work already done is not repeated: the stage cache and
the points written answer for it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from config.errors import ErrorCode, IngestError
from config.settings import Settings
from connectors.base import DocumentRef
from tasks.index import index_batch
from tasks.outcome import (
    BatchOutcome,
    PreparedBatch,
    PreparedDocument,
    document_failure,
    failed_state,
    is_transient,
    report_progress,
)
from tasks.plan import SourceSpec
from tasks.prepare import prepare_batch
from tasks.resources import Resources
from tasks.state import SyncState, pipeline_fingerprint

log = logging.getLogger(__name__)


def prepare_isolated(
    spec: SourceSpec,
    settings: Settings,
    refs: Sequence[DocumentRef],
    resources: Resources,
    *,
    force: bool = False,
) -> PreparedBatch:
    """`prepare_batch`, with a failure of the whole batch kept to the document that
    caused it. A transient one fails every document of the batch for now."""
    try:
        return prepare_batch(spec, settings, refs, resources, force=force)
    except Exception as exc:  # raised before any of its documents was processed
        if is_transient(exc) or len(refs) == 1:
            report_progress(len(refs))
            failures = [
                document_failure(r.document_id, exc, ErrorCode.CHUNKING_FAILED) for r in refs
            ]
            if isinstance(exc, IngestError) and not exc.transient:  # bad input: not retried
                fingerprint = pipeline_fingerprint(settings)  # until it changes
                SyncState.for_scope(settings, spec.scope).update(
                    {r.document_id: failed_state(r, fingerprint, exc) for r in refs}
                )
            return PreparedBatch(BatchOutcome(documents=len(refs), failures=failures), [])
        log.info(
            "preparing a batch of %d documents failed (%s): preparing each alone", len(refs), exc
        )
    merged = PreparedBatch(BatchOutcome(), [])
    for ref in refs:
        alone = prepare_isolated(spec, settings, (ref,), resources, force=force)
        merged.outcome.merge(alone.outcome)
        merged.documents += alone.documents
    return merged


def index_isolated(
    spec: SourceSpec,
    settings: Settings,
    documents: Sequence[PreparedDocument],
    resources: Resources,
    *,
    force: bool = False,
) -> BatchOutcome:
    """`index_batch`, with a failure of the whole batch kept to the document that caused
    it (an embedder or a write that broke on its texts); that document keeps its old
    points and is retried by the next run. A transient failure is raised for retry; a
    failure every document meets alone as well (a store or model that breaks on any
    text) is reported transient for all of them, so the run says it failed."""
    try:
        return index_batch(spec, settings, documents, resources, force=force)
    except Exception as exc:
        if is_transient(exc):
            raise
        if len(documents) == 1:
            return BatchOutcome(
                failures=[document_failure(documents[0].document_id, exc, ErrorCode.UPSERT_FAILED)]
            )
        log.info(
            "indexing a batch of %d documents failed (%s): indexing each alone",
            len(documents),
            exc,
        )
    merged = BatchOutcome()
    for document in documents:
        merged.merge(index_isolated(spec, settings, [document], resources, force=force))
    if not merged.indexed:  # none indexed alone either: the cause is no one document's
        merged.failures = [dataclasses.replace(f, transient=True) for f in merged.failures]
    return merged
