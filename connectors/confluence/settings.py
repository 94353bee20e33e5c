"""The `confluence` settings section (docs/configuration.md), which the connector
declares as its settings model; its HTTP pacing and retries are `HttpSettings`."""

from __future__ import annotations

from pydantic import Field, SecretStr

from connectors.http import HttpSettings


class ConfluenceSettings(HttpSettings):
    url: str | None = None
    username: str | None = None
    token: SecretStr | None = None
    # Name of a Prefect Secret block holding the token (used when `token` is unset).
    token_secret_block: str | None = None
    cloud: bool | None = None
    spaces: list[str] = Field(default_factory=list)
    include_blogposts: bool = True
    include_attachments: bool = True
    # Footer comments as a final "## Comments" section of their page (docs/sources.md#comments).
    include_comments: bool = True
    # Inline comments in the same section, quoting the text each is on, open or resolved.
    include_inline_comments: bool = True
    # Archived pages and blog posts too, marked `archived: true` in their payload.
    include_archived: bool = False
    # Cloud whiteboards, databases and smart links as title + link + breadcrumb records.
    include_whiteboards: bool = False
    attachment_max_bytes: int = Field(50 * 1024 * 1024, gt=0)
    page_size: int = Field(100, gt=0, le=250)
    incremental_overlap_minutes: int = Field(10, ge=0)
