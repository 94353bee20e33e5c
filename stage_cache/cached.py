"""The one way a stage goes through the cache: look its entries up, compute the missing
ones, write them (docs/architecture.md#the-stage-cache). Normalizing and chunking cache one value
per document, embedding and lexical encoding one per text, computed in batches: `cached_each` serves
both, `cached` is its one-key form."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from stage_cache.keys import CacheKey
from stage_cache.store import StageCache, json_bytes

V = TypeVar("V")


def _always(_: object) -> bool:
    return True


@dataclass(frozen=True)
class Codec(Generic[V]):
    """How a stage's value is stored: as bytes and back. A value `final` calls false is
    not stored: it holds what a moment gave (a picture whose OCR ran out of time under
    load), so the next run computes it again instead of reading it forever."""

    encode: Callable[[V], bytes]
    decode: Callable[[bytes], V]
    final: Callable[[V], bool] = _always


JSON: Codec[Any] = Codec(json_bytes, json.loads)


class CachedValues(NamedTuple, Generic[V]):
    """The values of the keys asked for, in order; `hits` and `misses` count distinct
    keys read and computed."""

    values: list[V]
    hits: int
    misses: int


def cached_each(
    cache: StageCache,
    keys: Sequence[CacheKey],
    compute: Callable[[list[int]], Sequence[V]],
    codec: Codec[V],
    *,
    reuse: bool = True,
) -> CachedValues[V]:
    """The value of each of `keys`: read from the cache, else computed and written
    (where the codec calls it final).
    `compute` gets the positions in `keys` of the distinct keys not read (the first
    position of each) and returns their values in that order, in one call. `reuse`
    false reads nothing (a forced run) but still writes."""
    found: dict[str, V] = {}
    if reuse:
        for key in keys:
            if key.digest not in found and (raw := cache.get(key)) is not None:
                found[key.digest] = codec.decode(raw)
    hits = len(found)
    missing: dict[str, int] = {}
    for position, key in enumerate(keys):
        if key.digest not in found:
            missing.setdefault(key.digest, position)
    if missing:
        fresh = compute(list(missing.values()))
        for (digest, position), value in zip(missing.items(), fresh, strict=True):
            found[digest] = value
            if codec.final(value):
                cache.put(keys[position], codec.encode(value))
    return CachedValues([found[key.digest] for key in keys], hits, len(missing))


def cached(
    cache: StageCache,
    key: CacheKey,
    compute: Callable[[], V],
    codec: Codec[V],
    *,
    reuse: bool = True,
) -> tuple[V, bool]:
    """`key`'s value, read from the cache or computed and written; and whether it was
    read."""
    values, hits, _ = cached_each(cache, [key], lambda _: [compute()], codec, reuse=reuse)
    return values[0], hits == 1
