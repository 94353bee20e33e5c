"""draw.io (diagrams.net) diagrams to Markdown: `.drawio` files and any XML whose root
is `<mxfile>` (or a bare `<mxGraphModel>`), and draw.io's editable PNG and SVG exports,
which carry the same XML (a PNG text chunk of keyword `mxfile`, URL-encoded; the root
`<svg>`'s `content` attribute).

Every page (`<diagram name=...>`) is read, its body either plain (`<mxGraphModel>`
inside) or compressed (base64 of raw deflate of the URL-encoded XML). A cell's label is
its `value`, or the `label` of the `<object>`/`<UserObject>` wrapping it, `%name%`
placeholders filled from the wrapper's attributes when it says `placeholders="1"` (C4
and many templates keep all their words so). Labels styled `html=1` are HTML, read as
their text. Cells nest by `parent`: layers, groups,
swimlanes and containers hold the cells whose parent they are and name the group they
form by their own label. Edges connect their `source` and `target` cells; an edge's
label is its own with those of its child cells (draw.io keeps an edge's extra labels as
`connectable="0"` child vertices). `normalizers.diagrams.model` renders the pages.
"""

from __future__ import annotations

import base64
import binascii
import re
import zlib
from dataclasses import dataclass, field
from urllib.parse import unquote

from lxml import etree

from config.errors import ErrorCode
from config.safe_parsing import inflate, parse_xml
from normalizers.diagrams.model import (
    Connection,
    Container,
    DiagramPage,
    Label,
    diagram_document,
    html_label_text,
)
from normalizers.diagrams.sniff import PNG_MAGIC, mxfile_png_chunk
from normalizers.model import NormalizeContext, NormalizedDocument

_WRAPPERS = frozenset({"object", "UserObject"})
_PLACEHOLDER = re.compile(r"%([A-Za-z_][\w.-]*)%")


def normalize_drawio(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    return diagram_document(drawio_pages(data, ctx))


def drawio_pages(data: bytes, ctx: NormalizeContext) -> list[DiagramPage]:
    """The diagram's pages, from the draw.io file, PNG or SVG in `data`."""
    root = parse_xml(_mxfile_xml(data, ctx), ctx.fail, "draw.io XML")
    if root.tag == "mxGraphModel":
        return [_page("", root, ctx)]
    if root.tag != "mxfile":
        raise ctx.fail(
            ErrorCode.CORRUPT, f"not a draw.io diagram: the root element is <{root.tag}>"
        )
    pages = []
    for number, diagram in enumerate(root.iterfind("diagram"), start=1):
        model = _page_model(diagram, number, ctx)
        pages.append(_page(diagram.get("name", ""), model, ctx))
    return pages


def _mxfile_xml(data: bytes, ctx: NormalizeContext) -> bytes:
    if data.startswith(PNG_MAGIC):
        return _png_xml(data, ctx)
    root = parse_xml(data, ctx.fail, "draw.io XML")
    if etree.QName(root).localname != "svg":
        return data
    content = root.get("content")
    if not content:
        raise ctx.fail(ErrorCode.CORRUPT, "an SVG without a draw.io diagram in it")
    return str(content).encode("utf-8")


def _png_xml(data: bytes, ctx: NormalizeContext) -> bytes:
    chunk = mxfile_png_chunk(data)
    if chunk is None:
        raise ctx.fail(ErrorCode.CORRUPT, "a PNG without a draw.io diagram in it")
    kind, body = chunk
    what = f"the PNG's mxfile {kind.decode('ascii')} chunk"
    if kind == b"zTXt":  # compression method byte, then a zlib stream
        text = _inflate(body[1:], zlib.MAX_WBITS, ctx, what)
    elif kind == b"iTXt":  # compression flag and method, language\0, translated keyword\0
        compressed = body[:1] == b"\x01"
        parts = body[2:].split(b"\0", 2)
        if len(parts) < 3:
            raise ctx.fail(ErrorCode.CORRUPT, f"{what} is truncated")
        text = _inflate(parts[2], zlib.MAX_WBITS, ctx, what) if compressed else parts[2]
    else:
        text = body
    return _url_decoded(text, ctx, what)


def _inflate(raw: bytes, wbits: int, ctx: NormalizeContext, what: str) -> bytes:
    return inflate(raw, wbits, ctx.limits.max_decompressed_bytes, ctx.fail, what)


def _url_decoded(text: bytes, ctx: NormalizeContext, what: str) -> bytes:
    try:
        return unquote(text.decode("utf-8"), errors="strict").encode("utf-8")
    except UnicodeDecodeError as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"{what} is not URL-encoded UTF-8: {exc}") from None


def _page_model(diagram: etree._Element, number: int, ctx: NormalizeContext) -> etree._Element:
    """The page's `<mxGraphModel>`: a child element, or the compressed body inflated."""
    model = diagram.find("mxGraphModel")
    if model is not None:
        return model
    body = "".join((diagram.text or "").split())
    what = f"page {number} ({diagram.get('name', '')!r})"
    if not body:
        return etree.Element("mxGraphModel")  # a page that was never drawn on
    try:
        raw = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ctx.fail(
            ErrorCode.CORRUPT, f"{what}: the compressed body is not base64: {exc}"
        ) from None
    xml = _url_decoded(_inflate(raw, -zlib.MAX_WBITS, ctx, f"{what}'s body"), ctx, what)
    return parse_xml(xml, ctx.fail, f"{what}'s XML")


@dataclass
class _Cell:
    id: str
    parent: str | None
    label: str
    vertex: bool
    edge: bool
    source: str | None
    target: str | None
    x: float
    y: float
    width: float
    height: float
    style: dict[str, str]
    children: list[_Cell] = field(default_factory=list)


def _page(name: str, model: etree._Element, ctx: NormalizeContext) -> DiagramPage:
    cells = _cells(model)
    by_id = {cell.id: cell for cell in cells}
    roots: list[_Cell] = []
    for cell in cells:
        parent = by_id.get(cell.parent) if cell.parent else None
        if parent is None or parent is cell:
            roots.append(cell)
        else:
            parent.children.append(cell)
    page = DiagramPage(name)
    for cell in roots:
        _place(cell, page.root, page, by_id)
    return page


def _place(cell: _Cell, container: Container, page: DiagramPage, by_id: dict[str, _Cell]) -> None:
    """Put the cell where it belongs: an edge among the page's connections, a cell
    holding others as a container, any other as a label of `container`."""
    if cell.edge:
        label = " ".join(
            text for text in (cell.label, *(child.label for child in cell.children)) if text
        )
        source, target = by_id.get(cell.source or ""), by_id.get(cell.target or "")
        if source is not None and target is not None and source.label and target.label:
            page.connections.append(Connection(source.label, target.label, label))
        elif label:  # not between two named shapes: its words stay as a label
            container.labels.append(Label(label, cell.x, cell.y))
        return
    bounds = (cell.x, cell.y, cell.width, cell.height)
    if cell.children and _is_table(cell):
        container.children.append(Container(cell.label, *bounds, rows=_table_rows(cell)))
    elif cell.children:
        inner = Container(cell.label, *bounds)
        container.children.append(inner)
        for child in cell.children:
            _place(child, inner, page, by_id)
    elif cell.label:
        container.labels.append(Label(cell.label, *bounds))
    elif cell.vertex:  # no text, but labels drawn on it are its own
        container.children.append(Container("", *bounds))


def _is_table(cell: _Cell) -> bool:
    """A draw.io table (rows of cells), or a list whose rows have parts (`part=1`
    cells: an entity's key column); not when a cell holds shapes (a grid that lays out
    a story map or a cross-functional flowchart)."""
    style = cell.style
    parts = [part for row in cell.children for part in row.children]
    if any(inner.vertex for part in parts for inner in part.children):
        return False
    if style.get("shape") == "table" or style.get("childLayout") == "tableLayout":
        return True
    return style.get("childLayout") == "stackLayout" and any(
        part.style.get("part") == "1" for part in parts
    )


def _table_rows(table: _Cell) -> list[list[str]]:
    """The table's cells top to bottom, each row's left to right; a row's own label is
    a cell where rows have labels (a list's), placed where its text starts."""
    rows = sorted((row for row in table.children if row.vertex), key=lambda row: row.y)
    own = any(row.label for row in rows)
    out = []
    for row in rows:
        cells = [(part.x, part.label) for part in row.children if part.vertex]
        if own:
            cells.append((_style_number(row.style, "spacingLeft"), row.label))
        texts = [text for _, text in sorted(cells, key=lambda cell: cell[0])]
        if any(texts):
            out.append(texts)
    return out


def _cells(model: etree._Element) -> list[_Cell]:
    root = model.find("root")
    if root is None:
        return []
    read: list[tuple[etree._Element | None, dict[str, str], str, bool]] = []
    # A wrapper's attributes and every cell's parent: placeholders are looked up in the
    # cell's own attributes, then its ancestors' (a Kanban card's %status% is its column's).
    attributes_of: dict[str, dict[str, str]] = {}
    parent_of: dict[str, str] = {}
    for element in root:
        if element.tag in _WRAPPERS:
            cell = element.find("mxCell")
            attributes = dict(element.attrib)
            label = attributes.get("label", "")
            attributes_of[attributes.get("id", "")] = attributes
            placeholders = attributes.get("placeholders") == "1"
        elif element.tag == "mxCell":
            cell, attributes = element, dict(element.attrib)
            label, placeholders = attributes.get("value", ""), False
        else:
            continue
        parent = cell.get("parent") if cell is not None else None
        if parent is not None:
            parent_of[attributes.get("id", "")] = parent
        read.append((cell, attributes, label, placeholders))
    cells = []
    for cell, attributes, label, placeholders in read:
        cell_attributes = dict(cell.attrib) if cell is not None else {}
        style = _style(cell_attributes.get("style", ""))
        geometry = cell.find("mxGeometry") if cell is not None else None
        if placeholders:
            label = _filled(label, attributes.get("id", ""), attributes_of, parent_of)
        cells.append(
            _Cell(
                id=attributes.get("id", ""),
                parent=cell_attributes.get("parent"),
                label=html_label_text(label) if style.get("html") == "1" else label.strip(),
                vertex=cell_attributes.get("vertex") == "1",
                edge=cell_attributes.get("edge") == "1",
                source=cell_attributes.get("source"),
                target=cell_attributes.get("target"),
                x=_number(geometry, "x"),
                y=_number(geometry, "y"),
                width=_number(geometry, "width"),
                height=_number(geometry, "height"),
                style=style,
            )
        )
    return cells


def _filled(
    label: str,
    cell_id: str,
    attributes_of: dict[str, dict[str, str]],
    parent_of: dict[str, str],
) -> str:
    """`%name%` replaced by the attribute `name` of the cell or its nearest ancestor that
    has one, as draw.io shows it (nothing where none has it)."""

    def value(match: re.Match[str]) -> str:
        current: str | None = cell_id
        seen: set[str] = set()
        while current is not None and current not in seen:
            seen.add(current)
            found = attributes_of.get(current, {}).get(match.group(1))
            if found is not None:
                return found
            current = parent_of.get(current)
        return ""

    return _PLACEHOLDER.sub(value, label)


def _style(style: str) -> dict[str, str]:
    """A cell's style as its `key=value` pairs (a bare name, the shape's style, left out)."""
    pairs = (item.split("=", 1) for item in style.split(";") if "=" in item)
    return {key.strip(): value.strip() for key, value in pairs}


def _style_number(style: dict[str, str], name: str) -> float:
    try:
        return float(style.get(name, "0"))
    except ValueError:
        return 0.0


def _number(geometry: etree._Element | None, name: str) -> float:
    if geometry is None:
        return 0.0
    try:
        return float(geometry.get(name, "0"))
    except ValueError:
        return 0.0
