"""The Confluence connector: Cloud through REST v2 (connectors/confluence/cloud.py), Data
Center / Server through REST v1 (connectors/confluence/datacenter.py), behind one surface:
`list_refs()` (the cheap full listing that drives change detection and deletion),
`poll(since)`, `fetch()`, `fetch_many()`, `index` (what the last listing knows for link
resolution) and `close()`.

Cloud is `*.atlassian.net`, or `confluence.cloud: true` (a custom domain). Attachments
are listed only for the extensions given to the constructor (pass
`normalizers.base.supported_extensions()`): the normalizer registry stays the one list
of formats, and connectors do not import normalizers.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime

from config.errors import IngestError
from config.settings import ConfluenceSettings
from connectors.base import DocumentRef, Listing, SourceDocument, SourceType
from connectors.confluence.client import ConfluenceHttp
from connectors.confluence.cloud import CloudSource
from connectors.confluence.datacenter import DataCenterSource
from connectors.confluence.links import ContentIndex
from connectors.confluence.source import ConfluenceSource

log = logging.getLogger(__name__)


class ConfluenceConnector:
    source_type: SourceType = "confluence"

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

    def close(self) -> None:
        self._http.close()
