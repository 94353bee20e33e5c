"""Whose access applies to a read: an `Identity` (a user, groups), `PUBLIC` (no identity:
public points only), or None (no access filter: the operator's view). Plain Python, so
`ingest search` can compare identities without loading the query API."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    """Whose access applies: a user and their groups. The empty identity is `PUBLIC`."""

    user: str | None = None
    groups: tuple[str, ...] = ()

    @property
    def anonymous(self) -> bool:
        return self.user is None and not self.groups

    def describe(self) -> str:
        if self.anonymous:
            return "no identity: public documents only"
        who = [f"user {self.user!r}"] if self.user else []
        who += [f"groups {', '.join(self.groups)}"] if self.groups else []
        return " and ".join(who)


PUBLIC = Identity()
OPERATOR_ACCESS = "no access filter: every document (the operator's view)"


def describe_access(identity: Identity | None) -> str:
    """What a reader with `identity` is served, in words (None: nothing filtered)."""
    return OPERATOR_ACCESS if identity is None else identity.describe()
