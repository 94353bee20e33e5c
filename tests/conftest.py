"""Fixtures shared across the suite."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from chunking.tokens import TokenCounter, get_token_counter
from config.settings import ChunkingSettings

# The engines the store tests run on: both embedded ones, or the server in QDRANT_URL.
ENGINES = ("server",) if os.environ.get("QDRANT_URL") else ("edge", "local")


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    """The Qdrant engine of a store test (testkit/index_helpers.py `store_factory`)."""
    return str(request.param)


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return get_token_counter()


@pytest.fixture()
def chunking_settings() -> ChunkingSettings:
    return ChunkingSettings()  # type: ignore[call-arg]


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test picks up the developer's INGEST_*/CHUNK_* variables by accident."""
    for name in list(os.environ):
        if name.startswith(("INGEST_", "CHUNK_")):
            monkeypatch.delenv(name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with the most slow tests run first. pytest-xdist hands out whole files in this
    order (`--no-loadscope-reorder` in pyproject.toml), so the long files start while there
    is still other work to share out, instead of one running alone at the end of the suite."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[item.path])  # stable: each file's tests stay together
