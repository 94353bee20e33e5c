"""Footer comments of a page (SPEC §2.1 "Comments").

They reach the index as a final `## Comments` section of the page: each comment a line
with its author and date, then its body, replies after the comment they answer. The
section is written in storage format and appended to the page's body, so the Confluence
normalizer renders comment bodies (macros, links, mentions) exactly as page bodies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

COMMENTS_HEADING = "Comments"
# The section's opening: its attribute (which the normalizer ignores) tells it from a
# heading of the page's own, so the page's headings end where it starts.
COMMENTS_OPENING = f'<h2 data-ingest-section="comments">{COMMENTS_HEADING}</h2>'


@dataclass(frozen=True)
class Comment:
    id: str
    version: int
    body: str  # storage format
    author: str | None = None
    created_at: str | None = None  # ISO 8601
    reply_to: str | None = None


def comment_versions(comments: Sequence[Comment]) -> list[tuple[str, int]]:
    """What decides whether the comments changed: (id, version) of each."""
    return [(c.id, c.version) for c in comments]


def in_thread_order(comments: Sequence[Comment]) -> list[tuple[Comment, int]]:
    """Comments with their reply depth: each top-level comment in the order given, its
    replies (depth first) after it."""
    children: dict[str | None, list[Comment]] = {}
    ids = {c.id for c in comments}
    for comment in comments:
        parent = comment.reply_to if comment.reply_to in ids else None
        children.setdefault(parent, []).append(comment)
    ordered: list[tuple[Comment, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for comment in children.get(parent, []):
            ordered.append((comment, depth))
            walk(comment.id, depth + 1)

    walk(None, 0)
    return ordered


def comments_section(comments: Sequence[Comment]) -> str:
    """The `## Comments` section in storage format ("" without comments). Replies are
    block quotes inside the comment they answer."""
    if not comments:
        return ""
    parts = [COMMENTS_OPENING]
    depth = 0
    for comment, level in in_thread_order(comments):
        parts.append("</blockquote>" * max(0, depth - level))
        parts.append("<blockquote>" * max(0, level - depth))
        depth = level
        who = escape(comment.author or "unknown")
        when = f" ({escape(comment.created_at[:10])})" if comment.created_at else ""
        parts.append(f"<p><strong>{who}</strong>{when}:</p>{comment.body}")
    parts.append("</blockquote>" * depth)
    return "".join(parts)
