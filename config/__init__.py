"""Configuration and shared error codes: the bottom layer every package may import."""

from config.errors import ConfigError, ErrorCode, IngestError
from config.settings import (
    CacheSettings,
    ChunkingSettings,
    EmbedderSettings,
    LimitsSettings,
    QdrantSettings,
    ReconcileSettings,
    RunSettings,
    Settings,
    load_settings,
)

__all__ = [
    "CacheSettings",
    "ChunkingSettings",
    "ConfigError",
    "EmbedderSettings",
    "ErrorCode",
    "IngestError",
    "LimitsSettings",
    "QdrantSettings",
    "ReconcileSettings",
    "RunSettings",
    "Settings",
    "load_settings",
]
