"""Link resolution for Confluence content (docs/chunking.md#links): what a complete listing knows of
titles, page ids and attachments, and the synced document each link points to."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

from connectors.base import LinkTarget


@dataclass
class ContentIndex:
    """What a complete listing knows for resolving links (docs/chunking.md#links)."""

    by_title: dict[tuple[str, str], str] = field(default_factory=dict)  # (space, title) -> id
    page_ids: set[str] = field(default_factory=set)
    attachments: dict[tuple[str, str], str] = field(default_factory=dict)  # (page, file) -> id

    def add_page(self, space_key: str, title: str, page_id: str) -> None:
        self.by_title[(space_key, title)] = page_id
        self.page_ids.add(page_id)

    def page_by_title(self, space_key: str, title: str) -> str | None:
        return self.by_title.get((space_key, title)) or self.by_title.get(
            (space_key, unquote_plus(title))  # titles from /display/KEY/Some+Title URLs
        )

    def to_json(self) -> dict[str, list[list[str]]]:
        """A JSON form, so that whichever process prepares a batch resolves links with the
        index of the listing (Dask workers did not list)."""
        return {
            "pages": [[*key, id_] for key, id_ in sorted(self.by_title.items())],
            "page_ids": [[id_] for id_ in sorted(self.page_ids)],
            "attachments": [[*key, id_] for key, id_ in sorted(self.attachments.items())],
        }

    @classmethod
    def from_json(cls, data: dict[str, list[list[str]]]) -> ContentIndex:
        return cls(
            by_title={(space, title): id_ for space, title, id_ in data["pages"]},
            page_ids={row[0] for row in data["page_ids"]},
            attachments={(page, name): id_ for page, name, id_ in data["attachments"]},
        )


def resolve_links(
    links: Iterable[LinkTarget], index: ContentIndex, *, space_key: str, page_id: str | None = None
) -> list[str | None]:
    """The synced document id each link points to (None: external or not synced), in
    order. Links without a space key are in the linking page's space; attachment links
    without a page are to the linking page's own attachments."""
    resolved: list[str | None] = []
    for link in links:
        space = link.target_space_key or space_key
        target_page = link.target_page_id
        if target_page is None and link.target_title:
            target_page = index.page_by_title(space, link.target_title)
        if link.link_type == "attachment" and link.target_filename:
            owner = target_page or page_id
            resolved.append(index.attachments.get((owner, link.target_filename)) if owner else None)
        else:
            resolved.append(target_page if target_page in index.page_ids else None)
    return resolved
