"""Vectors in the stage cache, one entry per text: embeddings by `(model id, embed_text)`
(SPEC §4), so a text is embedded once by a model whatever chunk carries it, and lexical
weights by `(encoder id, embed_text)` (SPEC §4.1)."""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

import numpy as np

from indexing.embedders import Embedder, Embedding
from indexing.lexical import LexicalEncoder, SparseWeights
from stage_cache.keys import CacheKey, sha256_hex
from stage_cache.store import StageCache

V = TypeVar("V")


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


class EmbedResult(NamedTuple):
    """Unpacks as `(embeddings, hits, misses)`; hits and misses count distinct texts."""

    embeddings: list[Embedding]
    hits: int
    misses: int


class LexicalResult(NamedTuple):
    """Unpacks as `(weights, hits, misses)`; hits and misses count distinct texts."""

    weights: list[SparseWeights]
    hits: int
    misses: int


def _per_text(
    texts: Sequence[str],
    key_of: Callable[[str], CacheKey],
    compute: Callable[[list[str]], list[V]],
    encode: Callable[[V], bytes],
    decode: Callable[[bytes], V],
    cache: StageCache,
) -> tuple[list[V], int, int]:
    """Values of `texts` in order: cached ones read, the others computed (each distinct
    text once) and cached. Returns them with the distinct texts found and computed."""
    keys = [key_of(text) for text in texts]
    found: dict[str, V] = {}
    for key in keys:
        if key.digest not in found:
            raw = cache.get(key)
            if raw is not None:
                found[key.digest] = decode(raw)
    hits = len(found)
    pending = {key.digest: (key, text) for key, text in zip(keys, texts, strict=True)}
    pending = {digest: item for digest, item in pending.items() if digest not in found}
    if pending:
        fresh = compute([text for _, text in pending.values()])
        for (digest, (key, _)), value in zip(pending.items(), fresh, strict=True):
            found[digest] = value
            cache.put(key, encode(value))
    return [found[key.digest] for key in keys], hits, len(pending)


def embed_with_cache(embedder: Embedder, texts: Sequence[str], cache: StageCache) -> EmbedResult:
    """Embeddings of `texts` in order; only texts never embedded by this model are sent
    to the embedder (each distinct text once), and their results are cached."""
    values, hits, misses = _per_text(
        texts,
        lambda text: embed_key(embedder.model_id, text),
        lambda pending: embedder.embed(pending),
        encode_embedding,
        decode_embedding,
        cache,
    )
    return EmbedResult(values, hits, misses)


def lexical_with_cache(
    encoder: LexicalEncoder, texts: Sequence[str], cache: StageCache
) -> LexicalResult:
    """Lexical weights of `texts` in order, each text encoded once by these settings.
    Written without fsync: a torn entry is a checked miss, and recomputing one costs less
    than syncing it."""
    unsynced = StageCache(cache.root, enabled=cache.enabled, fsync=False)
    values, hits, misses = _per_text(
        texts,
        lambda text: lexical_key(encoder.id, text),
        lambda pending: [encoder.encode(text) for text in pending],
        encode_weights,
        decode_weights,
        unsynced,
    )
    return LexicalResult(values, hits, misses)
