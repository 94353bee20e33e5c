"""Embeddings in the stage cache: one entry per `(model id, embed_text)` (SPEC §4), so a
text is embedded once by a model whatever chunk carries it."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from indexing.embedders import Embedder, Embedding
from stage_cache.keys import CacheKey, sha256_hex
from stage_cache.store import StageCache


def embed_key(model_id: str, embed_text: str) -> CacheKey:
    """Key of one embedding: `sha256(model id | embed_text)`, whatever the chunk's id."""
    return CacheKey("embed", sha256_hex(f"{model_id}|{embed_text}"))


_EMBEDDING_HEADER = struct.Struct("<II")  # dense size, sparse entries (or _NO_SPARSE)
_NO_SPARSE = 0xFFFFFFFF


def encode_embedding(embedding: Embedding) -> bytes:
    """float32 dense vector, then uint32 token ids and float32 weights of the sparse part."""
    dense = np.asarray(embedding.dense, dtype="<f4")
    sparse = embedding.sparse
    if sparse is None:
        return _EMBEDDING_HEADER.pack(dense.size, _NO_SPARSE) + dense.tobytes()
    ids = np.fromiter(sparse.keys(), dtype="<u4", count=len(sparse))
    weights = np.fromiter(sparse.values(), dtype="<f4", count=len(sparse))
    header = _EMBEDDING_HEADER.pack(dense.size, len(sparse))
    return header + dense.tobytes() + ids.tobytes() + weights.tobytes()


def decode_embedding(data: bytes) -> Embedding:
    size, entries = _EMBEDDING_HEADER.unpack_from(data)
    offset = _EMBEDDING_HEADER.size
    dense = np.frombuffer(data, dtype="<f4", count=size, offset=offset).tolist()
    if entries == _NO_SPARSE:
        return Embedding(dense=dense)
    offset += 4 * size
    ids = np.frombuffer(data, dtype="<u4", count=entries, offset=offset).tolist()
    weights = np.frombuffer(data, dtype="<f4", count=entries, offset=offset + 4 * entries)
    return Embedding(dense=dense, sparse=dict(zip(ids, weights.tolist(), strict=True)))


class EmbedResult(NamedTuple):
    """Unpacks as `(embeddings, hits, misses)`; hits and misses count distinct texts."""

    embeddings: list[Embedding]
    hits: int
    misses: int


def embed_with_cache(embedder: Embedder, texts: Sequence[str], cache: StageCache) -> EmbedResult:
    """Embeddings of `texts` in order; only texts never embedded by this model are sent
    to the embedder (each distinct text once), and their results are cached."""
    keys = [embed_key(embedder.model_id, text) for text in texts]
    found: dict[str, Embedding] = {}
    hits = 0
    for key in keys:
        if key.digest in found:
            continue
        raw = cache.get(key)
        if raw is not None:
            found[key.digest] = decode_embedding(raw)
            hits += 1
    pending = {key.digest: text for key, text in zip(keys, texts, strict=True)}
    pending = {digest: text for digest, text in pending.items() if digest not in found}
    if pending:
        fresh = embedder.embed(list(pending.values()))
        for (digest, _), embedding in zip(pending.items(), fresh, strict=True):
            found[digest] = embedding
            cache.put(CacheKey("embed", digest), encode_embedding(embedding))
    return EmbedResult(
        embeddings=[found[key.digest] for key in keys], hits=hits, misses=len(pending)
    )
