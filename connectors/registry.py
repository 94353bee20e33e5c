"""Source kinds: a kind's name (the one word used in settings, on the command line, as
the flow's `source` parameter and in the run's scope) -> the connector class that reads
it, as a "module:Class" string imported on first use (after Onyx's
connectors/registry.py), so a run of one kind never imports another kind's client.

Built-in kinds are listed here; the `sources` setting adds more without editing the
project (`sources: {wiki: "my_package.wiki:WikiConnector"}`).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType

from config.errors import ConfigError
from connectors.base import ConnectorClass

BUILTIN_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "confluence": "connectors.confluence.connector:ConfluenceConnector",
        "files": "connectors.files:FilesConnector",
    }
)


def known_sources(extra: Mapping[str, str]) -> Mapping[str, str]:
    """Every kind a run may name: the built-in ones, then those of the `sources` setting
    (which may replace a built-in one)."""
    return {**BUILTIN_SOURCES, **extra}


def check_source(kind: str, extra: Mapping[str, str]) -> str:
    """`kind` if it names a known source, else a ConfigError naming the known ones."""
    known = known_sources(extra)
    if kind not in known:
        raise ConfigError(
            f"unknown source {kind!r}; known sources: {', '.join(sorted(known))} "
            "(register more under the `sources` setting as kind: 'module:Class')",
            setting="sources",
        )
    return kind


def connector_class(kind: str, extra: Mapping[str, str]) -> ConnectorClass:
    """The connector class of `kind`, imported now."""
    target = known_sources(extra)[check_source(kind, extra)]
    module_name, _, class_name = target.partition(":")
    try:
        found: ConnectorClass = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"source {kind!r}: cannot import {target!r} ({type(exc).__name__}: {exc})",
            setting="sources",
        ) from None
    return found
