"""Who may read a Confluence page (docs/sources.md#access-control), and the listed version that
changes when that, the page's place in the tree or its comments change.

Confluence shows a page to those who may read its space and pass the read restrictions
of the page and of every restricted ancestor. The ACL payload keeps the two levels apart,
so that a search filter can require both:

    {"public": bool,                     # nothing narrows it
     "users": [...], "groups": [...],    # who passes the read restrictions
     "restricted": bool,                 # any read restriction on the page or an ancestor
     "space": "KEY",
     "space_open": bool,                 # the space's readers are unknown: it does not narrow
     "space_users": [...], "space_groups": [...]}   # who may read the space

A query for a user with groups matches `public`, or both levels: (`restricted` is false,
or the user is in `users`, or one of the groups in `groups`) and (`space_open`, or the
user in `space_users`, or a group in `space_groups`).

With one restricted level (the common case) `users`/`groups` are exactly its lists; with
several, they are the principals named on every level (an intersection: it may hide a
page from someone who passes one level by user and another by group, never show it to
someone who may not read it). Users are Cloud account ids or Data Center user names;
groups are group names.

Restriction changes, moves, ancestor renames and comments bump no version number in
Confluence: a listed version is `<number>.<digest>`, the digest covering the ancestors
(ids and titles, folders too), the ACL, the comments (ids, versions and an inline
comment's resolution, which resolving changes without a new version) and the diagrams and
pictures it may show (connectors/confluence/shown.py: ids and versions), so the next run
rewrites exactly the pages where one of them changed, and their attachments where the
ACL or the ancestors did.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from connectors.base import Access, Principals, SpaceReaders
from connectors.confluence.comments import CommentState


@dataclass(frozen=True)
class SpaceAccess:
    """Who may read a space; `known=False` where the API does not say (Data Center
    before 9.1, or an account the space permissions are hidden from): then the space
    does not narrow access, as before space permissions were read.

    `left_out`: the kind of each principal the read permission also names but the ACL
    cannot hold (a Cloud space role: the API names the role, not its members). Its
    members are not among `readers`, so access is narrower than Confluence's, never wider.
    """

    readers: Principals
    known: bool = True
    left_out: tuple[str, ...] = ()

    def note(self, space_key: str) -> str | None:
        """What the run report says about the principals left out, if any."""
        if not self.left_out:
            return None
        counts = Counter(self.left_out)
        named = ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in sorted(counts.items()))
        return (
            f"space {space_key}: read access granted to {named} is left out of the ACL "
            "(it holds users and groups): members find the space's pages only through a "
            "user or group permission, so access is narrower than in Confluence, never wider"
        )


UNKNOWN_SPACE = SpaceAccess(Principals(), known=False)


@dataclass(frozen=True)
class Ancestor:
    id: str
    title: str | None


@dataclass(frozen=True)
class PageAccess:
    """A page's ACL and the digests that go into listed versions: `digest` (ACL,
    ancestors, archived and comments) the page's, `inherited` (ACL, ancestors, archived)
    its attachments', which a comment does not change."""

    acl: Access
    digest: str
    inherited: str
    archived: bool = False  # the page is archived (its attachments count as archived too)

    @property
    def space_key(self) -> str | None:
        return self.acl.space.key if self.acl.space else None


def effective_acl(space_key: str, space: SpaceAccess, restrictions: Sequence[Principals]) -> Access:
    """The ACL of a page in `space` whose ancestors and itself have `restrictions`
    (root first, the page last)."""
    restricted = [level for level in restrictions if level.named]
    users: list[str] = []
    groups: list[str] = []
    if restricted:
        innermost = restricted[-1]
        users = [u for u in innermost.users if all(u in lv.users for lv in restricted)]
        groups = [g for g in innermost.groups if all(g in lv.groups for lv in restricted)]
    return Access(
        public=not space.known and not restricted,
        readers=Principals(tuple(users), tuple(groups)),
        restricted=bool(restricted),
        space=SpaceReaders(space_key, open=not space.known, readers=space.readers),
    )


def page_access(
    acl: Access,
    ancestors: Sequence[Ancestor],
    comments: Sequence[CommentState] = (),
    *,
    archived: bool = False,
    shown: Sequence[tuple[str, int]] = (),
) -> PageAccess:
    """`acl` with the digests of it, the ancestors, whether the page is archived
    (archiving bumps no version), the comments (their states) and the attachments its
    body may show (ids and versions: a new diagram version bumps none of the page's)."""
    inherited: list[Any] = [[[a.id, a.title] for a in ancestors], acl.payload()]
    if archived:
        inherited.append("archived")
    own = [*inherited, sorted(list(c) for c in comments)]
    if shown:  # only then: the versions of pages without pictures stay as they were
        own.append(sorted([i, v] for i, v in shown))
    return PageAccess(acl, _digest(own), _digest(inherited), archived)


def _digest(state: list[Any]) -> str:
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:10]


def listed_version(number: object, digest: str | None) -> str:
    """A document version: Confluence's edit number, then the digest (`7.3f9a…`)."""
    return f"{number}.{digest}" if digest else str(number)


def version_number(version: str) -> str:
    return version.partition(".")[0]
