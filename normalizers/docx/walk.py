"""DOCX fallback reader: python-docx's own walk of the (rewritten) body, for documents
pandoc cannot read or whose words it drops.

Plainer than pandoc's rendering but lossless by construction: every paragraph's text
(`package.paragraph_text`, the same text the self-check counts) in document order;
headings by the "heading N" styles step 1 gives every heading; list paragraphs as
bullets indented by level (step 1 wrote the labels Markdown cannot draw into the text);
"Source Code" paragraphs as fenced code; tables as GFM tables with merged cells
repeated (python-docx's `row.cells` does that), a table inside a cell flattened into
the cell's line; footnotes and endnotes at the end. No emphasis, links or images; with
a picture reader, a picture's text follows the paragraph (or table) that shows it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterable, Iterator
from types import MappingProxyType

import docx
from docx.oxml.ns import qn
from docx.table import Table, _Cell
from docx.text.paragraph import Paragraph
from lxml import etree

from config.safe_parsing import xml_root
from normalizers.docx.package import body_paragraphs, paragraph_text, w
from normalizers.markdown import escape_text, fenced_code
from normalizers.tables import escape_block_start, flat_table, gfm_table, one_line

_HEADING_STYLE = re.compile(r"^heading ([1-6])$", re.IGNORECASE)
_CODE_STYLE = "source code"
_NOTE_PARTS = ("/word/footnotes.xml", "/word/endnotes.xml")
_NOTE_SEPARATORS = frozenset({"separator", "continuationSeparator", "continuationNotice"})
_TRUE = frozenset({"1", "true", "on"})


# Where a picture names its media part: DrawingML's blip, VML's image data.
_PICTURE_REFERENCES = MappingProxyType(
    {qn("a:blip"): qn("r:embed"), "{urn:schemas-microsoft-com:vml}imagedata": qn("r:id")}
)


def walk_markdown(package: bytes, picture_text: Callable[[str], str] | None = None) -> str:
    """The body of a DOCX package as Markdown, walked with python-docx; `picture_text`
    gives the Markdown of the picture in a media part ("word/media/image1.png")."""
    document = docx.Document(io.BytesIO(package))
    blocks = list(_blocks(document.iter_inner_content(), picture_text))
    for part in document.part.package.iter_parts():
        if str(part.partname) in _NOTE_PARTS:
            blocks.extend(_notes(xml_root(part.blob, huge_tree=True)))
    return "\n\n".join(blocks) + "\n"


def _blocks(
    content: Iterable[Paragraph | Table], picture_text: Callable[[str], str] | None
) -> Iterator[str]:
    code: list[str] = []
    for item in content:
        if isinstance(item, Paragraph) and _style_name(item) == _CODE_STYLE:
            code.append(paragraph_text(item._p, note_marks=True))
            continue
        if code:
            yield fenced_code("\n".join(code))
            code = []
        block = _table(item) if isinstance(item, Table) else _paragraph(item)
        if block:
            yield block
        if picture_text is not None:
            yield from _pictures(item, picture_text)
    if code:
        yield fenced_code("\n".join(code))


def _pictures(item: Paragraph | Table, picture_text: Callable[[str], str]) -> Iterator[str]:
    """The Markdown of the pictures the paragraph or table shows, in document order."""
    element = item._p if isinstance(item, Paragraph) else item._tbl
    rels = item.part.rels
    for node in element.iter(*_PICTURE_REFERENCES):
        rel_id = node.get(_PICTURE_REFERENCES[node.tag], "")
        rel = rels.get(rel_id)
        if rel is None or rel.is_external:
            continue
        text = picture_text(str(rel.target_part.partname).lstrip("/"))
        if text:
            yield text


def _style_name(paragraph: Paragraph) -> str:
    try:
        style = paragraph.style
    except (KeyError, ValueError):  # a style id the styles part does not define
        return ""
    return (style.name or "").strip().lower() if style is not None else ""


def _paragraph(paragraph: Paragraph) -> str:
    text = escape_text(one_line(paragraph_text(paragraph._p, note_marks=True)))
    if not text:
        return ""
    heading = _HEADING_STYLE.match(_style_name(paragraph))
    if heading:
        return "#" * int(heading.group(1)) + " " + text
    level = _list_level(paragraph)
    if level is not None:
        return "  " * min(level, 8) + "- " + escape_block_start(text)
    return escape_block_start(text)


def _list_level(paragraph: Paragraph) -> int | None:
    """The list level of a numbered or bulleted paragraph (own or style numbering)."""
    for element in (paragraph._p, getattr(paragraph.style, "element", None)):
        numpr = element.find(f"{w('pPr')}/{w('numPr')}") if element is not None else None
        if numpr is None:
            continue
        num_id = numpr.find(w("numId"))
        if num_id is not None and num_id.get(w("val")) == "0":
            return None  # numbering switched off
        ilvl = numpr.find(w("ilvl"))
        value = ilvl.get(w("val"), "0") if ilvl is not None else "0"
        return int(value) if value.isdigit() else 0
    return None


def _table(table: Table) -> str:
    rows = [
        [""] * row.grid_cols_before
        + [_cell_text(cell) for cell in row.cells]
        + [""] * row.grid_cols_after
        for row in table.rows
    ]
    rows = [row for row in rows if any(row)]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    if _has_header_row(table._tbl):
        return gfm_table(rows[0], rows[1:])
    return gfm_table([""] * width, rows)


def _cell_text(cell: _Cell) -> str:
    parts: list[str] = []
    for item in cell.iter_inner_content():
        if isinstance(item, Table):
            parts.append(flat_table([[_cell_text(c) for c in row.cells] for row in item.rows]))
        else:
            parts.append(escape_text(one_line(paragraph_text(item._p, note_marks=True))))
    return " ".join(part for part in parts if part)


def _has_header_row(tbl: etree._Element) -> bool:
    """Word's "header row" (what pandoc takes for the table head): the first row repeats
    as a header, or the table look formats the first row as one."""
    first = tbl.find(w("tr"))
    header = first.find(f"{w('trPr')}/{w('tblHeader')}") if first is not None else None
    if header is not None and header.get(w("val"), "1").lower() in _TRUE:
        return True
    look = tbl.find(f"{w('tblPr')}/{w('tblLook')}")  # w:firstRow spelt out by step 1
    return look is not None and look.get(w("firstRow"), "").lower() in _TRUE


def _notes(root: etree._Element) -> list[str]:
    notes = []
    for note in root:
        if note.get(w("type")) in _NOTE_SEPARATORS:
            continue
        text = one_line(" ".join(paragraph_text(p) for p in body_paragraphs(note)))
        if text:
            notes.append(f"[^{note.get(w('id'), '')}]: {escape_text(text)}")
    return notes
