"""A toy source kind for tests: documents held in memory, registered through the `sources`
setting (`{"toy": "tests.toy_source:ToyConnector"}`) without touching tasks/ or flows/.

A target names a `ToyShelf` of `SHELVES`; each document is an HTML file whose relative
links (`<a href="b.html">`) the connector resolves to the linked document's id. Its
settings section `toy` (`ToySettings`, declared as the class's `settings_model`) names
the shelves a run reads when it names none (`toy.shelves`, `INGEST_TOY__SHELVES`) and
where its documents' links point (`toy.base_url`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from config.settings import StrictModel
from connectors.base import (
    Access,
    ConnectorContext,
    DeletionScope,
    DocumentGone,
    DocumentRef,
    LinkResolution,
    LinkTarget,
    Listing,
    Principals,
    SourceDocument,
)


@dataclass
class ToyDocument:
    filename: str
    html: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass
class ToyShelf:
    documents: dict[str, ToyDocument] = field(default_factory=dict)  # id -> document

    def put(self, document_id: str, document: ToyDocument) -> None:
        self.documents[document_id] = document


SHELVES: dict[str, ToyShelf] = {}  # target name -> its documents, set up by the test


class ToySettings(StrictModel):
    shelves: list[str] = Field(default_factory=list)
    base_url: str = "toy://"


class ToyConnector:
    source_type = "toy"
    settings_model = ToySettings
    targets_setting = "toy.shelves"
    targets_are_paths = False

    def __init__(self, shelves: Sequence[str], settings: ToySettings) -> None:
        self.shelves = tuple(shelves)
        self.settings = settings
        self.closed = False

    @classmethod
    def from_context(cls, context: ConnectorContext) -> ToyConnector:
        return cls(context.targets, context.section)

    def _documents(self) -> Iterator[tuple[str, str, ToyDocument]]:
        for shelf in self.shelves:
            for document_id, document in SHELVES[shelf].documents.items():
                yield shelf, document_id, document

    def list_refs(self) -> Listing:
        refs = tuple(
            DocumentRef(
                document_id,
                hashlib.sha256(document.html.encode()).hexdigest()[:16],
                self.source_type,
                title=document.filename,
                kind="file",
            )
            for _, document_id, document in self._documents()
        )
        return Listing(refs, complete=True)

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        for shelf, document_id, document in self._documents():
            if document_id == ref.document_id:
                return SourceDocument(
                    ref=ref,
                    data=document.html.encode(),
                    filename=document.filename,
                    source_url=f"{self.settings.base_url}{shelf}/{document.filename}",
                    title=document.filename,
                    container=shelf,
                    acl=Access(
                        public=False,
                        readers=Principals(tuple(document.users), tuple(document.groups)),
                        restricted=True,
                    ),
                )
        raise DocumentGone("no longer on its shelf", subject=ref.document_id)

    # --- capabilities -------------------------------------------------------------------

    def link_index(self) -> dict[str, Any]:
        return {"by_filename": {d.filename: i for _, i, d in self._documents()}}

    def link_resolution(self, index: dict[str, Any]) -> LinkResolution:
        by_filename: dict[str, str] = index.get("by_filename", {})

        def resolve(links: Sequence[LinkTarget], source: SourceDocument) -> list[str | None]:
            return [by_filename.get(link.target_url) for link in links]

        return resolve

    def deletion_scopes(self, retired: frozenset[str]) -> list[DeletionScope]:
        return [DeletionScope(self.source_type, container=shelf) for shelf in self.shelves]

    def close(self) -> None:
        self.closed = True
