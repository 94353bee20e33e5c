"""Source kinds: a kind's name (the one word used in settings, on the command line, as the
flow's `source` parameter and in the run's scope) -> the connector class that reads it,
as a "module:Class" string imported on first use (after Onyx's connectors/registry.py).

The built-in kinds are listed here, one line each; the `sources` setting adds more
without editing the project (`sources: {wiki: "my_package.wiki:WikiConnector"}`). A kind
is also the name of its settings section (`confluence.url`, `INGEST_FILES__PATHS`), which
the class's `settings_model` validates: the settings loader imports each known kind's
class for that, and for nothing else. Classes are named by string, so nothing here
imports a connector: the layers below the pipeline stay plain, and `connectors.registry`
gives the pipeline the classes typed.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel

from config.errors import ConfigError

BUILTIN_SOURCES: Mapping[str, str] = MappingProxyType(
    {
        "confluence": "connectors.confluence.connector:ConfluenceConnector",
        "files": "connectors.files:FilesConnector",
    }
)
# The kind a flow run reads when its `source` parameter is left out (deployments and
# `ingest run` always name theirs).
DEFAULT_SOURCE = "confluence"


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


def source_class(kind: str, extra: Mapping[str, str]) -> Any:
    """The class of `kind`, imported now (typed by `connectors.registry`)."""
    target = known_sources(extra)[check_source(kind, extra)]
    module_name, _, class_name = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"source {kind!r}: cannot import {target!r} ({type(exc).__name__}: {exc})",
            setting="sources",
        ) from None


def settings_models(extra: Mapping[str, str]) -> dict[str, type[BaseModel]]:
    """kind -> the model of its settings section, for every known kind that has one
    (`settings_model` of its class)."""
    models: dict[str, type[BaseModel]] = {}
    for kind in known_sources(extra):
        model = getattr(source_class(kind, extra), "settings_model", None)
        if model is None:
            continue
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise ConfigError(
                f"source {kind!r}: its settings_model {model!r} is no pydantic model",
                setting="sources",
            )
        models[kind] = model
    return models
