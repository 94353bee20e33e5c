"""What a search or a lookup may see, as Qdrant filters: the tenant, containers, labels,
source types, archived documents, and the ACL (who may read a chunk)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from qdrant_client import models

from chunking.record import CONTAINER_FIELD


@dataclass(frozen=True)
class SearchFilters:
    """Search restrictions. `user`/`groups` enable the ACL filter: a chunk is visible when
    `acl.public` is true, or when it passes both the read restrictions (`acl.restricted`
    is false, `acl.users` holds the user, or `acl.groups` meets the groups) and the space
    (`acl.space_open` is not false, `acl.space_users` holds the user, or
    `acl.space_groups` meets the groups). A payload without the space fields (files, or
    written before space permissions were read) has no space level. `public_only` (a
    reader without an identity) shows only chunks whose `acl.public` is true; without it,
    user or groups, nothing is filtered by access."""

    tenant_id: str | None = None
    containers: tuple[str, ...] = ()  # spaces, shelves: `SourceDocument.container`
    labels: tuple[str, ...] = ()
    source_types: tuple[str, ...] = ()
    user: str | None = None
    groups: tuple[str, ...] = ()
    # Archived documents (`archived: true`, where a source lists them):
    # None finds it with the rest, False leaves it out, True finds only it.
    archived: bool | None = None
    public_only: bool = False


def match(key: str, value: str | bool) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchValue(value=value))


def match_any(key: str, values: Sequence[str]) -> models.FieldCondition:
    return models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))


def search_filter(filters: SearchFilters) -> models.Filter | None:
    must: list[models.Condition] = []
    if filters.tenant_id is not None:
        must.append(match("tenant_id", filters.tenant_id))
    if filters.containers:
        must.append(match_any(CONTAINER_FIELD, filters.containers))
    if filters.labels:
        must.append(match_any("labels", filters.labels))
    if filters.source_types:
        must.append(match_any("source_type", filters.source_types))
    if filters.archived is not None:
        archived = match("archived", True)
        must.append(archived if filters.archived else models.Filter(must_not=[archived]))
    if filters.user is not None or filters.groups:
        restrictions = _acl_level(filters, "acl.users", "acl.groups")
        restrictions.append(match("acl.restricted", False))
        space = _acl_level(filters, "acl.space_users", "acl.space_groups")
        space.append(models.Filter(must_not=[match("acl.space_open", False)]))
        levels = models.Filter(
            must=[models.Filter(should=restrictions), models.Filter(should=space)]
        )
        must.append(models.Filter(should=[match("acl.public", True), levels]))
    elif filters.public_only:
        must.append(match("acl.public", True))
    return models.Filter(must=must) if must else None


def _acl_level(filters: SearchFilters, users: str, groups: str) -> list[models.Condition]:
    """Conditions of which one lets the user pass one ACL level."""
    passes: list[models.Condition] = []
    if filters.user is not None:
        passes.append(match(users, filters.user))
    if filters.groups:
        passes.append(match_any(groups, filters.groups))
    return passes
