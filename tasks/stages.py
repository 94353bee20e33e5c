"""The per-document stages as plain functions, shared by the Prefect tasks and the CLI.

No Prefect here: the CLI's `normalize`/`chunk`/`validate` run these directly, and the
batch tasks call them inside their loops.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunking import ChunkedDocument, DocumentInfo, chunk_document
from chunking.record import CONTAINER_FIELD, LOCATOR_FIELD
from config.settings import ChunkingSettings, LimitsSettings, Settings
from connectors.base import DocumentRef, HeadingCitation, SourceDocument
from normalizers import (
    ConvertedAhead,
    NormalizedDocument,
    PictureSetup,
    VisionCaptioner,
    normalize_bytes,
    ocr_languages,
    picture_setup,
)
from stage_cache.keys import CacheKey
from stage_cache.store import StageCache
from tasks.citations import cite


def local_file_source(path: Path) -> SourceDocument:
    """A single file named on the command line, as a source document."""
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    ref = DocumentRef(document_id=path.as_posix(), version=digest, source_type="file", kind="file")
    return SourceDocument(ref=ref, data=data, filename=path.name, file_path=path.as_posix())


def handoff_cache(settings: Settings) -> StageCache:
    """The stage cache. Always written, because prepared chunks reach the index step
    through it; `cache.enabled: false` only stops results from being reused."""
    return StageCache(settings.cache.dir, fsync=settings.cache.fsync)


class PictureStageCache:
    """OCR results and captions in the stage cache's `pictures` directory, by the key the
    picture reader makes (the picture's sha256 and what changes the result)."""

    STAGE = "pictures"

    def __init__(self, cache: StageCache) -> None:
        self.cache = cache

    def get(self, key: str) -> bytes | None:
        return self.cache.get(CacheKey(self.STAGE, key))

    def put(self, key: str, value: bytes) -> None:
        self.cache.put(CacheKey(self.STAGE, key), value)


def run_pictures(settings: Settings) -> PictureSetup:
    """How a run reads pictures (built once per run; `picture_warnings` says what of it
    is off)."""
    cache = PictureStageCache(handoff_cache(settings)) if settings.cache.enabled else None
    captioner = VisionCaptioner(settings.vision, cache=cache) if settings.vision.enabled else None
    return picture_setup(settings.pictures, cache=cache, captioner=captioner)[0]


def picture_warnings(settings: Settings) -> list[str]:
    """A start-up warning for each part of OCR that is on but cannot run here (no
    tesseract, a language without its data)."""
    return picture_setup(settings.pictures)[1]


def normalize_config(settings: Settings) -> dict[str, Any]:
    """What changes a normalized document besides its bytes: the limits, how pictures are
    read (with the OCR languages this machine has) and the caption model, no secret."""
    pictures = settings.pictures
    languages = ocr_languages(pictures.languages)[0] if pictures.ocr else None
    vision = settings.vision
    return {
        "limits": settings.limits.model_dump(mode="json"),
        "pictures": pictures.model_dump(mode="json"),
        "ocr_languages": languages,
        "captions": [vision.url, vision.model] if vision.enabled else None,
    }


def normalize_source(
    source: SourceDocument,
    limits: LimitsSettings,
    pictures: PictureSetup | None = None,
    converted: ConvertedAhead | None = None,
) -> NormalizedDocument:
    """The source normalized, its pictures read by a reader of its own (`pictures`);
    `converted`: its batch's legacy files converted ahead."""
    return normalize_bytes(
        source.data,
        source.filename,
        mime=source.mime,
        limits=limits,
        base_url=source.base_url,
        container=source.container,
        locator=source.locator,
        fmt=source.format,
        attachments=source.attachments,
        pictures=pictures.reader() if pictures is not None else None,
        converted=converted,
    )


def normalize_input(source: SourceDocument) -> bytes:
    """Everything of `source` that `normalize_source` reads, besides the limits: the
    normalize stage's cache input."""
    return b"|".join(
        [
            source.data,
            source.filename.encode(),
            (source.mime or "").encode(),
            (source.base_url or "").encode(),
            (source.container or "").encode(),
            (source.locator or "").encode(),
            attachments_digest(source.attachments).encode(),
        ]
    )


def attachments_digest(attachments: Mapping[str, bytes]) -> str:
    """One digest of the files a document shows, names and bytes: a new diagram version
    makes a new normalize input although the page's own bytes are the same."""
    digest = hashlib.sha256()
    for name in sorted(attachments):
        digest.update(hashlib.sha256(name.encode()).digest())
        digest.update(hashlib.sha256(attachments[name]).digest())
    return digest.hexdigest() if attachments else ""


def document_info(
    source: SourceDocument, normalized: NormalizedDocument, tenant_id: str
) -> DocumentInfo:
    """What its chunks say of the document: the connector's metadata, then what any
    source may know (which wins), where the source's word wins over what the file itself
    claims."""
    metadata: dict[str, Any] = {
        **source.metadata,
        "source_type": source.ref.source_type,
        "source_url": source.source_url,
        "file_path": source.file_path,
        "labels": list(source.labels),
        "updated_at": source.updated_at or normalized.updated_at,
        "author": source.author or normalized.author,
        CONTAINER_FIELD: source.container,
        LOCATOR_FIELD: source.locator,
    }
    if source.acl is not None:
        metadata["acl"] = source.acl.payload()
    if source.ref.parent_document_id:
        metadata["parent_document_id"] = source.ref.parent_document_id
    return DocumentInfo(
        document_id=source.ref.document_id,
        tenant_id=tenant_id,
        source_version_id=source.ref.version,
        # A page's (or attachment's) title is the one its source gives; a file's own title
        # (PDF/Office properties, HTML <title>, front matter) beats its file name.
        title=(source.title if source.ref.kind != "file" else normalized.title or source.title)
        or source.filename,
        metadata=metadata,
    )


def chunk_normalized(
    source: SourceDocument,
    normalized: NormalizedDocument,
    chunking: ChunkingSettings,
    tenant_id: str,
    citation: HeadingCitation | None = None,
) -> ChunkedDocument:
    """The document's chunks, each citing where it starts (`citation`: the connector,
    where it links to headings)."""
    info = document_info(source, normalized, tenant_id)
    document = chunk_document(
        normalized.markdown,
        info,
        chunking,
        anchors=normalized.anchors,
        normalized=True,
    )
    return cite(document, source, citation)
