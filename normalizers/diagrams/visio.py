"""Visio diagrams to Markdown: VSDX/VSDM packages read directly, legacy VSD through
LibreOffice.

VSDX: each page (`visio/pages/pages.xml`: its name, its part through the page
relationships) lists its shapes (`<Shape>`, group shapes holding theirs in a nested
`<Shapes>`); a shape's words are its `<Text>` (fields' shown values included), its
place its `PinX`/`PinY` (inches, y upwards). A group shape is a container named by its
own text. `<Connects>` glue connectors to shapes: `FromSheet` is the connector,
`FromCell` `BeginX`/`EndX` says which end, `ToSheet` the shape; a connector glued at
both ends to shapes with text is a connection labelled by the connector's own text.
Text inherited from a master shape (a stencil's default text) is not read.

VSD (binary Visio, OLE2): LibreOffice Draw imports it (libvisio) and saves it as flat
ODF drawing XML, read here: each `draw:page`'s name and its shapes' text (`text:p`),
groups (`draw:g`) kept together, ordered by `svg:x`/`svg:y`. libvisio draws connectors
as plain lines, so a VSD's connections are not kept.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from collections.abc import Iterator
from types import MappingProxyType

from lxml import etree

from config.errors import ErrorCode
from config.safe_parsing import parse_xml
from normalizers.diagrams.model import (
    Connection,
    Container,
    DiagramPage,
    Label,
    diagram_document,
)
from normalizers.libreoffice import VSD_TO_FODG, convert_with_libreoffice
from normalizers.model import NormalizeContext, NormalizedDocument
from normalizers.ooxml import check_true_sizes, check_zip_limits

_VISIO = "{http://schemas.microsoft.com/office/visio/2012/main}"
_RELATIONSHIP = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
_PACKAGE_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_PIXELS_PER_INCH = 96.0
_PAGES_PART = "visio/pages/pages.xml"

_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_SVG = "{urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0}"
_LENGTH = re.compile(r"^\s*(-?[\d.]+)\s*(cm|mm|in|pt|pc|px)?\s*$")
_PIXELS_PER_UNIT = MappingProxyType(
    {"in": 96.0, "cm": 96 / 2.54, "mm": 96 / 25.4, "pt": 96 / 72, "pc": 16.0}
)


def vsdx_pages(data: bytes, ctx: NormalizeContext) -> list[DiagramPage]:
    check_zip_limits(data, ctx)
    check_true_sizes(data, ctx)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [
                _vsdx_page(name, parse_xml(archive.read(part), ctx.fail, part), ctx)
                for name, part in _vsdx_page_parts(archive, ctx)
            ]
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"broken Visio package: {exc}") from None


def _vsdx_page_parts(archive: zipfile.ZipFile, ctx: NormalizeContext) -> Iterator[tuple[str, str]]:
    """(name, part) of each page in the order pages.xml lists them."""
    if _PAGES_PART not in archive.namelist():
        raise ctx.fail(ErrorCode.CORRUPT, f"a Visio package without {_PAGES_PART}")
    pages = parse_xml(archive.read(_PAGES_PART), ctx.fail, _PAGES_PART)
    rels_part = "visio/pages/_rels/pages.xml.rels"
    rels = parse_xml(archive.read(rels_part), ctx.fail, rels_part)
    targets = {
        rel.get("Id"): posixpath.normpath(posixpath.join("visio/pages", rel.get("Target", "")))
        for rel in rels.iter(f"{_PACKAGE_RELS}Relationship")
    }
    for page in pages.iter(f"{_VISIO}Page"):
        rel = page.find(f"{_VISIO}Rel")
        part = targets.get(rel.get(_RELATIONSHIP)) if rel is not None else None
        if part is None:
            raise ctx.fail(ErrorCode.CORRUPT, f"page {page.get('Name')!r} names no page part")
        yield page.get("Name") or page.get("NameU") or "", part


def _vsdx_page(name: str, contents: etree._Element, ctx: NormalizeContext) -> DiagramPage:
    page = DiagramPage(name)
    texts: dict[str, str] = {}
    parents: dict[str, str] = {}
    shapes = contents.find(f"{_VISIO}Shapes")
    ends: dict[str, dict[str, str]] = {}  # connector id -> {"BeginX": shape id, "EndX": ...}
    for connect in contents.iter(f"{_VISIO}Connect"):
        end = connect.get("FromCell")
        if end in ("BeginX", "EndX"):
            ends.setdefault(connect.get("FromSheet", ""), {})[end] = connect.get("ToSheet", "")
    if shapes is not None:
        _collect(shapes, None, texts, parents)
        _add_shapes(shapes, page.root, ends, texts)
    for connector, glued in ends.items():
        source, target = (_shape_text(glued.get(end), texts, parents) for end in ("BeginX", "EndX"))
        if source and target:
            page.connections.append(Connection(source, target, texts.get(connector, "")))
    return page


def _collect(
    shapes: etree._Element, parent: str | None, texts: dict[str, str], parents: dict[str, str]
) -> None:
    for shape in shapes.iterfind(f"{_VISIO}Shape"):
        shape_id = shape.get("ID", "")
        texts[shape_id] = _vsdx_text(shape)
        if parent is not None:
            parents[shape_id] = parent
        inner = shape.find(f"{_VISIO}Shapes")
        if inner is not None:
            _collect(inner, shape_id, texts, parents)


def _add_shapes(
    shapes: etree._Element,
    container: Container,
    ends: dict[str, dict[str, str]],
    texts: dict[str, str],
) -> None:
    for shape in shapes.iterfind(f"{_VISIO}Shape"):
        shape_id = shape.get("ID", "")
        x, y = _pin(shape, "PinX"), -_pin(shape, "PinY")
        inner = shape.find(f"{_VISIO}Shapes")
        if inner is not None:
            group = Container(texts[shape_id], x, y)
            container.children.append(group)
            _add_shapes(inner, group, ends, texts)
        elif texts[shape_id] and len(ends.get(shape_id, {})) < 2:
            # A connector glued at both ends says its text in its connection.
            container.labels.append(Label(texts[shape_id], x, y))


def _shape_text(shape_id: str | None, texts: dict[str, str], parents: dict[str, str]) -> str:
    """The text of the shape, or of the nearest group holding it that has text (a
    connector is often glued to a part of a group)."""
    while shape_id is not None:
        if text := texts.get(shape_id):
            return text
        shape_id = parents.get(shape_id)
    return ""


def _vsdx_text(shape: etree._Element) -> str:
    text = shape.find(f"{_VISIO}Text")
    return "".join(text.itertext()).strip() if text is not None else ""


def _pin(shape: etree._Element, name: str) -> float:
    cell = shape.find(f"{_VISIO}Cell[@N='{name}']")
    try:
        return float(cell.get("V", "0")) * _PIXELS_PER_INCH if cell is not None else 0.0
    except ValueError:
        return 0.0


def vsd_pages(data: bytes, ctx: NormalizeContext) -> list[DiagramPage]:
    flat = parse_xml(
        convert_with_libreoffice(data, VSD_TO_FODG, ctx), ctx.fail, "LibreOffice's ODF"
    )
    pages = []
    for draw_page in flat.iter(f"{_DRAW}page"):
        page = DiagramPage(draw_page.get(f"{_DRAW}name", ""))
        _add_odf_shapes(draw_page, page.root)
        pages.append(page)
    return pages


def _add_odf_shapes(parent: etree._Element, container: Container) -> None:
    for shape in parent:
        if not isinstance(shape.tag, str) or not shape.tag.startswith(_DRAW):
            continue
        x, y = _length(shape.get(f"{_SVG}x")), _length(shape.get(f"{_SVG}y"))
        if shape.tag == f"{_DRAW}g":
            group = Container("", x, y)  # ODF groups have no text of their own
            container.children.append(group)
            _add_odf_shapes(shape, group)
        elif text := _odf_text(shape):
            container.labels.append(Label(text, x, y))


def _odf_text(shape: etree._Element) -> str:
    paragraphs = ("".join(p.itertext()).strip() for p in shape.iter(f"{_TEXT}p"))
    return "\n".join(text for text in paragraphs if text)


def _length(value: str | None) -> float:
    match = _LENGTH.match(value or "")
    if match is None:
        return 0.0
    return float(match.group(1)) * _PIXELS_PER_UNIT.get(match.group(2) or "px", 1.0)


def normalize_vsdx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    return diagram_document(vsdx_pages(data, ctx))


def normalize_vsd(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    document = diagram_document(vsd_pages(data, ctx))
    document.metadata["converted_with"] = "libreoffice"
    return document
