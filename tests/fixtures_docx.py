"""Small DOCX documents built in code for the DOCX and legacy normalizer tests.

python-docx writes what it supports (headings, paragraphs, tables, merges, pictures,
comments); the rest (footnotes, tracked changes, text boxes, multi-level numbering)
is raw WordprocessingML, written the way Word writes it.
"""

from __future__ import annotations

import io
import re
import struct
import zlib
from typing import Any

import docx
from docx.document import Document
from docx.enum.style import WD_STYLE_TYPE
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.packuri import PackURI
from docx.opc.part import Part
from docx.oxml import parse_xml

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_NS_DECL = (
    f'xmlns:w="{W_NS}" xmlns:v="urn:schemas-microsoft-com:vml" '
    'xmlns:o="urn:schemas-microsoft-com:office:office"'
)
_FOOTNOTES_CT = "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"

# Multi-level list definitions (Word's own templates give every "List Bullet N" style a
# separate single-level list instead): level formats and label templates.
_BULLET_NUM_ID, _DECIMAL_NUM_ID = 101, 102
_LIST_LEVELS = {
    _BULLET_NUM_ID: [("bullet", "•")] * 3,
    _DECIMAL_NUM_ID: [("decimal", f"%{lvl + 1}.") for lvl in range(3)],
}


def to_bytes(document: Document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _p(xml: str) -> str:
    """A body-level element with the namespaces declared."""
    return re.sub(r"^<w:(\w+)", lambda m: f"<w:{m.group(1)} {_NS_DECL}", xml, count=1)


def _append_body_xml(document: Document, xml: str) -> None:
    body = document.element.body
    body.insert(len(body) - 1, parse_xml(_p(xml)))  # before the final w:sectPr


def _add_numbering(document: Document, num_id: int, levels: list[tuple[str, str]]) -> None:
    """A list definition (abstract and instance, both numbered `num_id`) with one
    (w:numFmt, w:lvlText) pair per level."""
    numbering = document.part.numbering_part.element
    lvls = "".join(
        f'<w:lvl w:ilvl="{lvl}"><w:start w:val="1"/><w:numFmt w:val="{fmt}"/>'
        f'<w:lvlText w:val="{text}"/>'
        f'<w:pPr><w:ind w:left="{720 * (lvl + 1)}" w:hanging="360"/></w:pPr></w:lvl>'
        for lvl, (fmt, text) in enumerate(levels)
    )
    numbering.find(f"{{{W_NS}}}num").addprevious(
        parse_xml(
            f'<w:abstractNum xmlns:w="{W_NS}" w:abstractNumId="{num_id}">'
            f'<w:multiLevelType w:val="multilevel"/>{lvls}</w:abstractNum>'
        )
    )
    numbering.append(
        parse_xml(
            f'<w:num xmlns:w="{W_NS}" w:numId="{num_id}">'
            f'<w:abstractNumId w:val="{num_id}"/></w:num>'
        )
    )


def _numbered(paragraph_or_style_element: Any, num_id: int, level: int) -> None:
    paragraph_or_style_element.get_or_add_pPr().append(
        parse_xml(
            f'<w:numPr xmlns:w="{W_NS}"><w:ilvl w:val="{level}"/>'
            f'<w:numId w:val="{num_id}"/></w:numPr>'
        )
    )


def _list_item(document: Document, text: str, num_id: int, level: int = 0) -> None:
    _numbered(document.add_paragraph(text, style="List Paragraph")._p, num_id, level)


def png_bytes() -> bytes:
    """A 4x4 grey PNG."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 4, 4, 8, 0, 0, 0, 0)  # 8-bit greyscale
    pixels = zlib.compress(b"".join(b"\x00" + b"\xc8" * 4 for _ in range(4)))
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def structure_docx() -> bytes:
    """Title, H1-H3, nested bulleted and numbered lists, code, an image with alt text."""
    document = docx.Document()
    for num_id, levels in _LIST_LEVELS.items():
        _add_numbering(document, num_id, levels)
    document.core_properties.title = "Structure fixture"
    document.core_properties.author = "Ada Lovelace"
    document.add_heading("Structure fixture", 0)
    # A table of contents, as Word writes it: a content control holding a TOC Heading
    # and "toc N" entries (linked to the headings' bookmarks, with page numbers).
    toc_entry = document.styles.add_style("toc 1", WD_STYLE_TYPE.PARAGRAPH)
    _append_body_xml(
        document,
        '<w:sdt><w:sdtPr><w:docPartObj><w:docPartGallery w:val="Table of Contents"/>'
        "<w:docPartUnique/></w:docPartObj></w:sdtPr><w:sdtContent>"
        '<w:p><w:pPr><w:pStyle w:val="TOCHeading"/></w:pPr><w:r><w:t>Contents</w:t></w:r></w:p>'
        f'<w:p><w:pPr><w:pStyle w:val="{toc_entry.style_id}"/></w:pPr>'
        "<w:r><w:t>Chapter one</w:t></w:r><w:r><w:tab/><w:t>1</w:t></w:r></w:p>"
        "</w:sdtContent></w:sdt>",
    )
    document.add_paragraph("Code\t2", style=toc_entry)  # a TOC field without the control
    document.add_heading("Chapter one", 1)
    document.add_paragraph("Intro paragraph.")
    document.add_heading("Section one", 2)
    for text, level in (("Apple", 0), ("Red", 1), ("Crimson", 2), ("Green", 1), ("Pear", 0)):
        _list_item(document, text, _BULLET_NUM_ID, level)
    document.add_heading("Subsection", 3)
    for text, level in (("First step", 0), ("Sub step", 1), ("Second step", 0)):
        _list_item(document, text, _DECIMAL_NUM_ID, level)
    document.add_heading("Code", 1)
    code_style = document.styles.add_style("Source Code", WD_STYLE_TYPE.PARAGRAPH)
    code_style.font.name = "Courier New"
    document.add_paragraph("def greet(name):", style=code_style)
    document.add_paragraph("    return f'hi {name}'", style=code_style)
    document.add_paragraph("Between the code blocks.")
    for line in ("SELECT id, name", "  FROM users WHERE active = 1;"):
        document.add_paragraph().add_run(line).font.name = "Consolas"
    document.add_paragraph("After the query.")
    document.add_paragraph().add_run("Typewriter prose without code marks.").font.name = "Courier"
    document.add_heading("Figure", 1)
    run = document.add_paragraph().add_run()
    picture = run.add_picture(io.BytesIO(png_bytes()))
    picture._inline.docPr.set("descr", "A grey square")
    document.add_paragraph("After the figure.")
    return to_bytes(document)


def russian_headings_docx() -> bytes:
    """Heading styles named and identified the way Russian Word templates do, plus a
    custom style and a direct paragraph property that only carry an outline level."""
    document = docx.Document()
    heading1, heading2 = document.styles["Heading 1"], document.styles["Heading 2"]
    heading1.name, heading1.style_id = "Заголовок 1", "1"
    heading2.name, heading2.style_id = "Заголовок 2", "2"
    custom = document.styles.add_style("Мой раздел", WD_STYLE_TYPE.PARAGRAPH)
    custom.base_style = heading2  # inherits outline level 1 (H2) through w:basedOn
    document.add_paragraph("Введение", style=heading1)
    document.add_paragraph("Текст введения.")
    document.add_paragraph("Цели", style=heading2)
    document.add_paragraph("Текст целей.")
    document.add_paragraph("Унаследованный", style=custom)
    document.add_paragraph("Текст раздела.")
    direct = document.add_paragraph("Прямой уровень")
    direct._p.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl xmlns:w="{W_NS}" w:val="2"/>'))
    document.add_paragraph("Конец.")
    return to_bytes(document)


def numbered_docx() -> bytes:
    """Headings numbered through their styles ("1.", "1.1."), a lettered list with a
    roman sub-level, and two adjacent decimal lists that Word numbers separately."""
    document = docx.Document()
    _add_numbering(document, 201, [("decimal", "%1."), ("decimal", "%1.%2.")])
    _add_numbering(document, 202, [("lowerLetter", "%1)"), ("lowerRoman", "%2.")])
    _add_numbering(document, 203, [("decimal", "%1.")])
    _add_numbering(document, 204, [("decimal", "%1.")])
    _numbered(document.styles["Heading 1"].element, 201, 0)
    _numbered(document.styles["Heading 2"].element, 201, 1)
    document.add_heading("Scope", 1)
    document.add_paragraph("Intro.")
    document.add_heading("Terms", 2)
    document.add_heading("Goals", 2)
    for text, level in (("Alpha", 0), ("Detail", 1), ("Beta", 0)):
        _list_item(document, text, 202, level)
    document.add_heading("Design", 1)
    _list_item(document, "One", 203)
    _list_item(document, "Two", 203)
    _list_item(document, "Again", 204)
    return to_bytes(document)


# What `merged_table_docx` normalizes to, and its DOC copy as well.
MERGED_TABLE_MARKDOWN = (
    "Before the table.\n\n"
    "| H0    | H1    | H2            | H3   |\n"
    "|-------|-------|---------------|------|\n"
    "| r1c0  | wide  | wide          | tall |\n"
    "| block | block | r2c2          | tall |\n"
    "| block | block | r3c2 \\| piped | r3c3 |\n\n"
    "After the table.\n"
)


def merged_table_docx() -> bytes:
    """A 4x4 table with a horizontal merge, a vertical merge and a 2x2 block merge."""
    document = docx.Document()
    document.add_paragraph("Before the table.")
    table = document.add_table(rows=4, cols=4)
    for r, row in enumerate(table.rows):
        for c, cell in enumerate(row.cells):
            cell.text = "H" + str(c) if r == 0 else f"r{r}c{c}"
    wide = table.cell(1, 1).merge(table.cell(1, 2))
    wide.text = "wide"
    tall = table.cell(1, 3).merge(table.cell(2, 3))
    tall.text = "tall"
    block = table.cell(2, 0).merge(table.cell(3, 1))
    block.text = "block"
    table.cell(3, 2).paragraphs[0].add_run(" | piped")
    document.add_paragraph("After the table.")
    return to_bytes(document)


def revisions_docx() -> bytes:
    """A footnote, a tracked insertion and deletion, a comment and a text box."""
    document = docx.Document()
    _append_body_xml(
        document,
        '<w:p><w:r><w:t xml:space="preserve">Footnoted claim</w:t></w:r>'
        '<w:r><w:rPr><w:vertAlign w:val="superscript"/></w:rPr>'
        '<w:footnoteReference w:id="1"/></w:r><w:r><w:t>.</w:t></w:r></w:p>',
    )
    footnotes = (
        f'<w:footnotes xmlns:w="{W_NS}">'
        '<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        "</w:footnote>"
        '<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r>'
        "<w:continuationSeparator/></w:r></w:p></w:footnote>"
        '<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r>'
        '<w:r><w:t xml:space="preserve"> The source of the claim.</w:t></w:r></w:p>'
        "</w:footnote></w:footnotes>"
    ).encode()
    part = Part(PackURI("/word/footnotes.xml"), _FOOTNOTES_CT, footnotes, document.part.package)
    document.part.relate_to(part, RT.FOOTNOTES)
    _append_body_xml(
        document,
        '<w:p><w:r><w:t xml:space="preserve">The budget is </w:t></w:r>'
        '<w:del w:id="11" w:author="Bob" w:date="2024-01-01T00:00:00Z"><w:r>'
        '<w:delText xml:space="preserve">ten </w:delText></w:r></w:del>'
        '<w:ins w:id="12" w:author="Bob" w:date="2024-01-01T00:00:00Z"><w:r>'
        '<w:t xml:space="preserve">twenty </w:t></w:r></w:ins>'
        "<w:r><w:t>euros.</w:t></w:r></w:p>",
    )
    commented = document.add_paragraph("Commented sentence.")
    document.add_comment(commented.runs, text="Reviewer remark", author="Eve", initials="E")
    _append_body_xml(
        document,
        '<w:p><w:r><w:t xml:space="preserve">Boxed: </w:t></w:r><w:r><w:pict>'
        '<v:shape id="box1" type="#_x0000_t202" style="width:200pt;height:40pt">'
        "<v:textbox><w:txbxContent><w:p><w:r><w:t>Inside the text box</w:t></w:r></w:p>"
        "</w:txbxContent></v:textbox></v:shape></w:pict></w:r></w:p>",
    )
    return to_bytes(document)


def nested_table_docx() -> bytes:
    """Outer table AAA | BBB; the BBB cell holds a table whose right column is one cell
    spanning both rows: CCC | DDD over EEE | (DDD)."""
    document = docx.Document()
    outer = document.add_table(rows=1, cols=2)
    outer.cell(0, 0).text = "AAA"
    host = outer.cell(0, 1)
    host.text = "BBB"  # before the nested table: setting a cell's text replaces it all
    inner = host.add_table(rows=2, cols=2)
    inner.cell(0, 0).text = "CCC"
    inner.cell(0, 1).merge(inner.cell(1, 1)).text = "DDD"
    inner.cell(1, 0).text = "EEE"
    document.add_paragraph("After.")
    return to_bytes(document)


def header_less_tables_docx() -> bytes:
    """Four 2x2 tables: Word's "Header Row" off (w:firstRow="0"), off as Word 2007
    writes it (only the w:val bit field, 0x0020 clear), on (python-docx's default), and
    no table look at all (as LibreOffice writes tables)."""
    document = docx.Document()
    for label in ("off", "bits", "on", "none"):
        table = document.add_table(rows=2, cols=2)
        for r, row in enumerate(table.rows):
            for c, cell in enumerate(row.cells):
                cell.text = f"{label}{r}{c}"
        look = table._tbl.tblPr.find(f"{{{W_NS}}}tblLook")
        if label == "off":
            look.set(f"{{{W_NS}}}firstRow", "0")
        elif label == "bits":
            for name in list(look.attrib):
                del look.attrib[name]
            look.set(f"{{{W_NS}}}val", "0480")
        elif label == "none":
            look.getparent().remove(look)
    return to_bytes(document)


def wrapped_content_docx() -> bytes:
    """Text pandoc drops whole: custom XML around a paragraph, a run, a table row and a
    cell; a right-to-left run in w:dir; a simple field's result."""
    document = docx.Document()
    document.add_paragraph("Start.")

    def row(*texts: str) -> str:
        return (
            "<w:tr>"
            + "".join(f"<w:tc><w:p><w:r><w:t>{t}</w:t></w:r></w:p></w:tc>" for t in texts)
            + "</w:tr>"
        )

    _append_body_xml(
        document,
        '<w:customXml w:element="block"><w:p><w:r><w:t>Custom block text.</w:t></w:r></w:p>'
        "</w:customXml>",
    )
    _append_body_xml(
        document,
        '<w:p><w:r><w:t xml:space="preserve">Before </w:t></w:r><w:customXml w:element="i">'
        '<w:r><w:t>custom inline</w:t></w:r></w:customXml><w:r><w:t xml:space="preserve"> '
        'and </w:t></w:r><w:dir w:val="rtl"><w:r><w:t>שלום</w:t></w:r></w:dir>'
        '<w:r><w:t xml:space="preserve"> on page </w:t></w:r><w:fldSimple w:instr="PAGE">'
        "<w:r><w:t>7</w:t></w:r></w:fldSimple><w:r><w:t>.</w:t></w:r></w:p>",
    )
    _append_body_xml(
        document,
        '<w:tbl><w:tblPr><w:tblLook w:firstRow="1"/></w:tblPr><w:tblGrid><w:gridCol/>'
        "<w:gridCol/></w:tblGrid>"
        + row("Name", "Value")
        + '<w:customXml w:element="r">'
        + row("wrapped row", "11")
        + "</w:customXml>"
        + '<w:tr><w:customXml w:element="c"><w:tc><w:p><w:r><w:t>wrapped cell</w:t></w:r>'
        "</w:p></w:tc></w:customXml><w:tc><w:p><w:r><w:t>12</w:t></w:r></w:p></w:tc></w:tr>"
        "</w:tbl>",
    )
    return to_bytes(document)


def ruby_docx() -> bytes:
    """A Japanese paragraph whose words carry ruby (furigana), which pandoc drops."""
    document = docx.Document()

    def ruby(base: str, guide: str) -> str:
        return (
            f"<w:r><w:ruby><w:rubyPr/><w:rt><w:r><w:t>{guide}</w:t></w:r></w:rt>"
            f"<w:rubyBase><w:r><w:t>{base}</w:t></w:r></w:rubyBase></w:ruby></w:r>"
        )

    _append_body_xml(
        document,
        "<w:p>"
        + ruby("漢字", "かんじ")
        + "<w:r><w:t>と</w:t></w:r>"
        + ruby("仮名", "かな")
        + ruby("東京", "とうきょう")
        + "</w:p>",
    )
    return to_bytes(document)
