"""Opening a store: the client of one Qdrant (a server, an Edge directory, a local-mode
directory), chosen by the settings (indexing/engine.py), the store lock of an embedded
engine, and what the stores over one connection share."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from threading import Lock, RLock
from typing import Any, Literal, TypeVar

from config.settings import QdrantSettings
from indexing import store_lock
from indexing.engine import Engine, StoreClient, engine_of

T = TypeVar("T")

# What a client call does: `writes` change a collection (points, payloads, indexes,
# aliases, metadata, creation), `reads` leave it as it was.
StoreWork = Literal["writes", "reads"]


class StoreSeconds:
    """Seconds spent inside the store client's own calls, by `StoreWork`: what the engine
    took, without the work around it (embedding, payloads built, waits for the lock).
    The embedded engines run one call at a time (the connection's lock), so their sum is
    wall time; a server's calls from several threads overlap, and so may the sum."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._seconds: dict[str, float] = {"writes": 0.0, "reads": 0.0}

    def timed(self, work: StoreWork, operation: Callable[[], T]) -> T:
        started = time.perf_counter()
        try:
            return operation()
        finally:
            elapsed = time.perf_counter() - started
            with self._lock:
                self._seconds[work] += elapsed

    def totals(self) -> dict[str, float]:
        with self._lock:
            return dict(self._seconds)


class QdrantConnection:
    """The client of one Qdrant (a server URL, an Edge directory, or a local-mode
    directory) and what the stores over it share. The embedded engines allow one process
    per directory (a file lock), so a run opens one connection, hands its stores around,
    and closes it at the end; a closed connection opens a new client when next used
    (Qdrant came back)."""

    def __init__(self, settings: QdrantSettings) -> None:
        self.settings = settings
        self.kind: Engine = engine_of(settings)
        self.engine = self.kind.name
        self._client: StoreClient | None = None
        self._opening = Lock()
        # An engine whose calls are serialized has them run one at a time here.
        self.lock: AbstractContextManager[Any] = RLock() if self.kind.serialized else nullcontext()
        self.creating = Lock()  # one collection creation at a time in this process
        # The client's seconds of the stores over this connection (but those given their
        # own, `QdrantStore(seconds=...)`).
        self.seconds = StoreSeconds()
        # What this run was already told about a collection's schema (said once a run).
        self.warned: set[str] = set()

    def __enter__(self) -> QdrantConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def client(self) -> StoreClient:
        """The client, opened on first use; an embedded store's lock is taken first
        (waiting `qdrant.lock_wait_s` for another process to let it go)."""
        with self._opening:
            if self._client is None:
                embedded = self.kind.embedded
                if embedded:
                    store_lock.acquire(Path(self.settings.path), self.settings.lock_wait_s)
                try:
                    self._client = self.kind.open(self.settings)
                except BaseException:
                    if embedded:
                        store_lock.release(Path(self.settings.path))
                    raise
            return self._client

    def earlier_store(self) -> QdrantSettings | None:
        """The settings of a store another engine keeps at this one's place, which this
        engine would not read (None: there is none)."""
        return self.kind.earlier_store(self.settings)

    def close(self) -> None:
        """Close the client; an embedded store's lock goes with it (when no other
        connection of this process holds the store)."""
        with self._opening:
            client, self._client = self._client, None
            if client is not None:
                client.close()
                if self.kind.embedded:
                    store_lock.release(Path(self.settings.path))
