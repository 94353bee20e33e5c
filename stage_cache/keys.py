"""Cache keys: a stage result is addressed by `sha256(stage | stage_version | config_hash |
input_sha256)`; configurations are hashed without their secrets
(docs/architecture.md#the-stage-cache)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, SecretStr

# Field names that hold secrets even when they are not typed SecretStr.
_SECRET_NAMES = frozenset({"token", "api_key", "password", "secret", "authorization"})


@dataclass(frozen=True)
class CacheKey:
    stage: str
    digest: str


def sha256_hex(data: bytes | str) -> str:
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def stage_key(stage: str, stage_version: str, config_hash: str, input_sha256: str) -> CacheKey:
    """Key of a normalize/chunk/... result: `sha256(stage | version | config | input)`."""
    return CacheKey(stage, sha256_hex(f"{stage}|{stage_version}|{config_hash}|{input_sha256}"))


def config_hash(config: BaseModel | Mapping[str, Any]) -> str:
    """sha256 of a configuration's canonical JSON, secrets left out
    (docs/architecture.md#the-stage-cache)."""
    data = config.model_dump(mode="python") if isinstance(config, BaseModel) else config
    canonical = json.dumps(_without_secrets(data), sort_keys=True, default=str)
    return sha256_hex(canonical)


def _without_secrets(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {
            str(k): _without_secrets(v)
            for k, v in value.items()
            if not isinstance(v, SecretStr) and str(k).lower() not in _SECRET_NAMES
        }
    if isinstance(value, list | tuple):
        return [_without_secrets(v) for v in value if not isinstance(v, SecretStr)]
    return value
