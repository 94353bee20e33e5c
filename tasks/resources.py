"""What one run opens once and its batches share: the source's connector (the one that
listed also fetches, so what the listing learned is reused), the embedder and lexical
encoder, the Qdrant connection (an embedded store allows one process, so one connection,
per directory), and the link resolutions of saved listings. The flow (or the CLI)
creates one `Resources` per run and closes it at the end.

A copy sent to another process arrives empty and opens its own; on a Dask worker it
hands over to the one the worker keeps for the same settings, so the batches a worker
runs share one connector, embedder and Qdrant connection, as a run's batches do.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from chunking.parts import PartSplitter
from chunking.tokens import get_token_counter
from config.settings import Settings
from connectors.base import Closeable, Connector, ConnectorContext, LinkResolution, LinkResolver
from connectors.registry import connector_class
from indexing.embedders import Embedder, make_embedder
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection, QdrantStore, StoreSeconds
from indexing.store_schema import CollectionSchema
from normalizers import PictureSetup, supported_extensions
from stage_cache.keys import config_hash, sha256_hex
from tasks import native_memory
from tasks.stages import run_pictures
from tasks.state import chunking_fingerprint


def in_secret_block(section: Any, name: str) -> bool:
    """Whether the secret `name` of a settings section (`token`, `api_key`) is to be read
    from the Prefect Secret block its `<name>_secret_block` names: it is not set itself."""
    return getattr(section, name, None) is None and bool(
        getattr(section, f"{name}_secret_block", None)
    )


def secret_value(section: Any, name: str) -> str | None:
    """The secret `name` of a settings section: its value, else that of the Prefect Secret
    block its `<name>_secret_block` names; never logged."""
    if in_secret_block(section, name):
        from prefect.blocks.system import Secret

        block = Secret.load(getattr(section, f"{name}_secret_block"))
        return str(block.get())  # type: ignore[union-attr]
    value = getattr(section, name, None)
    return str(value.get_secret_value()) if value is not None else None


class Resources:
    def __init__(self, settings: Settings, *, arrived: bool = False) -> None:
        self.settings = settings
        self._arrived = arrived  # unpickled in another process
        self._lock = threading.Lock()
        self._connectors: dict[str, Connector] = {}
        self._embedder: Embedder | None = None
        self._lexical: LexicalEncoder | None = None
        self._qdrant: QdrantConnection | None = None
        self._resolutions: dict[Path, tuple[int, LinkResolution]] = {}
        self._pictures: PictureSetup | None = None
        # Process-wide, before the run's worker threads allocate (a Dask worker's own
        # Resources sets it there).
        native_memory.limit_arenas(settings.run.malloc_arenas)

    def __reduce__(self) -> tuple[object, ...]:
        return (_arrived, (self.settings,))

    def _here(self) -> Resources:
        """The Resources serving this process: this one, or on a Dask worker the one the
        worker keeps for these settings (a worker is known only while it runs a task)."""
        if not self._arrived:
            return self
        try:
            from distributed import get_worker

            worker = get_worker()
        except (ImportError, ValueError):
            return self
        kept: dict[str, Resources] = worker.__dict__.setdefault("ingest_resources", {})
        return kept.setdefault(config_hash(self.settings), Resources(self.settings))

    def connector(self, kind: str, targets: tuple[str, ...], scope: str) -> Connector:
        here = self._here()
        if here is not self:
            return here.connector(kind, targets, scope)
        with self._lock:
            if scope not in self._connectors:
                self._connectors[scope] = self._build_connector(kind, targets, scope)
            return self._connectors[scope]

    def _build_connector(self, kind: str, targets: tuple[str, ...], scope: str) -> Connector:
        settings = self.settings
        section = settings.section(kind)
        context = ConnectorContext(
            kind=kind,
            targets=targets,
            section=section,
            limits=settings.limits,
            state_path=Path(settings.cache.dir) / kind / f"{sha256_hex(scope)[:16]}.json",
            # A picture attached to a page is read where the page shows it, not as a
            # document of its own (image files of a share are documents).
            document_extensions=supported_extensions(without=("image",)),
            token=secret_value(section, "token"),
        )
        return connector_class(kind, settings.sources).from_context(context)

    def pictures(self) -> PictureSetup:
        """How this run reads pictures (the captions' per-run bound lives in it); what of
        OCR is off was said at start-up."""
        here = self._here()
        if here is not self:
            return here.pictures()
        with self._lock:
            if self._pictures is None:
                self._pictures = run_pictures(self.settings)
            return self._pictures

    def embedder(self) -> Embedder:
        here = self._here()
        if here is not self:
            return here.embedder()
        with self._lock:
            if self._embedder is None:
                self._embedder = make_embedder(self.settings.embedder)
            return self._embedder

    def lexical(self) -> LexicalEncoder | None:
        """The lexical (BM25) encoder, None when `lexical.enabled` is off."""
        here = self._here()
        if here is not self:
            return here.lexical()
        if not self.settings.lexical.enabled:
            return None
        with self._lock:
            if self._lexical is None:
                self._lexical = LexicalEncoder(self.settings.lexical)
            return self._lexical

    def parts(self) -> PartSplitter | None:
        """What splits chunks for the `dense_parts` vectors, None when `parts.enabled` is
        off."""
        if not self.settings.parts.enabled:
            return None
        counter = get_token_counter(self.settings.chunking.tokenizer)
        return PartSplitter(self.settings.parts.max_tokens, counter)

    def schema(self, embedder: Embedder | None) -> CollectionSchema:
        """The collection these settings (and this embedder, when given) make."""
        lexical = self.lexical()
        parts = self.parts()
        return CollectionSchema(
            vector_size=(
                embedder.vector_size if embedder else self.settings.embedder.vector_size or 0
            ),
            sparse=embedder.has_sparse if embedder else self.settings.embedder.sparse,
            lexical=lexical is not None,
            model_id=embedder.model_id if embedder else None,
            lexical_id=lexical.id if lexical else None,
            parts=parts is not None,
            parts_id=parts.id if parts else None,
            chunking_id=chunking_fingerprint(self.settings),
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
        here = self._here()
        if here is not self:
            return here.store(embedder, check=check, seconds=seconds)
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
        if self.settings.qdrant.url:
            return
        here = self._here()
        if here is not self:
            here.hold_store()
            return
        _ = self._connection().client

    def release_store(self) -> None:
        """Let the store go (an embedded store's lock with it) and keep the rest: the
        next `store()` opens it again."""
        with self._lock:
            qdrant = self._qdrant
        if qdrant is not None:
            qdrant.close()

    def link_resolution(self, resolver: LinkResolver, saved: tuple[int, Path]) -> LinkResolution:
        """The resolution over a listing's saved link index (`(mtime, path)`, mtime 0 when
        none was saved), read once per listing."""
        here = self._here()
        if here is not self:
            return here.link_resolution(resolver, saved)
        mtime, path = saved
        with self._lock:
            known = self._resolutions.get(path)
            if known is not None and known[0] == mtime:
                return known[1]
        index = json.loads(path.read_text("utf-8")) if mtime else {}
        resolution = resolver.link_resolution(index)
        with self._lock:
            self._resolutions[path] = (mtime, resolution)
        return resolution

    def close(self) -> None:
        with self._lock:
            connectors = list(self._connectors.values())
            self._connectors.clear()
            self._embedder = None
            self._lexical = None
            self._resolutions.clear()
            qdrant, self._qdrant = self._qdrant, None
        if qdrant is not None:
            qdrant.close()
        for connector in connectors:
            if isinstance(connector, Closeable):
                connector.close()


def _arrived(settings: Settings) -> Resources:
    return Resources(settings, arrived=True)
