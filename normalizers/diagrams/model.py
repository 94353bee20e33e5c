"""What every diagram reader (draw.io, Gliffy, Visio) gives: pages of labels grouped by
their container, and the connections between shapes; and the one Markdown renderer
they share.

Geometry only orders things: within a container, labels and sub-containers are read
top to bottom, left to right within a row (tops within `SAME_ROW` of a row's first
item form a row; readers give positions in pixels, 96 to the inch). Neither it, nor
styles nor ids reach the Markdown. A page renders as

    # Page name
    - a label of the page itself
    **Container**
    - a label inside it
    **Container › Nested**
    - ...
    **Connections**
    - Source → Target: label

a connection's ends named by their shapes' text, a long one (a C4 box's name, type and
description) by its first line. A container without
a name (an unnamed group) lends its labels to its parent, in its place in the reading
order. A page without any text renders as nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import lxml.html
from lxml import etree

from normalizers.html import escape_text, plain_text
from normalizers.model import AnchoredMarkdown, NormalizedDocument
from normalizers.tables import escape_block_start, one_line

SAME_ROW = 10.0  # pixels: tops this close read as one row
LONG_END_NAME = 60  # characters: a connection names a shape with more by its first line


@dataclass(frozen=True)
class Label:
    text: str
    x: float = 0.0
    y: float = 0.0


@dataclass
class Container:
    """A page, layer, group, swimlane or container shape and what it holds."""

    name: str = ""
    x: float = 0.0
    y: float = 0.0
    labels: list[Label] = field(default_factory=list)
    children: list[Container] = field(default_factory=list)

    def has_text(self) -> bool:
        return (
            bool(self.name.strip())
            or any(label.text.strip() for label in self.labels)
            or any(child.has_text() for child in self.children)
        )


@dataclass(frozen=True)
class Connection:
    source: str
    target: str
    label: str = ""


@dataclass
class DiagramPage:
    name: str
    root: Container = field(default_factory=Container)
    connections: list[Connection] = field(default_factory=list)

    def has_text(self) -> bool:
        return self.root.has_text() or bool(self.connections)


def diagram_document(pages: Sequence[DiagramPage]) -> NormalizedDocument:
    """The pages as a document: `diagram_pages` in its metadata counts them (the run
    report counts the diagrams read)."""
    out = render_pages(pages)
    return NormalizedDocument(
        markdown=out.markdown,
        page_count=len(pages),
        metadata={"diagram_pages": len(pages)},
        anchors=out.anchors,
    )


def render_pages(pages: Sequence[DiagramPage], heading_level: int = 1) -> AnchoredMarkdown:
    """The pages as Markdown, each page's start anchored as page N (1-based); pages
    without text add nothing but their anchor, so a diagram without text is empty."""
    marks = "#" * max(1, min(heading_level, 6))
    out = AnchoredMarkdown("page")
    for number, page in enumerate(pages, start=1):
        if not page.has_text():
            out.add(number, "")
            continue
        blocks = [f"{marks} {_inline(page.name) or f'Page {number}'}"]
        blocks += _container_blocks(page.root, ())
        if page.connections:
            blocks.append("**Connections**")
            blocks.append("\n".join(f"- {_connection(c)}" for c in page.connections))
        out.add(number, "\n\n".join(blocks) + "\n\n")
    return out


def _container_blocks(container: Container, path: tuple[str, ...]) -> list[str]:
    labels, named = _flatten(container)
    blocks: list[str] = []
    if path and (labels or not named):
        blocks.append(f"**{escape_text(' › '.join(path))}**")
    if labels:
        blocks.append("\n".join(f"- {escape_block_start(label)}" for label in labels))
    for child in named:
        blocks += _container_blocks(child, (*path, one_line(child.name)))
    return blocks


def _flatten(container: Container) -> tuple[list[str], list[Container]]:
    """The container's labels in reading order, unnamed sub-containers' labels in
    their place, and its named sub-containers in reading order."""
    items: list[Label | Container] = [*container.labels, *container.children]
    labels: list[str] = []
    named: list[Container] = []
    for item in reading_order(items):
        if isinstance(item, Label):
            if text := _inline(item.text):
                labels.append(text)
        elif not one_line(item.name):
            inner_labels, inner_named = _flatten(item)
            labels += inner_labels
            named += inner_named
        elif item.has_text():
            named.append(item)
    return labels, named


def reading_order(items: Sequence[Label | Container]) -> list[Label | Container]:
    """Top to bottom; items whose tops lie within `SAME_ROW` of a row's first item form
    a row, read left to right."""
    by_top = sorted(items, key=lambda item: item.y)
    rows: list[list[Label | Container]] = []
    for item in by_top:
        if rows and item.y - rows[-1][0].y <= SAME_ROW:
            rows[-1].append(item)
        else:
            rows.append([item])
    return [item for row in rows for item in sorted(row, key=lambda item: item.x)]


def _connection(connection: Connection) -> str:
    """`Source → Target: label`, each end named by its shape's text, a long one by its
    first line (a C4 box's name and type, not its description, which its label holds)."""
    line = f"{_end_name(connection.source)} → {_end_name(connection.target)}"
    label = _inline(connection.label)
    return escape_block_start(f"{line}: {label}" if label else line)


def _end_name(text: str) -> str:
    if len(one_line(text)) <= LONG_END_NAME:
        return _inline(text)
    return _inline(next((line for line in text.splitlines() if line.strip()), ""))


def _inline(text: str) -> str:
    return escape_text(one_line(text))


def html_label_text(label: str) -> str:
    """An HTML label's text: `<br>` a line break, block elements (`<div>`, `<p>`) set
    apart by spaces, markup that does not parse as HTML kept as it is written."""
    if "<" not in label and "&" not in label:
        return label.strip()
    try:
        fragment = lxml.html.fragment_fromstring(label, create_parent="div")
    except (etree.ParserError, ValueError):
        return label.strip()
    return plain_text(fragment, block_gaps=True).strip()
