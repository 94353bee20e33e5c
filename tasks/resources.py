"""What one run opens once and its batches share: the source's connector (the one that
listed also fetches, so what the listing learned is reused), what reaches the index
(`indexing.handles`: the embedder, lexical encoder and Qdrant connection), and the link
resolutions of saved listings. The flow (or the CLI) creates one `Resources` per run
and closes it at the end.

A copy sent to another process arrives empty and opens its own; on a Dask worker it
hands over to the one the worker keeps for the same settings, so the batches a worker
runs share one connector, embedder and Qdrant connection, as a run's batches do.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from chunking.parts import PartSplitter
from chunking.tokens import get_token_counter
from config.secrets import secret_value
from config.settings import Settings
from connectors.base import Closeable, Connector, ConnectorContext, LinkResolution, LinkResolver
from connectors.registry import connector_class
from indexing.embedders import Embedder
from indexing.handles import IndexHandles
from indexing.lexical import LexicalEncoder
from indexing.qdrant_store import QdrantConnection
from indexing.store_schema import CollectionSchema
from normalizers import PictureSetup, supported_extensions
from stage_cache.keys import config_hash, sha256_hex
from tasks import native_memory
from tasks.stages import run_pictures
from tasks.state import chunking_fingerprint


class Resources(IndexHandles):
    def __init__(self, settings: Settings, *, arrived: bool = False) -> None:
        super().__init__(settings)
        self._arrived = arrived  # unpickled in another process
        self._connectors: dict[str, Connector] = {}
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
        return super().embedder() if here is self else here.embedder()

    def lexical(self) -> LexicalEncoder | None:
        here = self._here()
        return super().lexical() if here is self else here.lexical()

    def parts(self) -> PartSplitter | None:
        """What splits chunks for the `dense_parts` vectors, None when `parts.enabled` is
        off."""
        if not self.settings.parts.enabled:
            return None
        counter = get_token_counter(self.settings.chunking.tokenizer)
        return PartSplitter(self.settings.parts.max_tokens, counter)

    def schema(self, embedder: Embedder | None) -> CollectionSchema:
        """The collection these settings (and this embedder, when given) make, with how
        a run splits parts and chunks."""
        parts = self.parts()
        return replace(
            super().schema(embedder),
            parts=parts is not None,
            parts_id=parts.id if parts else None,
            chunking_id=chunking_fingerprint(self.settings),
        )

    def _connection(self) -> QdrantConnection:
        here = self._here()
        return super()._connection() if here is self else here._connection()

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
            self._resolutions.clear()
        super().close()
        for connector in connectors:
            if isinstance(connector, Closeable):
                connector.close()


def _arrived(settings: Settings) -> Resources:
    return Resources(settings, arrived=True)
