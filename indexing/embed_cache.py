"""Vectors in the stage cache, one entry per text: embeddings by `(model id, embed_text)`
(docs/architecture.md#the-stage-cache), so a text is embedded once by a model whatever chunk
carries it, and lexical weights by `(encoder id, embed_text)` (docs/qdrant.md#lexical-retrieval)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np

from chunking.parts import PartSplitter
from chunking.record import Chunk
from indexing.embedders import Embedder, Embedding
from indexing.lexical import LexicalEncoder, SparseWeights
from stage_cache.cached import CachedValues, Codec, cached_each
from stage_cache.keys import CacheKey, sha256_hex
from stage_cache.store import StageCache


def embed_key(model_id: str, embed_text: str) -> CacheKey:
    """Key of one embedding: `sha256(model id | embed_text)`, whatever the chunk's id."""
    return CacheKey("embed", sha256_hex(f"{model_id}|{embed_text}"))


def lexical_key(encoder_id: str, embed_text: str) -> CacheKey:
    """Key of one text's lexical weights: `sha256(encoder id | embed_text)`."""
    return CacheKey("lexical", sha256_hex(f"{encoder_id}|{embed_text}"))


_EMBEDDING_HEADER = struct.Struct("<II")  # dense size, sparse entries (or _NO_SPARSE)
_SPARSE_HEADER = struct.Struct("<I")  # entries
_NO_SPARSE = 0xFFFFFFFF


def _sparse_bytes(weights: SparseWeights) -> bytes:
    """uint32 ids, then float32 weights."""
    ids = np.fromiter(weights.keys(), dtype="<u4", count=len(weights))
    values = np.fromiter(weights.values(), dtype="<f4", count=len(weights))
    return ids.tobytes() + values.tobytes()


def _sparse_from(data: bytes, entries: int, offset: int) -> SparseWeights:
    ids = np.frombuffer(data, dtype="<u4", count=entries, offset=offset).tolist()
    values = np.frombuffer(data, dtype="<f4", count=entries, offset=offset + 4 * entries)
    return dict(zip(ids, values.tolist(), strict=True))


def encode_embedding(embedding: Embedding) -> bytes:
    """float32 dense vector, then the sparse part (ids and weights)."""
    dense = np.asarray(embedding.dense, dtype="<f4")
    sparse = embedding.sparse
    if sparse is None:
        return _EMBEDDING_HEADER.pack(dense.size, _NO_SPARSE) + dense.tobytes()
    header = _EMBEDDING_HEADER.pack(dense.size, len(sparse))
    return header + dense.tobytes() + _sparse_bytes(sparse)


def decode_embedding(data: bytes) -> Embedding:
    size, entries = _EMBEDDING_HEADER.unpack_from(data)
    offset = _EMBEDDING_HEADER.size
    dense = np.frombuffer(data, dtype="<f4", count=size, offset=offset).tolist()
    if entries == _NO_SPARSE:
        return Embedding(dense=dense)
    return Embedding(dense=dense, sparse=_sparse_from(data, entries, offset + 4 * size))


def encode_weights(weights: SparseWeights) -> bytes:
    return _SPARSE_HEADER.pack(len(weights)) + _sparse_bytes(weights)


def decode_weights(data: bytes) -> SparseWeights:
    (entries,) = _SPARSE_HEADER.unpack_from(data)
    return _sparse_from(data, entries, _SPARSE_HEADER.size)


EMBEDDING = Codec(encode_embedding, decode_embedding)
WEIGHTS = Codec(encode_weights, decode_weights)


def embed_with_cache(
    embedder: Embedder, texts: Sequence[str], cache: StageCache
) -> CachedValues[Embedding]:
    """Embeddings of `texts` in order; only texts never embedded by this model are sent
    to the embedder (each distinct text once), and their results are cached."""
    return cached_each(
        cache,
        [embed_key(embedder.model_id, text) for text in texts],
        lambda missing: embedder.embed([texts[i] for i in missing]),
        EMBEDDING,
    )


def parts_with_cache(
    embedder: Embedder, splitter: PartSplitter, chunks: Sequence[Chunk], cache: StageCache
) -> CachedValues[list[list[float]]]:
    """Each chunk's part vectors (`dense_parts`), in order; each part text is embedded once
    by this model whatever chunk carries it (the embedding cache's own key). `hits` and
    `misses` count part texts."""
    texts = [splitter.texts(chunk) for chunk in chunks]
    embedded = embed_with_cache(embedder, [t for chunk_texts in texts for t in chunk_texts], cache)
    vectors: list[list[list[float]]] = []
    start = 0
    for chunk_texts in texts:
        vectors.append([e.dense for e in embedded.values[start : start + len(chunk_texts)]])
        start += len(chunk_texts)
    return CachedValues(vectors, embedded.hits, embedded.misses)


def lexical_with_cache(
    encoder: LexicalEncoder, texts: Sequence[str], cache: StageCache
) -> CachedValues[SparseWeights]:
    """Lexical weights of `texts` in order, each text encoded once by these settings.
    Written without fsync: a torn entry is a checked miss, and recomputing one costs less
    than syncing it."""
    return cached_each(
        StageCache(cache.root, enabled=cache.enabled, fsync=False),
        [lexical_key(encoder.id, text) for text in texts],
        lambda missing: [encoder.encode(texts[i]) for i in missing],
        WEIGHTS,
    )
