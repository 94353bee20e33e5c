"""A collection's schema: the named vectors, the payload indexes and the metadata this
project keeps, and what a collection holds (`CollectionSchema`). Shared by the store
(indexing/qdrant_store.py) and the engines it speaks to (indexing/edge.py), so neither
imports the other for it.

Named vectors: `dense` (cosine, size from the embedder); with `parts.enabled`,
`dense_parts` (the same model's vectors of the chunk's parts, a multivector compared by
MaxSim, chunking/parts.py); when the embedder has one,
`sparse` (BGE-M3 lexical weights); and, with `lexical.enabled`, `lexical` (contextual
BM25 term weights, indexing/lexical.py). `sparse` has NO IDF modifier: BGE-M3's lexical
score is the plain dot product of learned term weights, which already encode term
importance. `lexical` has `Modifier.IDF`: Qdrant (every engine) supplies the inverse
document frequency as points come and go, so the dot product is BM25.

A collection's metadata records what made its vectors (model id, lexical encoder id) and
how it split parts (parts id) and chunks (chunking id), and its part in a re-index
(`state`: live, building, retired), see indexing/reindex.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from qdrant_client import models

from chunking.record import CONTAINER_FIELD
from config.errors import ConfigError

PayloadIndexSchema = (
    models.PayloadSchemaType
    | models.KeywordIndexParams
    | models.IntegerIndexParams
    | models.DatetimeIndexParams
)
DENSE = "dense"
DENSE_PARTS = "dense_parts"
SPARSE = "sparse"
LEXICAL = "lexical"
METADATA_KEY = "ingest"  # the collection metadata this project writes, under one key

# The fields a search filters on (tenant, document, source type, space, labels, update
# time, the ACL fields) and the version (reconcile filters on it). `tenant_id` is the
# tenant index: Qdrant co-locates a tenant's points.
# `section_id` and `document_id` + `ordinal` (a range index) make search's expansion of a
# hit to its section or neighbours a lookup, not a scan.
# Fields only looked up (a document's points, a section, neighbours, a version) need no
# HNSW links of their own: building them for every value multiplies the index build.
_LOOKUP_KEYWORD = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False)
PAYLOAD_INDEXES: Mapping[str, PayloadIndexSchema] = MappingProxyType(
    {
        "tenant_id": models.KeywordIndexParams(
            type=models.KeywordIndexType.KEYWORD, is_tenant=True
        ),
        "document_id": _LOOKUP_KEYWORD,
        "section_id": _LOOKUP_KEYWORD,
        "ordinal": models.IntegerIndexParams(
            type=models.IntegerIndexType.INTEGER, lookup=False, range=True, enable_hnsw=False
        ),
        "source_type": models.PayloadSchemaType.KEYWORD,
        CONTAINER_FIELD: models.PayloadSchemaType.KEYWORD,
        "labels": models.PayloadSchemaType.KEYWORD,
        "updated_at": models.DatetimeIndexParams(
            type=models.DatetimeIndexType.DATETIME, enable_hnsw=False
        ),
        "source_version_id": _LOOKUP_KEYWORD,
        "archived": models.PayloadSchemaType.BOOL,
        "acl.public": models.PayloadSchemaType.BOOL,
        "acl.users": models.PayloadSchemaType.KEYWORD,
        "acl.groups": models.PayloadSchemaType.KEYWORD,
        "acl.restricted": models.PayloadSchemaType.BOOL,
        "acl.space_open": models.PayloadSchemaType.BOOL,
        "acl.space_users": models.PayloadSchemaType.KEYWORD,
        "acl.space_groups": models.PayloadSchemaType.KEYWORD,
    }
)

# `dense` as `qdrant.quantization` asks: int8 copies (quantile 0.99 leaves the extreme 1%
# of values out of the range) kept in RAM, graph built and searched over them; a search
# rescores what it finds with the float vectors (Qdrant's default).
QUANTIZATION: Mapping[str, models.QuantizationConfig | None] = MappingProxyType(
    {
        "int8": models.ScalarQuantization(
            scalar=models.ScalarQuantizationConfig(
                type=models.ScalarType.INT8, quantile=0.99, always_ram=True
            )
        ),
        "none": None,
    }
)


@dataclass(frozen=True)
class CollectionSchema:
    """The vectors a collection holds and what made them (kept in its metadata)."""

    vector_size: int
    sparse: bool  # BGE-M3's learned sparse weights
    lexical: bool  # contextual BM25 weights, IDF from Qdrant
    model_id: str | None = None
    lexical_id: str | None = None
    parts: bool = False  # `dense_parts`: the chunk's parts embedded, compared by MaxSim
    parts_id: str | None = None
    # What made the chunks (the chunking settings' fingerprint): a change is applied in
    # place by a run, or through a new collection by `ingest reindex`.
    chunking_id: str | None = None

    def chunking_changed(self, wanted: CollectionSchema) -> bool:
        """Whether `wanted` cuts chunks otherwise. A collection made before the chunking
        was recorded counts as changed: nothing tells what cut its chunks, and taking it
        for unchanged would let a change go live ungated."""
        return wanted.chunking_id is not None and self.chunking_id != wanted.chunking_id

    def conflicts(self, wanted: CollectionSchema) -> list[str]:
        """Vectors of `wanted` this collection cannot take beside its own, in words."""
        found = []
        if self.vector_size != wanted.vector_size:
            found.append(f"dense vectors of size {wanted.vector_size} (it has {self.vector_size})")
        elif _differ(self.model_id, wanted.model_id):
            found.append(f"vectors of {wanted.model_id} (it has {self.model_id})")
        return found

    def refuse_conflicts(self, wanted: CollectionSchema, name: str) -> None:
        """Stop, naming the re-index, when collection `name` cannot hold `wanted`."""
        conflicts = self.conflicts(wanted)
        if conflicts:
            raise ConfigError(
                f"collection {name!r} cannot hold {conflicts[0]}: {REINDEX_ADVICE}, or "
                "pick another qdrant.collection",
                setting="qdrant.collection",
            )

    def lacks(self, wanted: CollectionSchema) -> dict[str, str]:
        """Vectors of `wanted` this collection does not have (or has made otherwise):
        vector name -> in words."""
        found = {}
        if wanted.sparse and not self.sparse:
            found[SPARSE] = "the BGE-M3 'sparse' vector"
        if wanted.lexical and not self.lexical:
            found[LEXICAL] = "the 'lexical' vector of hybrid search"
        elif wanted.lexical and _differ(self.lexical_id, wanted.lexical_id):
            found[LEXICAL] = f"lexical weights of {wanted.lexical_id} (it has {self.lexical_id})"
        if wanted.parts and not self.parts:
            found[DENSE_PARTS] = "the 'dense_parts' vectors of the chunks' parts"
        elif wanted.parts and _differ(self.parts_id, wanted.parts_id):
            found[DENSE_PARTS] = f"parts split as {wanted.parts_id} (it has {self.parts_id})"
        return found


def _differ(recorded: str | None, wanted: str | None) -> bool:
    """Both known and not the same (a collection made before ids were recorded has none)."""
    return None not in (recorded, wanted) and recorded != wanted


REINDEX_ADVICE = (
    "run `ingest reindex` (or the flow with reindex: true) to build a collection that "
    "holds it from the stage cache and move the alias to it"
)


def schema_of(info: models.CollectionInfo) -> CollectionSchema:
    """What a collection holds, from its configuration and the metadata this project wrote."""
    vectors = info.config.params.vectors
    dense = vectors.get(DENSE) if isinstance(vectors, dict) else None
    sparse_vectors = info.config.params.sparse_vectors or {}
    recorded = (info.config.metadata or {}).get(METADATA_KEY) or {}
    return CollectionSchema(
        vector_size=dense.size if dense is not None else 0,
        sparse=SPARSE in sparse_vectors,
        lexical=LEXICAL in sparse_vectors,
        model_id=recorded.get("model_id"),
        lexical_id=recorded.get("lexical_id"),
        parts=isinstance(vectors, dict) and DENSE_PARTS in vectors,
        parts_id=recorded.get("parts_id"),
        chunking_id=recorded.get("chunking_id"),
    )
