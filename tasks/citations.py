"""Deep links for chunks (docs/sources.md#deep-links): where a reader lands
to see the chunk in its source.

A chunk cites its nearest heading, the last one at or before its start, where the
connector links to headings (`HeadingCitation`: a Confluence page's anchors); else its
document: the source's URL, or a file's `file://` URL, a PDF's at the page the chunk
starts on (`#page=N`, the PDF open parameter browsers and Acrobat follow). Sheets and
slides keep the document's URL: no viewer opens a workbook or a deck at one from a link,
and the chunk's `sheet` and `slide` fields say where it is.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from chunking import ChunkedDocument
from chunking.blocks import BlockType
from chunking.record import Chunk
from connectors.base import HeadingCitation, SourceDocument


def cite(
    document: ChunkedDocument, source: SourceDocument, citation: HeadingCitation | None
) -> ChunkedDocument:
    """`document` with every chunk's `citation_url` and `breadcrumbs` set."""
    headings = [block for block in document.blocks if block.type is BlockType.HEADING]
    links: list[str | None] = [None] * len(headings)
    if citation is not None and headings:
        links = citation.heading_links(source, [heading.heading_text for heading in headings])
    starts = [heading.start for heading in headings]
    url = document_url(source)
    breadcrumbs = source.breadcrumbs or (source.title or source.filename,)
    cited = []
    for chunk in document.chunks:
        nearest = bisect.bisect_right(starts, chunk.char_start) - 1
        link = links[nearest] if nearest >= 0 else None
        cited.append(
            replace(chunk, citation_url=link or _page_link(url, chunk), breadcrumbs=breadcrumbs)
        )
    return replace(document, chunks=tuple(cited))


def cite_again(chunks: Sequence[Chunk], old: Sequence[dict[str, Any]]) -> list[Chunk]:
    """A document's chunks made anew (another chunking) citing what its old chunks
    (`old`: their payloads) cited: the link of a heading where a chunk under the same
    headings had one, else the document's URL (a PDF's at the chunk's page)."""
    first = old[0] if old else {}
    url = first.get("source_url") or (
        Path(first["file_path"]).resolve().as_uri() if first.get("file_path") else None
    )
    headings = {
        tuple(payload.get("headings_path") or ()): str(payload["citation_url"])
        for payload in old
        if "#" in str(payload.get("citation_url") or "")
        and "#page=" not in str(payload["citation_url"])
    }
    breadcrumbs = tuple(first.get("breadcrumbs") or ())
    return [
        replace(
            chunk,
            citation_url=headings.get(chunk.headings_path) or _page_link(url, chunk),
            breadcrumbs=breadcrumbs,
        )
        for chunk in chunks
    ]


def document_url(source: SourceDocument) -> str | None:
    """The source's URL, else the file's as a `file://` URL."""
    if source.source_url:
        return source.source_url
    if source.file_path:
        return Path(source.file_path).resolve().as_uri()
    return None


def _page_link(url: str | None, chunk: Chunk) -> str | None:
    if url is not None and chunk.page_start is not None and url.startswith("file:"):
        return f"{url}#page={chunk.page_start}"
    return url
