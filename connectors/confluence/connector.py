"""The Confluence connector: Cloud through REST v2 (connectors/confluence/cloud.py), Data
Center / Server through REST v1 (connectors/confluence/datacenter.py), behind one surface:
`list_refs()` (the cheap full listing that drives change detection and deletion),
`poll(since)`, `fetch()`, `fetch_many()`, `index` (what the last listing knows for link
resolution) and `close()`.

Cloud is `*.atlassian.net`, or `confluence.cloud: true` (a custom domain). Attachments
are listed only for the extensions given to the constructor (pass
`normalizers.registry.supported_extensions()`): the normalizer registry stays the one list
of formats, and connectors do not import normalizers.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Any

from config.errors import IngestError
from connectors.base import (
    ConnectorContext,
    DeletionScope,
    DocumentRef,
    LinkResolution,
    LinkTarget,
    Listing,
    SourceDocument,
)
from connectors.confluence.client import ConfluenceHttp
from connectors.confluence.cloud import CloudSource
from connectors.confluence.datacenter import DataCenterSource
from connectors.confluence.links import ContentIndex, resolve_links
from connectors.confluence.settings import ConfluenceSettings
from connectors.confluence.source import ConfluenceSource

log = logging.getLogger(__name__)


class ConfluenceConnector:
    source_type = "confluence"
    settings_model = ConfluenceSettings
    targets_are_paths = False
    targets_setting = "confluence.spaces"

    def __init__(
        self,
        settings: ConfluenceSettings,
        token: str | None = None,
        *,
        attachment_extensions: Collection[str] = (),
    ) -> None:
        self.settings = settings
        self._http = ConfluenceHttp(settings, token)
        self._session = self._http.session
        self.cloud = self._http.cloud
        self.base_url = self._http.base_url
        if settings.include_attachments and not attachment_extensions:
            log.warning("no attachment extensions given: Confluence attachments are skipped")
        kind = CloudSource if self.cloud else DataCenterSource
        self._source: ConfluenceSource = kind(settings, self._http, attachment_extensions)

    @classmethod
    def from_context(cls, context: ConnectorContext) -> ConfluenceConnector:
        settings: ConfluenceSettings = context.section
        spaces = settings.model_copy(update={"spaces": list(context.targets)})
        return cls(spaces, context.token, attachment_extensions=context.document_extensions)

    def __repr__(self) -> str:
        return f"ConfluenceConnector({self.base_url!r}, spaces={self.settings.spaces!r})"

    @property
    def index(self) -> ContentIndex:
        return self._source.index

    def list_refs(self) -> Listing:
        return self._source.list_refs()

    def poll(self, since: datetime) -> Iterator[DocumentRef]:
        return self._source.poll(since)

    def fetch(self, ref: DocumentRef) -> SourceDocument:
        return self._source.fetch(ref)

    def fetch_many(self, refs: Sequence[DocumentRef]) -> list[SourceDocument | IngestError]:
        return self._source.fetch_many(refs)

    def heading_links(self, source: SourceDocument, headings: Sequence[str]) -> list[str | None]:
        return self._source.heading_links(source, headings)

    def link_index(self) -> dict[str, Any]:
        return dict(self.index.to_json())

    def link_resolution(self, index: dict[str, Any]) -> LinkResolution:
        content = ContentIndex.from_json(index) if index else ContentIndex()

        def resolve(links: Sequence[LinkTarget], source: SourceDocument) -> list[str | None]:
            return resolve_links(
                links, content, space_key=source.container or "", page_id=source.locator
            )

        return resolve

    def deletion_scopes(self, retired: frozenset[str]) -> list[DeletionScope]:
        """A run owns its spaces' documents."""
        return [DeletionScope(self.source_type, container=s) for s in self.settings.spaces]

    def close(self) -> None:
        self._http.close()
