"""The chunk record (docs/chunking.md#the-chunk-record), its stable id and the Qdrant point id, and
the record read back from a point's payload (`ChunkPayload`)."""

from __future__ import annotations

import copy
import hashlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

ChunkType = Literal["paragraph", "list", "table", "code", "quote", "mixed"]

# The payload names of a document's container and locator (`SourceDocument.container`,
# `.locator`): payloads, search filters and users have named them so since every source
# was Confluence (a space key, a page id), and keep doing so.
CONTAINER_FIELD = "space_key"
LOCATOR_FIELD = "page_id"

_WHITESPACE_RUN = re.compile(r"\s+")


@dataclass(frozen=True)
class DocumentInfo:
    """What the chunker needs to know about the document besides its Markdown."""

    document_id: str
    tenant_id: str = "default"
    source_version_id: str = ""
    # Heads every chunk's embed_text; None: the Markdown's front matter title, if any.
    title: str | None = None
    # The document's payload fields (source type, URL, labels, ACL, ...): every chunk's
    # record holds them as they are, beside its own (which win).
    metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def subject(self) -> str:
        """What names the document in messages."""
        return str(
            self.metadata.get("file_path") or self.metadata.get("source_url") or self.document_id
        )


@dataclass(frozen=True)
class Chunk:
    chunk_id: str
    tenant_id: str
    document_id: str
    source_version_id: str
    ordinal: int
    chunk_type: ChunkType
    headings_path: tuple[str, ...]
    chunk_path: str
    md_text: str
    overlap_prefix: str
    embed_text: str
    char_start: int
    char_end: int
    block_start_idx: int
    block_end_idx: int
    token_count: int
    page_start: int | None = None
    page_end: int | None = None
    sheet: str | None = None
    slide: int | None = None
    links: tuple[str, ...] = ()
    # Citation (docs/sources.md#deep-links): the deep link to where the chunk starts, and the path
    # to its document (space, ancestors, title); set by the pipeline, which knows the source.
    citation_url: str | None = None
    breadcrumbs: tuple[str, ...] = ()
    oversize: bool = False
    undersize_reason: str | None = None
    # Hierarchy (docs/chunking.md#the-chunk-record): one id for every chunk of a section, and the
    # neighbours.
    section_id: str = ""
    prev_chunk_id: str | None = None
    next_chunk_id: str | None = None
    # `before|after|both`: the nearest prose (a caption, lead-in, explanation) or an
    # output block joined this table/code chunk (docs/chunking.md#bound-context).
    bound_context: str | None = None
    # A chunk holding code: `example` (prose explains it), `output` (its output block
    # bound to it), `standalone`.
    code_role: str | None = None
    # How many tables a chunk holds where it holds several (a table group).
    table_group_count: int | None = None
    # The header of a table too wide to repeat in every piece, beside `md_text`.
    table_header: str | None = None
    # Its document's payload fields (`DocumentInfo.metadata`, with the title).
    document: dict[str, Any] = field(default_factory=dict)

    @property
    def point_id(self) -> str:
        return point_id(self.chunk_id)

    def to_record(self) -> dict[str, Any]:
        """The JSON record (`ingest chunk --format jsonl`, Qdrant payload): its document's
        fields joined with its own, flat, so payload filters reach e.g. `acl`; lists, not
        tuples."""
        record: dict[str, Any] = copy.deepcopy(self.document)
        for name in _RECORD_FIELDS:
            value = getattr(self, name)
            record[name] = list(value) if isinstance(value, tuple) else value
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Chunk:
        """Inverse of `to_record` (the stage cache stores chunks as records)."""
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in _OWN_FIELDS
        }
        document = {k: v for k, v in record.items() if k not in _OWN_FIELDS}
        return cls(**values, document=document)


_RECORD_FIELDS = tuple(f.name for f in fields(Chunk) if f.name != "document")
_OWN_FIELDS = frozenset(_RECORD_FIELDS)


@dataclass(frozen=True)
class ChunkPayload:
    """A chunk's record read back from a point's payload (what `Chunk.to_record` wrote,
    its document's fields among it), typed for readers: search, its expansion, the query
    API. A point an older chunker wrote may lack a field; it reads as empty then."""

    chunk_id: str
    tenant_id: str
    document_id: str
    source_version_id: str
    ordinal: int
    chunk_type: str | None
    md_text: str
    headings_path: tuple[str, ...]
    token_count: int
    char_start: int
    char_end: int
    # The first and last block of the normalized document it holds; two chunks that
    # share one split it. None: written by a chunker that did not record them.
    block_start_idx: int | None
    block_end_idx: int | None
    page_start: int | None
    sheet: str | None
    slide: int | None
    table_header: str | None
    section_id: str | None
    prev_chunk_id: str | None
    next_chunk_id: str | None
    # Whether the record names its neighbours at all: an older chunker's does not, and
    # its neighbours are the chunks of the next ordinals.
    names_neighbours: bool
    citation_url: str | None
    breadcrumbs: tuple[str, ...]
    # Its document's fields.
    title: str | None
    source_url: str | None
    file_path: str | None
    source_type: str | None
    container: str | None
    labels: tuple[str, ...]
    updated_at: str | None

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> ChunkPayload:
        return cls(
            chunk_id=str(payload.get("chunk_id", "")),
            tenant_id=str(payload.get("tenant_id", "")),
            document_id=str(payload.get("document_id", "")),
            source_version_id=str(payload.get("source_version_id", "")),
            ordinal=int(payload.get("ordinal") or 0),
            chunk_type=payload.get("chunk_type"),
            md_text=str(payload.get("md_text", "")),
            headings_path=tuple(payload.get("headings_path") or ()),
            token_count=int(payload.get("token_count") or 0),
            char_start=int(payload.get("char_start") or 0),
            char_end=int(payload.get("char_end") or 0),
            block_start_idx=payload.get("block_start_idx"),
            block_end_idx=payload.get("block_end_idx"),
            page_start=payload.get("page_start"),
            sheet=payload.get("sheet"),
            slide=payload.get("slide"),
            table_header=payload.get("table_header"),
            section_id=payload.get("section_id"),
            prev_chunk_id=payload.get("prev_chunk_id"),
            next_chunk_id=payload.get("next_chunk_id"),
            names_neighbours="prev_chunk_id" in payload or "next_chunk_id" in payload,
            citation_url=payload.get("citation_url"),
            breadcrumbs=tuple(payload.get("breadcrumbs") or ()),
            title=payload.get("title"),
            source_url=payload.get("source_url"),
            file_path=payload.get("file_path"),
            source_type=payload.get("source_type"),
            container=payload.get(CONTAINER_FIELD),
            labels=tuple(payload.get("labels") or ()),
            updated_at=payload.get("updated_at"),
        )

    @property
    def source(self) -> str | None:
        """The page URL or the file path."""
        return self.source_url or self.file_path

    @property
    def version_key(self) -> tuple[str, str, str]:
        """Tenant, document and version: the chunks of one indexed document."""
        return (self.tenant_id, self.document_id, self.source_version_id)

    def continues(self, before: ChunkPayload) -> bool:
        """Whether it goes on with the block `before` ends (the chunker split one)."""
        return before.block_end_idx is not None and before.block_end_idx == self.block_start_idx

    @property
    def neighbour_ids(self) -> list[str]:
        """The chunk ids of the chunks before and after it that it names."""
        return [str(i) for i in (self.prev_chunk_id, self.next_chunk_id) if i]


def canonical_chunk_text(md_text: str, chunk_type: str) -> str:
    """`md_text` with internal whitespace collapsed, except code and table literals."""
    if chunk_type in ("code", "table"):
        return md_text
    return _WHITESPACE_RUN.sub(" ", md_text).strip()


def compute_chunk_id(
    tenant_id: str,
    document_id: str,
    source_version_id: str,
    ordinal: int,
    md_text: str,
    chunk_type: str,
) -> str:
    """sha256(tenant_id | document_id | source_version_id | ordinal | canonical_chunk_text)."""
    canonical = canonical_chunk_text(md_text, chunk_type)
    joined = f"{tenant_id}|{document_id}|{source_version_id}|{ordinal}|{canonical}"
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def compute_section_id(
    tenant_id: str, document_id: str, source_version_id: str, chunk_path: str, section: int
) -> str:
    """sha256(tenant_id | document_id | source_version_id | chunk_path | section ordinal)."""
    joined = f"{tenant_id}|{document_id}|{source_version_id}|{chunk_path}|{section}"
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


def point_id(chunk_id: str) -> str:
    """The Qdrant point id: the UUID made of the first 128 bits of `chunk_id`."""
    return str(uuid.UUID(hex=chunk_id[:32]))
