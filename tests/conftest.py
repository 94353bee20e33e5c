"""Fixtures shared across the suite, and a guard: nothing outside the checkout's own files
is read by a test (a user's clone has no `../shared` beside it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from chunking.tokens import TokenCounter, get_token_counter
from config.settings import ChunkingSettings


@pytest.fixture(scope="session")
def counter() -> TokenCounter:
    return get_token_counter()


@pytest.fixture()
def chunking_settings() -> ChunkingSettings:
    return ChunkingSettings()  # type: ignore[call-arg]


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test picks up the developer's INGEST_*/CHUNK_* variables by accident."""
    import os

    for name in list(os.environ):
        if name.startswith(("INGEST_", "CHUNK_")):
            monkeypatch.delenv(name)


_BESIDE_THE_CHECKOUT = str(Path(__file__).resolve().parents[2] / "shared") + os.sep


def _refuse_reads_beside_the_checkout(event: str, args: tuple[Any, ...]) -> None:
    if event not in ("open", "os.listdir", "os.scandir") or not args:
        return
    path = args[0]
    if isinstance(path, str | bytes | os.PathLike):
        text = os.path.abspath(os.fsdecode(path))
        if (text + os.sep).startswith(_BESIDE_THE_CHECKOUT):
            raise PermissionError(
                f"a test read {text}: copy what tests need into the repository (tests/corpus)"
            )


sys.addaudithook(_refuse_reads_beside_the_checkout)
