"""Gliffy diagrams (`application/gliffy+json`) to Markdown.

A Gliffy file is one page: its `stage` holds `objects`, each with a position relative
to the object holding it, a `graphic` (`Shape`, `Text`, `Line`, `Image`, ... or none
for a group) and `children`. A shape's words are in its children whose graphic is
`Text` (HTML in `graphic.Text.html`); an object holding other objects besides its text
(a group, a swimlane) is a container named by its own text. A `Line` joins the shapes
its `constraints` name (`startConstraint.StartPositionConstraint.nodeId`, the end
likewise) and is labelled by its own Text children. Objects on different layers
(`stage.layers`, an object's `layerId`) are grouped by layer when there is more than
one. The page is named by the diagram's `metadata.title` (Gliffy's default "untitled"
and a missing one fall back to the file's name).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

from config.errors import ErrorCode
from normalizers.diagrams.model import (
    Connection,
    Container,
    DiagramPage,
    Label,
    diagram_document,
    html_label_text,
)
from normalizers.model import NormalizeContext, NormalizedDocument

_UNTITLED = "untitled"


def normalize_gliffy(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    return diagram_document(gliffy_pages(data, ctx))


def gliffy_pages(data: bytes, ctx: NormalizeContext) -> list[DiagramPage]:
    try:
        document = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"not valid Gliffy JSON: {exc}") from None
    stage = document.get("stage") if isinstance(document, dict) else None
    if not isinstance(stage, dict) or not isinstance(stage.get("objects"), list):
        raise ctx.fail(ErrorCode.CORRUPT, "Gliffy JSON without a stage holding objects")
    metadata = document.get("metadata")
    title = metadata.get("title") if isinstance(metadata, dict) else None
    if not isinstance(title, str) or title.strip().lower() in ("", _UNTITLED):
        title = PurePath(ctx.filename).stem
    page = DiagramPage(title)
    objects = [o for o in stage["objects"] if isinstance(o, dict)]
    names = _shape_names(objects)
    layers = _layers(stage.get("layers"))
    if len(layers) > 1:
        by_id = {}
        for order, (guid, name) in enumerate(layers):
            # Layers have no position: their stacking order orders them (all on one row).
            by_id[guid] = Container(name, x=order, y=0.0)
        page.root.children += by_id.values()
        for obj in objects:
            _place(obj, by_id.get(str(obj.get("layerId")), page.root), page, names)
    else:
        for obj in objects:
            _place(obj, page.root, page, names)
    return [page]


def _layers(value: Any) -> list[tuple[str, str]]:
    """(guid, name) of each layer, bottom first."""
    if not isinstance(value, list):
        return []
    layers = [layer for layer in value if isinstance(layer, dict) and "guid" in layer]
    layers.sort(key=lambda layer: _number(layer.get("order")))
    return [(str(layer["guid"]), str(layer.get("name") or "")) for layer in layers]


def _place(
    obj: Mapping[str, Any], container: Container, page: DiagramPage, names: Mapping[str, str]
) -> None:
    kind = _graphic_type(obj)
    children = [c for c in obj.get("children") or () if isinstance(c, dict)]
    text = _own_text(obj)
    if kind == "Line":
        source, target = (names.get(_end(obj, end)) for end in ("start", "end"))
        if source and target:
            page.connections.append(Connection(source, target, text))
        elif text:  # not between two named shapes: its words stay as a label
            container.labels.append(Label(text, _number(obj.get("x")), _number(obj.get("y"))))
        return
    bounds = _bounds(obj)
    held = [c for c in children if _graphic_type(c) != "Text"]
    if held:
        inner = Container(text, *bounds)
        container.children.append(inner)
        for child in held:
            _place(child, inner, page, names)
    elif text:
        container.labels.append(Label(text, *bounds))
    else:  # no text, but labels drawn on it are its own (a SWOT box)
        container.children.append(Container("", *bounds))


def _bounds(obj: Mapping[str, Any]) -> tuple[float, float, float, float]:
    """x, y, width, height of the box the object covers on its stage, turned by its
    `rotation` (degrees about its centre): a label turned upright takes its height across."""
    x, y = _number(obj.get("x")), _number(obj.get("y"))
    width, height = _number(obj.get("width")), _number(obj.get("height"))
    turn = math.radians(_number(obj.get("rotation")))
    cos, sin = abs(math.cos(turn)), abs(math.sin(turn))
    across, down = width * cos + height * sin, width * sin + height * cos
    return x + (width - across) / 2, y + (height - down) / 2, across, down


def _shape_names(objects: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each object's text by its id, nested objects too (lines name the shapes they join)."""
    names: dict[str, str] = {}
    pending = list(objects)
    while pending:
        obj = pending.pop()
        if text := _own_text(obj):
            names[str(obj.get("id"))] = text
        pending += [c for c in obj.get("children") or () if isinstance(c, dict)]
    return names


def _own_text(obj: Mapping[str, Any]) -> str:
    """The object's text: its own when it is a Text object, else its Text children's."""
    sources = [obj] if _graphic_type(obj) == "Text" else obj.get("children") or ()
    texts = []
    for source in sources:
        if isinstance(source, dict) and _graphic_type(source) == "Text":
            html = ((source.get("graphic") or {}).get("Text") or {}).get("html")
            if isinstance(html, str) and (text := html_label_text(html)):
                texts.append(text)
    return "\n".join(texts)


def _end(line: Mapping[str, Any], end: str) -> str:
    constraints = line.get("constraints") or {}
    constraint = constraints.get(f"{end}Constraint") or {}
    position = constraint.get(f"{end.capitalize()}PositionConstraint") or {}
    return str(position.get("nodeId"))


def _graphic_type(obj: Mapping[str, Any]) -> str | None:
    graphic = obj.get("graphic")
    kind = graphic.get("type") if isinstance(graphic, dict) else None
    return kind if isinstance(kind, str) else None


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0
