"""The chunk record (SPEC §3.6), its stable id and the Qdrant point id."""

from __future__ import annotations

import copy
import hashlib
import re
import uuid
from dataclasses import dataclass, field, fields
from typing import Any, Literal

ChunkType = Literal["paragraph", "list", "table", "code", "quote", "mixed"]

_WHITESPACE_RUN = re.compile(r"\s+")


@dataclass(frozen=True)
class DocumentInfo:
    """What the chunker needs to know about the document besides its Markdown."""

    document_id: str
    tenant_id: str = "default"
    source_version_id: str = ""
    source_type: str = "file"  # the connector's (SPEC §3.6: confluence | file)
    source_url: str | None = None
    file_path: str | None = None
    title: str | None = None
    labels: tuple[str, ...] = ()
    updated_at: str | None = None
    author: str | None = None
    space_key: str | None = None
    page_id: str | None = None
    # Carried into every chunk's payload unchanged (acl, parent_document_id, link counts...).
    extra: dict[str, Any] = field(default_factory=dict)


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
    source_type: str
    source_url: str | None
    file_path: str | None
    title: str | None
    labels: tuple[str, ...]
    updated_at: str | None
    author: str | None
    space_key: str | None = None
    page_id: str | None = None
    page_start: int | None = None
    page_end: int | None = None
    sheet: str | None = None
    slide: int | None = None
    links: tuple[str, ...] = ()
    # Citation (SPEC §3.6): the deep link to where the chunk starts, and the path to its
    # document (space, ancestors, title); set by the pipeline, which knows the source.
    citation_url: str | None = None
    breadcrumbs: tuple[str, ...] = ()
    oversize: bool = False
    undersize_reason: str | None = None
    # Hierarchy (SPEC §3.6): one id for every chunk of a section, and the neighbours.
    section_id: str = ""
    prev_chunk_id: str | None = None
    next_chunk_id: str | None = None
    # `before|after|both`: the nearest prose (a caption, lead-in, explanation) or an
    # output block joined this table/code chunk (SPEC §3.5 Bound context).
    bound_context: str | None = None
    # A chunk holding code: `example` (prose explains it), `output` (its output block
    # bound to it), `standalone`.
    code_role: str | None = None
    # How many tables a chunk holds where it holds several (a table group).
    table_group_count: int | None = None
    # The header of a table too wide to repeat in every piece, beside `md_text`.
    table_header: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def point_id(self) -> str:
        return point_id(self.chunk_id)

    def to_record(self) -> dict[str, Any]:
        """The JSON record (`ingest chunk --format jsonl`, Qdrant payload): lists, not tuples;
        `extra` flattened in so payload filters can reach e.g. `acl`."""
        record: dict[str, Any] = copy.deepcopy(self.extra)
        for name in _RECORD_FIELDS:
            value = getattr(self, name)
            record[name] = list(value) if isinstance(value, tuple) else value
        return record

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Chunk:
        """Inverse of `to_record` (the stage cache stores chunks as records)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in known
        }
        extra = {k: v for k, v in record.items() if k not in known}
        return cls(**values, extra=extra)


_RECORD_FIELDS = tuple(f.name for f in fields(Chunk) if f.name != "extra")


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
