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
order; a named one without any text inside (a stencil's group of drawn parts) is a
label of its parent. A table drawn in the diagram (`Container.rows`) is a Markdown
table under its container's path, its first row the header. A page without any text
renders as nothing.

Where readers give sizes, geometry also groups (`nest_by_bounds`): what lies within
another shape of its group is held by it, even when the file does not make it that
shape's child (a SWOT box and the items written on it). Of the shapes that cover at
least `HELD_SHARE` of an item's area, the smallest larger one holds it: an item well
inside it (more than `EDGE` pixels from each side) is one of its labels, one on its
edge (a badge, an id) joins its name: `Website (C01, A02)`. A shape without text
holds what lies on it like an unnamed group: together, in its place.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import lxml.html
from lxml import etree

from normalizers.html import plain_text
from normalizers.markdown import escape_text
from normalizers.model import AnchoredMarkdown, NormalizedDocument
from normalizers.tables import escape_block_start, gfm_table, one_line

SAME_ROW = 10.0  # pixels: tops this close read as one row
LONG_END_NAME = 60  # characters: a connection names a shape with more by its first line
HELD_SHARE = 0.25  # of an item's area: a shape covering this much may hold it
EDGE = 1.0  # pixels: an item this close to a side of its holder (or over it) is a badge
GRID_CELLS = 64  # a side of the grid that finds which items lie near which, at most
FAR = 1e9  # pixels: a shape with an edge this far out (or not a number) is not placed


@dataclass(frozen=True)
class Label:
    """A shape's text; `x`, `y` its top left corner, `width`, `height` its size (0:
    unknown, then geometry only orders it)."""

    text: str
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = 0.0


@dataclass
class Container:
    """A page, layer, group, swimlane, container shape or table and what it holds."""

    name: str = ""
    x: float = 0.0
    y: float = 0.0
    width: float = 0.0
    height: float = 0.0
    labels: list[Label] = field(default_factory=list)
    children: list[Container] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)  # a table's cells, row by row

    def has_text(self) -> bool:
        return self.name.strip() != "" or self.holds_text()

    def holds_text(self) -> bool:
        """Is there text inside it, besides its name?"""
        return (
            any(label.text.strip() for label in self.labels)
            or any(child.has_text() for child in self.children)
            or any(cell.strip() for row in self.rows for cell in row)
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
    out = AnchoredMarkdown("page", hard=True)
    for number, page in enumerate(pages, start=1):
        if not page.has_text():
            out.add(number, "")
            continue
        blocks = [f"{marks} {_inline(page.name) or f'Page {number}'}"]
        blocks += _container_blocks(nest_by_bounds(page.root), ())
        if page.connections:
            blocks.append("**Connections**")
            blocks.append("\n".join(f"- {_connection(c)}" for c in page.connections))
        out.add(number, "\n\n".join(blocks) + "\n\n")
    return out


def _container_blocks(container: Container, path: tuple[str, ...]) -> list[str]:
    labels, named = _flatten(container)
    blocks: list[str] = []
    if path and (labels or container.rows or not named):
        blocks.append(f"**{escape_text(' › '.join(path))}**")
    if container.rows:
        header, *rows = [[_inline(cell) for cell in row] for row in container.rows]
        blocks.append(gfm_table(header, rows))
    if labels:
        blocks.append("\n".join(f"- {escape_block_start(label)}" for label in labels))
    for child in named:
        name = one_line(child.name)
        blocks += _container_blocks(child, (*path, name) if name else path)
    return blocks


def _flatten(container: Container) -> tuple[list[str], list[Container]]:
    """The container's labels in reading order, unnamed sub-containers' labels in
    their place (an unnamed table stays a table), named ones without text inside as
    labels, and its other sub-containers in reading order."""
    items: list[Label | Container] = [*container.labels, *container.children]
    labels: list[str] = []
    named: list[Container] = []
    for item in reading_order(items):
        if isinstance(item, Label):
            if text := _inline(item.text):
                labels.append(text)
        elif item.rows:
            if item.holds_text():
                named.append(item)
            elif text := _inline(item.name):
                labels.append(text)
        elif not one_line(item.name):
            inner_labels, inner_named = _flatten(item)
            labels += inner_labels
            named += inner_named
        elif item.holds_text():
            named.append(item)
        else:
            labels.append(_inline(item.name))
    return labels, named


def nest_by_bounds(container: Container) -> Container:
    """A copy of `container` whose items, at every level, are held by the shapes of their
    group they lie within (see the module's doc); the readers' tree is left as it is."""
    items: list[Label | Container] = [
        *container.labels,
        *(nest_by_bounds(child) for child in container.children),
    ]
    held: dict[int, list[int]] = {}
    for index, holder in _holders(items).items():
        held.setdefault(holder, []).append(index)
    for holder, inside in list(held.items()):
        if len(inside) < 2 and not _text(items[holder]):
            del held[holder]  # a shape without text around one label adds nothing
    taken = {index for inside in held.values() for index in inside}
    out = replace(container, labels=[], children=[])
    for index in range(len(items)):
        if index not in taken:
            _add(out, _holding(index, items, held))
    return out


def _holders(items: Sequence[Label | Container]) -> dict[int, int]:
    """The index of each item's holder, by the item's index: the smallest item larger
    than it that covers `HELD_SHARE` of it. Items are found through a grid over the
    items' extent (about one item a cell, `GRID_CELLS` a side at most), so each is
    compared with those near it only."""
    boxes = {
        index: (item.x, item.y, item.x + item.width, item.y + item.height)
        for index, item in enumerate(items)
        if item.width > 0 and item.height > 0
    }
    boxes = {index: box for index, box in boxes.items() if all(abs(e) < FAR for e in box)}
    if not boxes:
        return {}
    left = min(box[0] for box in boxes.values())
    top = min(box[1] for box in boxes.values())
    side = min(GRID_CELLS, math.isqrt(len(boxes)) or 1)  # about one item a cell
    step_x = (max(box[2] for box in boxes.values()) - left) / side or 1.0
    step_y = (max(box[3] for box in boxes.values()) - top) / side or 1.0

    def cells(box: tuple[float, float, float, float]) -> Iterator[tuple[int, int]]:
        columns = range(int((box[0] - left) / step_x), int((box[2] - left) / step_x) + 1)
        for row in range(int((box[1] - top) / step_y), int((box[3] - top) / step_y) + 1):
            yield from ((column, row) for column in columns)

    grid: dict[tuple[int, int], list[int]] = {}
    for index, box in boxes.items():
        for cell in cells(box):
            grid.setdefault(cell, []).append(index)
    holders: dict[int, int] = {}
    for index, box in boxes.items():
        area = (box[2] - box[0]) * (box[3] - box[1])
        best, best_area = -1, math.inf
        for other in {near for cell in cells(box) for near in grid[cell]}:
            x0, y0, x1, y1 = boxes[other]
            other_area = (x1 - x0) * (y1 - y0)
            if not area < other_area < best_area:
                continue
            across = min(box[2], x1) - max(box[0], x0)
            down = min(box[3], y1) - max(box[1], y0)
            if across > 0 and down > 0 and across * down >= HELD_SHARE * area:
                best, best_area = other, other_area
        if best >= 0:
            holders[index] = best
    return holders


def _on_edge(item: Label | Container, holder: Label | Container) -> bool:
    return (
        min(
            item.x - holder.x,
            item.y - holder.y,
            holder.x + holder.width - item.x - item.width,
            holder.y + holder.height - item.y - item.height,
        )
        <= EDGE
    )


def _holding(
    index: int, items: Sequence[Label | Container], held: dict[int, list[int]]
) -> Label | Container:
    """Item `index` with what it holds: its badges in its name, the rest inside it."""
    item = items[index]
    inside = [_holding(i, items, held) for i in held.get(index, ())]
    if not inside:
        return item
    text = _text(item)
    badges = [i for i in inside if text and isinstance(i, Label) and _on_edge(i, item)]
    inside = [i for i in inside if not any(i is badge for badge in badges)]
    if badges:
        text += f" ({', '.join(_text(badge) for badge in reading_order(badges))})"
    if isinstance(item, Label):
        if not inside:
            return replace(item, text=text)
        item = Container(text, item.x, item.y, item.width, item.height)
    holder = replace(item, name=text, labels=list(item.labels), children=list(item.children))
    for inner in inside:
        _add(holder, inner)
    return holder


def _add(container: Container, item: Label | Container) -> None:
    if isinstance(item, Label):
        container.labels.append(item)
    else:
        container.children.append(item)


def _text(item: Label | Container) -> str:
    return one_line(item.text if isinstance(item, Label) else item.name)


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
