"""Navigation boilerplate that documentation converters leave on every HTML page, dropped
before a page is rendered: it repeats page after page, says nothing of the page's
subject, and its link lists become chunks of a few tokens each.

- Prev/Up/Next navigation: DocBook XSL's `navheader`/`navfooter` (tables summarized
  "Navigation header"/"Navigation footer"), Javadoc's `topNav`/`subNav`/`bottomNav`
  bars;
- tables of contents: DocBook's and Asciidoctor's `toc` blocks (and DocBook's lists of
  figures, tables and examples), docutils' `contents` topic, and any list of nothing
  but links under a "Table of Contents" title;
- page footers repeated on every page (Sphinx's copyright `footer`, Asciidoctor's
  "Last updated" `#footer`), as `<footer>` itself already is.

How much went is reported (`report_dropped`), never dropped silently.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lxml import etree

from normalizers.selfcheck import words

_NAVIGATION_CLASSES = frozenset(
    {
        "navheader", "navfooter", "topnav", "subnav", "bottomnav", "top-nav", "sub-nav",
        "bottom-nav", "toc", "toc2", "list-of-figures", "list-of-tables",
        "list-of-examples", "footer",
    }
)  # fmt: skip
_NAVIGATION_IDS = frozenset({"toc", "footer", "navbar-top", "navbar-bottom"})
_NAVIGATION_SUMMARY = re.compile(r"^navigation (?:header|footer)$", re.IGNORECASE)
_TOC_TITLE = re.compile(r"^(?:table of contents|contents|содержание|оглавление)$", re.IGNORECASE)
_LISTS = frozenset({"ul", "ol", "dl"})
DROPPED_WORDS = "boilerplate_words_dropped"
DROPPED_PARTS = "boilerplate_parts_dropped"


@dataclass(frozen=True)
class Dropped:
    parts: int  # elements (HTML) or lines (PDF) dropped
    words: int  # the words they held


def drop_navigation(
    root: etree._Element, dropped_anyway: Callable[[etree._Element], bool]
) -> Dropped:
    """Remove the navigation boilerplate under `root` (see the module docstring), each
    element's tail text kept in place. What lies inside an element the renderer drops
    anyway (`dropped_anyway`: a `<nav>`, a hidden block) is neither removed nor counted."""
    found: list[etree._Element] = []
    for el in root.iter():
        if not isinstance(el.tag, str) or any(map(dropped_anyway, el.iterancestors())):
            continue
        if _navigation(el):
            found.append(el)
        elif _toc_title(el):
            following = el.getnext()
            if following is not None and _link_list(following):
                found.extend((el, following))
    chosen = set(found)
    outermost = [el for el in found if not any(a in chosen for a in el.iterancestors())]
    total = 0
    for el in outermost:
        total += len(words(" ".join(el.itertext())))
        _remove(el)
    return Dropped(len(outermost), total)


def report_dropped(metadata: dict[str, Any], dropped: Dropped) -> None:
    """Record in a normalized document's metadata how much boilerplate went."""
    if dropped.parts:
        metadata[DROPPED_PARTS] = dropped.parts
        metadata[DROPPED_WORDS] = dropped.words


def _navigation(el: etree._Element) -> bool:
    tag = str(el.tag).lower()
    classes = {c.lower() for c in str(el.get("class", "")).split()}
    if tag in ("div", "nav", "table", "dl", "ul") and classes & _NAVIGATION_CLASSES:
        return True
    if {"contents", "topic"} <= classes:  # docutils' table of contents
        return True
    if tag == "div" and str(el.get("id", "")).lower() in _NAVIGATION_IDS:
        return True
    return tag == "table" and bool(_NAVIGATION_SUMMARY.match(str(el.get("summary", "")).strip()))


def _toc_title(el: etree._Element) -> bool:
    """A short block whose whole text is "Table of Contents" (or the like)."""
    if str(el.tag).lower() not in ("p", "div", "h1", "h2", "h3", "h4", "h5", "h6"):
        return False
    text = " ".join(" ".join(el.itertext()).split()).rstrip(":")
    return bool(_TOC_TITLE.match(text))


def _link_list(el: etree._Element) -> bool:
    """A list all of whose words are link text."""
    if str(el.tag).lower() not in _LISTS:
        return False
    linked = sum(len(words(" ".join(a.itertext()))) for a in el.iter("a"))
    return linked > 0 and linked == len(words(" ".join(el.itertext())))


def _remove(el: etree._Element) -> None:
    parent = el.getparent()
    if parent is None:
        return
    tail = el.tail or ""
    previous = el.getprevious()
    if tail and previous is not None:
        previous.tail = (previous.tail or "") + tail
    elif tail:
        parent.text = (parent.text or "") + tail
    parent.remove(el)
