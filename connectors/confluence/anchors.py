"""Heading anchors as Confluence builds them, for chunks' deep links (docs/sources.md#deep-links).

Confluence gives every heading of a page (h1-h6, wherever it is: in a table, a panel or
an expand macro too) an id made from its text, and a link to `page URL#id` lands on it:

- Cloud (the editor every page is on since the legacy editor's retirement): the text
  with each run of whitespace made one `-`, case and punctuation kept (`Release Notes
  (2.0)` -> `Release-Notes-(2.0)`, `Установка пакета` -> `Установка-пакета`); each
  inline macro in the heading puts `[inlineExtension]` before it;
- Data Center / Server: the page title and the text, whitespace removed, joined by `-`
  (`Install Guide` / `Step 1` -> `InstallGuide-Step1`).

A text that repeats an earlier heading's id gets `.1`, `.2`, ... in page order. A heading
with no letter or digit (only punctuation, or an emoticon, which Cloud renders as an
inline node) has no id a link can rely on: its chunks cite the page, with a warning.

A heading that holds an anchor macro (publishers such as md2conf put one in every heading
for their same-page links) is cited by that anchor: the macro is on the page to be linked
to, its id does not change with the heading's words, and Cloud's `[inlineExtension]` ids
are not reliably navigable. The macro's id is its name on Cloud, and the page title
(whitespace removed), `-` and the name on Data Center.

Sources: Atlassian's anchors documentation and what the Confluence publishers built
against it (sphinx-contrib/confluencebuilder's section targets and anchor macros for both
editors, CONFCLOUD-74698 on `[inlineExtension]`).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

_HEADING = re.compile(r"<h([1-6])\b[^>]*>(.*?)</h\1\s*>", re.S | re.I)
# A code macro's body is text, not markup: a `<h2>` in a sample is no heading.
_PLAIN_TEXT_BODY = re.compile(r"<ac:plain-text-body\b.*?</ac:plain-text-body\s*>", re.S)
_MACRO = re.compile(
    r"<ac:structured-macro\b[^>]*/>|<ac:structured-macro\b.*?</ac:structured-macro\s*>", re.S
)
# The name of an anchor macro: its unnamed (default) parameter.
_ANCHOR_MACRO = re.compile(
    r"<ac:structured-macro\b[^>]*\bac:name=\"anchor\"[^>]*>(?:(?!</ac:structured-macro).)*?"
    r"<ac:parameter\b[^>]*\bac:name=\"\"[^>]*>(.*?)</ac:parameter\s*>",
    re.S,
)
_CDATA = re.compile(r"<!\[CDATA\[(.*?)\]\]>", re.S)
_TAG = re.compile(r"<[^>]*>")
# What a Markdown heading has that its page's text has not: link targets, escapes.
_MARKDOWN_TARGET = re.compile(r"\]\([^)]*\)")
_NOT_WORD = re.compile(r"[\W_]+")
INLINE_EXTENSION = "[inlineExtension]"


@dataclass(frozen=True)
class PageHeading:
    text: str  # as a reader sees it
    anchor: str | None  # its id on the page; None where it has none to rely on


def page_headings(storage: str, *, cloud: bool, title: str) -> list[PageHeading]:
    """The headings of a page's storage XHTML in page order, each with its anchor."""
    seen: dict[str, int] = {}
    headings: list[PageHeading] = []
    for match in _HEADING.finditer(_PLAIN_TEXT_BODY.sub("", storage)):
        inner = match.group(2)
        macros = len(_MACRO.findall(inner))
        markup = _CDATA.sub(r"\1", _MACRO.sub("", inner))
        text = " ".join(html.unescape(_TAG.sub("", markup)).split())
        anchor = None
        if any(c.isalnum() for c in text):
            base = (
                INLINE_EXTENSION * macros + "-".join(text.split())
                if cloud
                else "".join(title.split()) + "-" + "".join(text.split())
            )
            count = seen.get(base, 0)
            seen[base] = count + 1
            anchor = f"{base}.{count}" if count else base
        # The heading keeps its generated id (later repeats count it) but is cited by
        # its anchor macro.
        named = _anchor_name(inner)
        if named:
            anchor = named if cloud else "".join(title.split()) + "-" + named
        headings.append(PageHeading(text, anchor))
    return headings


def _anchor_name(heading: str) -> str | None:
    """The name of the first anchor macro in a heading's markup, if it has one."""
    match = _ANCHOR_MACRO.search(heading)
    if match is None:
        return None
    name = html.unescape(_TAG.sub("", _CDATA.sub(r"\1", match.group(1)))).strip()
    return name or None


def match_headings(page: Sequence[PageHeading], markdown: Sequence[str]) -> list[str | None]:
    """The anchor of each Markdown heading (the chunker's, in order): the page's next
    heading of the same words. Headings the Markdown has and the page has not (a section
    the connector appended) get None; page headings the Markdown lacks are skipped."""
    anchors: list[str | None] = []
    position = 0
    keys = [_key(heading.text) for heading in page]
    for text in markdown:
        key = _key(_MARKDOWN_TARGET.sub("", text))
        found = next((i for i in range(position, len(page)) if keys[i] == key), None)
        if found is None:
            anchors.append(None)
            continue
        anchors.append(page[found].anchor)
        position = found + 1
    return anchors


def _key(text: str) -> str:
    return _NOT_WORD.sub("", text).casefold()
