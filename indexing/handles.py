"""What a process opens once to reach the index: the Qdrant connection (an embedded store
allows one process, so one connection, per directory), the embedder and the lexical
encoder. A reader (`query.api.Index`) opens these alone; a run's `tasks.resources.Resources`
adds its connectors and pictures to them.
"""

from __future__ import annotations

import threading

from pydantic import SecretStr

from config.secrets import in_secret_block, secret_value
from config.settings import Settings
from indexing.embedders import Embedder, make_embedder
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore, StoreSeconds
from indexing.store_schema import CollectionSchema


class IndexHandles:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._lexical: LexicalEncoder | None = None
        self._qdrant: QdrantConnection | None = None

    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.settings.embedder)
            return self._embedder

    def lexical(self) -> LexicalEncoder | None:
        """The lexical (BM25) encoder, None when `lexical.enabled` is off."""
        if not self.settings.lexical.enabled:
            return None
        with self._lock:
            if self._lexical is None:
                self._lexical = LexicalEncoder(self.settings.lexical)
            return self._lexical

    def schema(self, embedder: Embedder | None) -> CollectionSchema:
        """The collection's vectors these settings (and this embedder, when given) make;
        a reader searches what the collection holds, whatever this says."""
        lexical = self.lexical()
        return CollectionSchema(
            vector_size=(
                embedder.vector_size if embedder else self.settings.embedder.vector_size or 0
            ),
            sparse=embedder.has_sparse if embedder else self.settings.embedder.sparse,
            lexical=lexical is not None,
            model_id=embedder.model_id if embedder else None,
            lexical_id=lexical.id if lexical else None,
        )

    def store(
        self,
        embedder: Embedder | None = None,
        *,
        check: bool = True,
        seconds: StoreSeconds | None = None,
    ) -> QdrantStore:
        """The Qdrant store; without an embedder it can read (plan, delete, search) but
        not create. With one it creates the collection, or checks it can hold the
        embedder's vectors (`check=False`: left to a re-index). Its client calls' seconds
        go to `seconds`, by default to `store_seconds`."""
        store = QdrantStore(self._connection(), self.schema(embedder), seconds=seconds)
        if embedder is not None and check:
            store.ensure_collection()
        return store

    def store_seconds(self) -> dict[str, float]:
        """Seconds inside the store client's calls of this process's stores so far, by
        work (`StoreSeconds`), but for those of stores given their own."""
        return self._connection().seconds.totals()

    def _connection(self) -> QdrantConnection:
        with self._lock:
            if self._qdrant is None:
                section = self.settings.qdrant
                if in_secret_block(section, "api_key"):
                    key = SecretStr(secret_value(section, "api_key") or "")
                    section = section.model_copy(update={"api_key": key})
                self._qdrant = QdrantConnection(section)
            return self._qdrant

    def hold_store(self) -> None:
        """Open an embedded store now and keep it until `close`: its lock is taken (or
        waited for, `qdrant.lock_wait_s`), so a store another process holds stops a run
        before any work (a STORE_BUSY IngestError). Nothing to hold on a server."""
        if not self.settings.qdrant.url:
            _ = self._connection().client

    def release_store(self) -> None:
        """Let the store go (an embedded store's lock with it) and keep the rest: the
        next `store()` opens it again."""
        with self._lock:
            qdrant = self._qdrant
        if qdrant is not None:
            qdrant.close()

    def close(self) -> None:
        with self._lock:
            self._embedder = None
            self._lexical = None
            qdrant, self._qdrant = self._qdrant, None
        if qdrant is not None:
            qdrant.close()
