"""The source kinds (config/sources.py: one line per built-in kind, more through the
`sources` setting) with their connector classes typed for the pipeline."""

from __future__ import annotations

from collections.abc import Mapping

from config.sources import source_class
from connectors.base import ConnectorClass


def connector_class(kind: str, extra: Mapping[str, str]) -> ConnectorClass:
    """The connector class of `kind`, imported now; a ConfigError names an unknown kind or
    a class that cannot be imported."""
    found: ConnectorClass = source_class(kind, extra)
    return found
