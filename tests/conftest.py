"""Fixtures shared across the suite."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

from chunking.tokens import TokenCounter, get_token_counter
from config.settings import ChunkingSettings
from tests.quickstart_run import Quickstart, first_run

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


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> Quickstart:
    """The README quickstart's first run (tests/quickstart_run.py), once a session: the
    tests of SAME_WORKER's "quickstart" files read its index and reuse its state."""
    return first_run(tmp_path_factory.mktemp("quickstart"))


# Test files that go to one pytest-xdist worker together, as one unit of work: they share
# a session fixture that takes long to build, which a worker builds once.
SAME_WORKER = {
    "tests/test_quickstart.py": "quickstart",
    "tests/test_eval.py": "quickstart",
}


def _unit(path: str) -> str:
    """The unit of work (`--dist=loadfile`) of a test file given by its path from the root."""
    return SAME_WORKER.get(path, path)


class _SharedFileScheduling(LoadFileScheduling):  # type: ignore[misc]  # xdist is untyped
    """`--dist=loadfile`, with the files of SAME_WORKER sent to one worker."""

    def _split_scope(self, nodeid: str) -> str:
        return _unit(super()._split_scope(nodeid))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getoption("dist") != "loadfile":
        return None  # pytest-xdist's own scheduler for the mode asked
    return _SharedFileScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Units of work (files, or SAME_WORKER's groups) with the most slow tests run first.
    pytest-xdist hands them out in this order (`--no-loadscope-reorder` in pyproject.toml),
    so the long ones start while there is still other work to share out, instead of one
    running alone at the end of the suite."""
    root = Path(config.rootpath)

    def unit(item: pytest.Item) -> str:
        return _unit(item.path.relative_to(root).as_posix())

    slow = Counter(unit(item) for item in items if item.get_closest_marker("slow"))
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        first.setdefault(unit(item), index)
    # each unit's tests stay together, in the order they were collected
    items.sort(key=lambda item: (-slow[unit(item)], first[unit(item)]))
