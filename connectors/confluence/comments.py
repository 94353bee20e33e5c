"""Footer and inline comments of a page (docs/sources.md#comments).

They reach the index as a final `## Comments` section of the page: each comment a line
with its author and date, then its body, replies after the comment they answer. An
inline comment's line quotes the text it is anchored to and says whether it is open or
resolved. The section is written in storage format and appended to the page's body, so
the Confluence normalizer renders comment bodies (macros, links, mentions) exactly as
page bodies.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple
from xml.sax.saxutils import escape

COMMENTS_HEADING = "Comments"
# The section's opening: its attribute (which the normalizer ignores) tells it from a
# heading of the page's own, so the page's headings end where it starts.
COMMENTS_OPENING = f'<h2 data-ingest-section="comments">{COMMENTS_HEADING}</h2>'
# Where Confluence keeps an inline comment's place in the page's storage format.
_MARKER = re.compile(
    r'<ac:inline-comment-marker\b[^>]*\bac:ref="([^"]*)"[^>]*>(.*?)</ac:inline-comment-marker>',
    re.S,
)
_TAG = re.compile(r"<[^>]*>")
QUOTE_CHARS = 300  # the most of an anchored text a comment's line quotes

Location = Literal["footer", "inline"]
LOCATIONS: tuple[Location, ...] = ("footer", "inline")


class CommentState(NamedTuple):
    """What decides whether a comment changed: resolving an inline comment bumps no
    version, so its resolution is part of it."""

    id: str
    version: int
    location: str = "footer"
    resolution: str = ""  # inline: open | reopened | resolved | dangling


@dataclass(frozen=True)
class Comment:
    id: str
    version: int
    body: str  # storage format
    author: str | None = None
    created_at: str | None = None  # ISO 8601
    reply_to: str | None = None
    location: Location = "footer"
    resolution: str = ""  # inline comments: open | reopened | resolved | dangling
    marker: str | None = None  # inline: the `ac:ref` of its marker in the page
    selection: str | None = None  # inline: the text it was made on

    @property
    def state(self) -> CommentState:
        return CommentState(self.id, self.version, self.location, self.resolution)


def storage_body(content: dict[str, Any]) -> str:
    """The storage-format body of content either API answered with its body expanded."""
    return str(((content.get("body") or {}).get("storage") or {}).get("value", ""))


def comment_from(
    content: dict[str, Any],
    state: CommentState,
    *,
    author: str | None,
    created_at: str | None,
    reply_to: str | None,
) -> Comment:
    """A comment from either API's answer (its body, its inline properties) and its state;
    where the two shapes name the rest apart, the caller reads it."""
    marker, selection = inline_properties(content)
    return Comment(
        id=state.id,
        version=state.version,
        body=storage_body(content),
        author=author,
        created_at=created_at,
        reply_to=reply_to,
        location="inline" if state.location == "inline" else "footer",
        resolution=state.resolution,
        marker=marker,
        selection=selection,
    )


def comment_states(comments: Sequence[Comment]) -> list[CommentState]:
    return [c.state for c in comments]


def in_thread_order(comments: Sequence[Comment]) -> list[tuple[Comment, int]]:
    """Comments with their reply depth: footer threads, then inline ones, each top-level
    comment in the order given, its replies (depth first) after it."""
    children: dict[str | None, list[Comment]] = {}
    ids = {c.id for c in comments}
    ordered_roots = sorted(comments, key=lambda c: LOCATIONS.index(c.location))
    for comment in ordered_roots:
        parent = comment.reply_to if comment.reply_to in ids else None
        children.setdefault(parent, []).append(comment)
    ordered: list[tuple[Comment, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        for comment in children.get(parent, []):
            ordered.append((comment, depth))
            walk(comment.id, depth + 1)

    walk(None, 0)
    return ordered


def marked_texts(storage: str) -> dict[str, str]:
    """The text each inline comment marker of a page holds, by its `ac:ref`."""
    return {
        ref: " ".join(html.unescape(_TAG.sub("", inner)).split())
        for ref, inner in _MARKER.findall(storage)
    }


def lost_anchors(comments: Sequence[Comment], marked: dict[str, str]) -> list[str]:
    """Warnings for open inline comments whose text is no longer on the page (a resolved
    one may have lost its highlight: it quotes the text it was made on, unremarked)."""
    return [
        f"inline comment {c.id} was made on text that is no longer on the page "
        f"({_quoted(c.selection) if c.selection else 'unknown text'}): it is kept, "
        "quoting the text it was made on"
        for c in comments
        if c.location == "inline"
        and c.reply_to is None
        and c.resolution != "resolved"
        and not _anchor(c, marked)
    ]


def comments_section(comments: Sequence[Comment], marked: dict[str, str]) -> str:
    """The `## Comments` section in storage format ("" without comments). Replies are
    block quotes inside the comment they answer; `marked`: `marked_texts` of the page."""
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
        parts.append(f"<p><strong>{who}</strong>{when}{_inline_note(comment, marked)}:</p>")
        parts.append(comment.body)
    parts.append("</blockquote>" * depth)
    return "".join(parts)


def _inline_note(comment: Comment, marked: dict[str, str]) -> str:
    """What an inline thread's first line adds: the text quoted, open or resolved."""
    if comment.location != "inline" or comment.reply_to is not None:
        return ""
    resolved = comment.resolution == "resolved"
    note = f", inline comment ({'resolved' if resolved else 'open'}) on"
    anchor = _anchor(comment, marked) or (comment.selection if resolved else None)
    if anchor:
        return f"{note} {escape(_quoted(anchor))}"
    was = f" {escape(_quoted(comment.selection))}" if comment.selection else ""
    return f"{note} text no longer on the page{was}"


def _anchor(comment: Comment, marked: dict[str, str]) -> str | None:
    if comment.resolution == "dangling":
        return None
    return marked.get(comment.marker or "") or None


def _quoted(text: str | None) -> str:
    text = " ".join((text or "").split())
    return f"“{text[:QUOTE_CHARS]}{'…' if len(text) > QUOTE_CHARS else ''}”"


def inline_properties(comment: dict[str, Any]) -> tuple[str | None, str | None]:
    """An inline comment's marker ref and original selection: v2 `properties` (both of
    the spellings the reference shows) or v1 `extensions.inlineProperties`."""
    v2 = comment.get("properties") or {}
    v1 = (comment.get("extensions") or {}).get("inlineProperties") or {}
    marker = v2.get("inlineMarkerRef") or v2.get("inline-marker-ref") or v1.get("markerRef")
    selection = (
        v2.get("inlineOriginalSelection")
        or v2.get("inline-original-selection")
        or v1.get("originalSelection")
    )
    return (str(marker) if marker else None, str(selection) if selection else None)
