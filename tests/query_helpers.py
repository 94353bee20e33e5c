"""A small index for the readers' tests (`ingest mcp`, the LangChain and LlamaIndex
retrievers): two sample documents of the quickstart corpus through the real normalizer,
chunker and citations, and a Confluence page only user `ann` may read, embedded by the
tiny BGE-M3-shaped model with the lexical vector, in Qdrant local mode; and the settings
file that opens it."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from config.settings import load_settings
from connectors.base import PUBLIC
from indexing.embedders import BgeM3Embedder
from indexing.lexical import LexicalEncoder
from indexing.reconcile import DocumentChunks, sync_documents
from stage_cache.store import StageCache
from stage_cache.sync_log import SourceLog, SourceSync
from tasks.stages import chunk_normalized, local_file_source, normalize_source
from testkit.index_helpers import make_document, open_store

ROOT = Path(__file__).resolve().parents[1]
RESTART = ROOT / "samples" / "docs" / "runbooks" / "restart-service.html"
ONBOARDING = ROOT / "samples" / "docs" / "handbook" / "onboarding.md"
# The README's question, and the sample that answers it.
QUESTION = "how do I restart a service"
SECRET_WORD = "Quetzalcoatl"
SECRET_TEXT = (
    f"The {SECRET_WORD} bonus pool is split by the board every March among the team leads."
)
SECRET_URL = "https://wiki.example/spaces/HR/pages/77/Bonus+pool#Split"
TENANT = "acme"


@dataclass(frozen=True)
class QueryIndex:
    config: Path
    restart_id: str  # the document id of restart-service.html
    secret_id: str


def build_query_index(
    root: Path, model_dir: Path, files: tuple[Path, ...] = (RESTART, ONBOARDING)
) -> QueryIndex:
    config = root / "settings.yaml"
    config.write_text(
        f"tenant_id: {TENANT}\n"
        f"embedder:\n  model: {model_dir}\n  device: cpu\n"
        f"qdrant:\n  path: {root / 'qdrant'}\n  collection: readers\n"
        f"cache:\n  dir: {root / 'cache'}\n"
        "lexical:\n  languages: [en]\n"
        # small bounds, so that a whole sample document is cut
        "mcp:\n  max_results: 8\n  max_text_chars: 2000\n"
    )
    settings = load_settings(config_file=config, environ={})
    embedder = BgeM3Embedder(settings.embedder)
    lexical = LexicalEncoder(settings.lexical)
    documents = []
    for path in files:
        # public, as the files connector reads a share
        source = replace(local_file_source(path), acl=PUBLIC)
        chunked = chunk_normalized(
            source, normalize_source(source, settings.limits), settings.chunking, TENANT
        )
        documents.append(
            DocumentChunks(source.ref.document_id, source.ref.version, list(chunked.chunks))
        )
    secret = make_document(
        TENANT,
        "confluence:77",
        "v1",
        [SECRET_TEXT],
        title="Bonus pool",
        headings_path=("Split",),
        source_type="confluence",
        source_url="https://wiki.example/spaces/HR/pages/77/Bonus+pool",
        space_key="HR",
        citation_url=SECRET_URL,
        breadcrumbs=("Human Resources", "Pay", "Bonus pool"),
        extra={"acl": {"public": False, "restricted": True, "users": ["ann"], "groups": []}},
    )
    documents.append(secret)
    store = open_store(settings.qdrant, embedder.vector_size, sparse=True, lexical=True)
    try:
        sync_documents(store, embedder, StageCache(root / "stage"), TENANT, documents, lexical)
    finally:
        store.connection.close()
    log = SourceLog.for_settings(settings)
    log.record(
        TENANT,
        SourceSync("files:/samples", "file", ("/samples",), "2026-11-26T10:00:00+00:00", "ok", 2),
    )
    log.record(
        TENANT,
        SourceSync(
            "confluence:ENG,HR", "confluence", ("ENG", "HR"), "2026-11-26T11:00:00+00:00", "ok", 1
        ),
    )
    return QueryIndex(config, str(RESTART.as_posix()), secret.document_id)
