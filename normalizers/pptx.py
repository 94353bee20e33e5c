"""PPTX/PPTM to Markdown (docs/sources.md#normalization-contract) with python-pptx.

Each slide is a `## Slide N: <title>` section (`## Slide N` without a title placeholder)
holding its shapes in reading order: top to bottom, left to right within a row (the
file's z-order is the order shapes were added, often not the order they are read in):
- text frames: paragraphs; bulleted or numbered paragraphs (`buChar`/`buAutoNum` on
  the paragraph or inherited from the shape's and its layout placeholder's list styles;
  otherwise body/content placeholders are bulleted, as masters make them) become lists
  nested by `paragraph.level`; a frame holding a single paragraph is a plain paragraph;
- tables as GFM tables, merged cells filled, the first row as header;
- group shapes walked recursively; SmartArt as a list of its nodes' text; charts as
  title + data table; pictures as `Image: <alt text>` when they have alt text (a bare
  file name is not alt text), then, with a picture reader, the text the picture shows
  (the slide's own pictures: the layout's and master's are backdrop, not content);
- speaker notes as a block quote opening with `Notes:` at the end of the slide section.
  A block quote rather than a `### Notes` heading keeps the notes inside the slide's
  section (same `headings_path`) instead of opening a tiny section of their own;
- review comments (legacy and modern, replies after their comment) as a last block
  quote, each line naming its author.
A shape python-pptx cannot read is skipped with a warning; the deck still converts.
The words of the slides' and notes' own text (`a:t`, without the date, footer and
slide number placeholders) are checked against the Markdown (`normalizers.selfcheck`).
A deck python-pptx cannot open goes through a LibreOffice round trip
(`normalizers.fallback`) before it is reported CORRUPT.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterable
from typing import Any

from pptx import Presentation
from pptx.enum.shapes import PP_PLACEHOLDER
from pptx.oxml.ns import qn
from pptx.shapes.group import GroupShape
from pptx.shapes.picture import Picture

from config.safe_parsing import xml_root
from normalizers.charts import chart_markdown
from normalizers.fallback import Reader, first_that_reads, office_round_trip
from normalizers.libreoffice import PPTX_ROUND_TRIP
from normalizers.model import (
    AnchoredMarkdown,
    NormalizeContext,
    NormalizedDocument,
    PictureText,
)
from normalizers.ooxml import IMAGE_FILE_NAME, check_zip_limits, iso_datetime, without_doctypes
from normalizers.selfcheck import loss_warning, word_loss
from normalizers.tables import comment_line, escape_block_start, gfm_table, one_line

_TITLE_TYPES = frozenset(
    {PP_PLACEHOLDER.TITLE, PP_PLACEHOLDER.CENTER_TITLE, PP_PLACEHOLDER.VERTICAL_TITLE}
)
# Placeholders whose paragraphs inherit bullets from the slide master.
_BODY_TYPES = frozenset({PP_PLACEHOLDER.BODY, PP_PLACEHOLDER.OBJECT, PP_PLACEHOLDER.VERTICAL_BODY})
# Repeated on every slide, not content.
_CHROME_TYPES = frozenset({PP_PLACEHOLDER.DATE, PP_PLACEHOLDER.FOOTER, PP_PLACEHOLDER.SLIDE_NUMBER})
_DGM = "{http://schemas.openxmlformats.org/drawingml/2006/diagram}"
_DIAGRAM_REL_IDS, _DIAGRAM_POINT = f"{_DGM}relIds", f"{_DGM}pt"
_DATA_MODEL_ID = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}dm"
_PARAGRAPH = qn("a:p")
# The parts whose text the deck's Markdown holds (DOCTYPEs are removed from these).
_TEXT_PARTS = ("ppt/slides/", "ppt/notesSlides/", "ppt/comments/", "ppt/charts/",
               "ppt/diagrams/", "ppt/authors", "ppt/commentAuthors")  # fmt: skip
_BREAK = qn("a:br")
_SAME_ROW_EMU = 228_600  # a quarter inch: tops closer than this are one row
# Placeholders whose text is page furniture, left out of the self-check like the output.
_FURNITURE = frozenset({"dt", "ftr", "sldNum", "hdr"})
_PLACEHOLDER_PATH = f"{qn('p:nvSpPr')}/{qn('p:nvPr')}/{qn('p:ph')}"
_P_NS = "http://schemas.openxmlformats.org/presentationml/2006/main"
_MODERN = "{http://schemas.microsoft.com/office/powerpoint/2018/8/main}"
_PARENT_COMMENT = "{http://schemas.microsoft.com/office/powerpoint/2012/main}parentCm"


def normalize_pptx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)  # a broken zip directory or a zip bomb ends here
    return first_that_reads(_READERS, data, ctx)


def _read_with_python_pptx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    deck = Presentation(io.BytesIO(without_doctypes(data, _TEXT_PARTS)))
    out = AnchoredMarkdown("slide")
    warnings: list[str] = []
    texts: list[str] = []  # the slides' and notes' own text, for the self-check
    authors = _comment_authors(deck)
    first_title: str | None = None
    for number, slide in enumerate(deck.slides, 1):
        title_shape = _title_shape(slide)
        title = one_line(title_shape.text_frame.text) if title_shape is not None else ""
        if number == 1 and title:
            first_title = title
        where = f"slide {number}"
        blocks = _shape_blocks(slide.shapes, title_shape, where, warnings, ctx.pictures)
        notes = _notes(slide, number, warnings)
        if notes:
            blocks.append(notes)
        comments = _comments(slide, authors)
        if comments:
            blocks.append(comments)
        heading = f"## Slide {number}: {title}" if title else f"## Slide {number}"
        out.add(number, "\n\n".join([heading, *blocks]) + "\n\n")
        texts.extend(_own_text(slide.element))
        if slide.has_notes_slide:
            texts.extend(_own_text(slide.notes_slide.element))
    note = loss_warning(word_loss(texts, out.markdown), "the slides' text")
    if note:
        warnings.append(note)
    props = deck.core_properties
    return NormalizedDocument(
        markdown=out.markdown,
        title=props.title or first_title,
        author=props.author or props.last_modified_by or None,
        created_at=iso_datetime(props.created),
        updated_at=iso_datetime(props.modified),
        page_count=out.sections,
        metadata={"slides": out.sections},
        anchors=out.anchors,
        warnings=tuple(warnings),
    )


_PYTHON_PPTX = Reader("python-pptx", _read_with_python_pptx)
_READERS = (_PYTHON_PPTX, office_round_trip(PPTX_ROUND_TRIP, _PYTHON_PPTX))


def _own_text(root: Any) -> list[str]:
    """The text of every paragraph of a slide (or notes) part, page furniture out."""
    texts = []
    for paragraph in root.iter(_PARAGRAPH):
        shape = next(paragraph.iterancestors(qn("p:sp")), None)
        placeholder = shape.find(_PLACEHOLDER_PATH) if shape is not None else None
        if placeholder is not None and placeholder.get("type") in _FURNITURE:
            continue
        parts = paragraph.iter(qn("a:t"), qn("a:br"))  # a line break parts words
        texts.append("".join(" " if part.tag == _BREAK else part.text or "" for part in parts))
    return texts


def _title_shape(slide: Any) -> Any:
    for shape in slide.placeholders:
        try:
            if shape.placeholder_format.type in _TITLE_TYPES and shape.has_text_frame:
                return shape
        except (NotImplementedError, ValueError, KeyError):
            continue
    return None


def _shape_blocks(
    shapes: Iterable[Any],
    skip: Any,
    where: str,
    warnings: list[str],
    pictures: PictureText | None,
) -> list[str]:
    """Markdown blocks of shapes in order; an unreadable shape becomes a warning."""
    blocks: list[str] = []
    for shape in _reading_order(shapes):
        if skip is not None and shape.shape_id == skip.shape_id:
            continue
        try:
            blocks.extend(_shape(shape, where, warnings, pictures))
        except Exception as exc:  # python-pptx raises anything on shapes it does not model
            name = getattr(shape, "name", "?")
            warnings.append(f"{where}: shape {name!r} skipped ({type(exc).__name__}: {exc})")
    return blocks


def _reading_order(shapes: Iterable[Any]) -> list[Any]:
    """Top to bottom; shapes whose tops lie within `_SAME_ROW_EMU` of a row's first
    shape form a row, read left to right. Shapes without a position keep their z-order
    and come last."""
    placed: list[tuple[int, int, Any]] = []
    unplaced: list[Any] = []
    for shape in shapes:
        try:
            top, left = _position(shape)
        except Exception:  # an unreadable shape: its own conversion reports it
            top = left = None
        if top is None or left is None:
            unplaced.append(shape)
        else:
            placed.append((int(top), int(left), shape))
    placed.sort(key=lambda item: item[0])
    rows: list[list[tuple[int, int, Any]]] = []
    for item in placed:
        if rows and item[0] - rows[-1][0][0] <= _SAME_ROW_EMU:
            rows[-1].append(item)
        else:
            rows.append([item])
    ordered = [item[2] for row in rows for item in sorted(row, key=lambda item: item[1])]
    return ordered + unplaced


# Where a shape's own offset is written: shapes and pictures, graphic frames, groups.
_OFFSETS = (
    f"{qn('p:spPr')}/{qn('a:xfrm')}/{qn('a:off')}",
    f"{qn('p:grpSpPr')}/{qn('a:xfrm')}/{qn('a:off')}",
    f"{qn('p:xfrm')}/{qn('a:off')}",
)


def _position(shape: Any) -> tuple[Any, Any]:
    """(top, left) in EMU: the shape's own offset, read from its XML, else that of the
    layout (or master) placeholder it inherits from, looked up once (python-pptx's
    `top` and `left` look it up once each)."""
    for path in _OFFSETS:
        offset = shape.element.find(path)
        if offset is not None and offset.get("x") is not None and offset.get("y") is not None:
            return int(offset.get("y")), int(offset.get("x"))
    base = getattr(shape, "_base_placeholder", None) if shape.is_placeholder else None
    return _position(base) if base is not None else (shape.top, shape.left)


def _shape(shape: Any, where: str, warnings: list[str], pictures: PictureText | None) -> list[str]:
    if isinstance(shape, GroupShape):
        return _shape_blocks(shape.shapes, None, where, warnings, pictures)
    placeholder = _placeholder_type(shape)
    if placeholder in _CHROME_TYPES:
        return []
    if getattr(shape, "has_table", False):
        return [_table(shape.table)]
    if getattr(shape, "has_chart", False):
        chart = chart_markdown(xml_root(shape.chart_part.blob))
        return [chart] if chart else []
    if isinstance(shape, Picture):
        alt = _alt_text(shape)
        shown = _picture_text(shape, pictures) if pictures is not None else ""
        return [block for block in (f"Image: {alt}" if alt else "", shown) if block]
    if shape.element.tag == qn("p:graphicFrame"):
        diagram = _diagram(shape)
        return [diagram] if diagram else []
    if getattr(shape, "has_text_frame", False):
        bulleted = placeholder in _BODY_TYPES
        text = _text_frame(shape.text_frame, _list_styles(shape), bulleted=bulleted)
        return [text] if text else []
    return []


def _diagram(shape: Any) -> str:
    """SmartArt: the text of its data model's nodes, as a list in model order (the
    layout python-pptx does not read lives in separate parts; the words live here)."""
    for rel_ids in shape.element.iter(_DIAGRAM_REL_IDS):
        data = xml_root(shape.part.related_part(rel_ids.get(_DATA_MODEL_ID)).blob)
        texts = [
            one_line(" ".join("".join(p.itertext()) for p in point.iter(_PARAGRAPH)))
            for point in data.iter(_DIAGRAM_POINT)
            if point.get("type", "node") == "node"
        ]
        return "\n".join("- " + escape_block_start(text) for text in texts if text)
    return ""


def _alt_text(shape: Any) -> str:
    """The picture's description; PowerPoint and python-pptx put the image's file name
    there when nobody wrote one, and a file name describes nothing."""
    descr = shape.element.xpath("./p:nvPicPr/p:cNvPr/@descr")
    text = one_line(descr[0]) if descr else ""
    return "" if IMAGE_FILE_NAME.fullmatch(text) else escape_block_start(text)


def _picture_text(shape: Any, pictures: PictureText) -> str:
    """What the picture shows, named by its media part; a linked (not embedded) or
    missing image shows nothing."""
    rel_id = shape._element.blip_rId
    if rel_id is None or rel_id not in shape.part.rels:
        return ""
    rel = shape.part.rels[rel_id]
    if rel.is_external:
        return ""
    image = rel.target_part
    return pictures.text(image.blob, posixpath.basename(str(image.partname)))


def _placeholder_type(shape: Any) -> Any:
    if not shape.is_placeholder:
        return None
    return shape.placeholder_format.type


# --- text ------------------------------------------------------------------------------


def _text_frame(frame: Any, styles: list[Any], *, bulleted: bool) -> str:
    items = [
        (_list_kind(p, styles, bulleted), max(0, int(p.level)), one_line(p.text))
        for p in frame.paragraphs
    ]
    items = [item for item in items if item[2]]
    if len(items) == 1:
        return escape_block_start(items[0][2])
    blocks: list[str] = []
    run: list[tuple[str, int, str]] = []
    for kind, level, text in items:
        if kind is None:
            if run:
                blocks.append(_list(run))
                run = []
            blocks.append(escape_block_start(text))
        else:
            run.append((kind, level, text))
    if run:
        blocks.append(_list(run))
    return "\n\n".join(blocks)


def _list_kind(paragraph: Any, styles: list[Any], bulleted: bool) -> str | None:
    """'number', 'bullet' or None (plain paragraph): the first bullet setting found in
    the paragraph's own properties, then its level in the list styles it inherits
    (the shape's, the layout placeholder's); failing those, the slide master's default,
    which bullets body placeholders only."""
    level = f"a:lvl{max(0, int(paragraph.level)) + 1}pPr"
    for properties in [paragraph._p.pPr, *(style.find(qn(level)) for style in styles)]:
        if properties is None:
            continue
        if properties.find(qn("a:buNone")) is not None:
            return None
        if properties.find(qn("a:buAutoNum")) is not None:
            return "number"
        if (
            properties.find(qn("a:buChar")) is not None
            or properties.find(qn("a:buBlip")) is not None
        ):
            return "bullet"
    return "bullet" if bulleted else None


def _list_styles(shape: Any) -> list[Any]:
    """`a:lstStyle` elements a shape's paragraphs inherit from, nearest first."""
    shapes = [shape.element]
    if shape.is_placeholder:
        # A slide placeholder inherits from the layout placeholder with the same idx.
        layout = getattr(shape, "_base_placeholder", None)
        if layout is not None:
            shapes.append(layout.element)
    styles = []
    for element in shapes:
        body = element.find(qn("p:txBody"))
        style = body.find(qn("a:lstStyle")) if body is not None else None
        if style is not None:
            styles.append(style)
    return styles


def _list(items: list[tuple[str, int, str]]) -> str:
    """Nested Markdown list: each item indented to its parent item's content column;
    numbering restarts under a new parent or when the list kind changes."""
    lines: list[str] = []
    parents: list[tuple[int, int]] = []  # (level, content column) of the open ancestors
    kinds: dict[int, str] = {}
    counters: dict[int, int] = {}
    for kind, level, text in items:
        while parents and parents[-1][0] >= level:
            parents.pop()
        for deeper in [lv for lv in kinds if lv > level]:
            del kinds[deeper], counters[deeper]
        if kinds.get(level) != kind:
            counters[level] = 0
        kinds[level] = kind
        counters[level] += 1
        marker = f"{counters[level]}. " if kind == "number" else "- "
        indent = parents[-1][1] if parents else 0
        lines.append(" " * indent + marker + escape_block_start(text))
        parents.append((level, indent + len(marker)))
    return "\n".join(lines)


# --- tables and notes ---------------------------------------------------------------


def _table(table: Any) -> str:
    """GFM table with merged cells filled: the origin's text copied over its span."""
    grid = [[cell.text for cell in row.cells] for row in table.rows]
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            if cell.is_merge_origin:
                for rr in range(r, min(r + cell.span_height, len(grid))):
                    for cc in range(c, min(c + cell.span_width, len(grid[rr]))):
                        grid[rr][cc] = grid[r][c]
    if not grid:
        return ""
    return gfm_table(grid[0], grid[1:])


def _notes(slide: Any, number: int, warnings: list[str]) -> str:
    try:
        if not slide.has_notes_slide:
            return ""
        frame = slide.notes_slide.notes_text_frame
        paragraphs = [one_line(p.text) for p in frame.paragraphs] if frame is not None else []
    except Exception as exc:  # a broken notes part loses the notes, not the slide
        warnings.append(f"slide {number}: speaker notes skipped ({type(exc).__name__}: {exc})")
        return ""
    paragraphs = [escape_block_start(p) for p in paragraphs if p]
    if not paragraphs:
        return ""
    paragraphs[0] = "Notes: " + paragraphs[0]
    return "\n>\n".join("> " + p for p in paragraphs)


# --- review comments ---------------------------------------------------------------------


def _comment_authors(deck: Any) -> dict[str, str]:
    """Comment author id -> name, from the legacy and the modern authors parts."""
    authors: dict[str, str] = {}
    for rel in deck.part.rels.values():
        if rel.is_external or not rel.reltype.endswith(("/commentAuthors", "/authors")):
            continue
        for author in xml_root(rel.target_part.blob):
            if author.get("id") is not None:
                authors[author.get("id")] = author.get("name", "")
    return authors


def _comments(slide: Any, authors: dict[str, str]) -> str:
    """The slide's review comments as one block quote, replies after their comment."""
    lines: list[str] = []
    for rel in slide.part.rels.values():
        if rel.is_external or not rel.reltype.endswith("/comments"):
            continue
        root = xml_root(rel.target_part.blob)
        for comment in root.iter(f"{{{_P_NS}}}cm"):  # legacy: replies name their parent
            kind = "Reply" if next(comment.iter(_PARENT_COMMENT), None) is not None else "Comment"
            author = authors.get(comment.get("authorId", ""), "")
            text = comment.findtext(f"{{{_P_NS}}}text") or ""
            lines.append(comment_line(kind, author, comment.get("dt"), text))
        for comment in root.iter(f"{_MODERN}cm"):  # modern: replies nest in the comment
            for item in (comment, *comment.iter(f"{_MODERN}reply")):
                paragraphs = item.find(f"{_MODERN}txBody")
                text = (
                    " ".join("".join(p.itertext()) for p in paragraphs.iter(_PARAGRAPH))
                    if paragraphs is not None
                    else ""
                )
                kind = "Reply" if item is not comment else "Comment"
                author = authors.get(item.get("authorId", ""), "")
                lines.append(comment_line(kind, author, item.get("created"), text))
    return "\n>\n".join("> " + line for line in lines if line)
