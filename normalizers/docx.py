"""DOCX/DOCM to Markdown: pandoc for the body, python-docx for the core properties.

Three steps, because pandoc alone misses things a RAG index needs:

1. The package XML is rewritten before pandoc reads it. Pandoc finds headings only by
   the English style names "heading N", so every paragraph style with an outline level
   (what Word itself uses: Russian templates call them "Заголовок 1" with id "1") is
   renamed to "heading N"; paragraphs with a direct outline level get such a style.
   Title/Subtitle/Author/Date/Abstract styles would vanish into pandoc's metadata, so
   they become body paragraphs (the title an H1). Word's number labels that Markdown
   cannot draw (numbered headings, "1.1."/"a)"/"iv." list levels) are written into the
   text. Text boxes are moved out of their drawing next to the paragraph that anchors
   them (pandoc skips VML text boxes); table rows that start late (w:gridBefore) get
   the empty cells pandoc would otherwise drop; runs of paragraphs set entirely in a
   monospaced font that look like code get the "Source Code" style pandoc turns into
   code blocks. Media parts are emptied: only images' alt text is kept.
2. Pandoc's JSON AST is simplified: tables become plain grids (merged cells copied into
   every cell they cover, cell content flattened to one line) so the writer emits GFM
   pipe tables instead of raw HTML; images become their alt text; code blocks become
   fenced blocks; list items become tight; adjacent bullet lists merge and adjacent
   numbered lists alternate "1."/"1)" to stay apart; checkbox paragraphs become task
   list items.
3. The AST is written as GFM without raw HTML, math as `$...$`/`$$...$$`.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pypandoc
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.package import OpcPackage
from lxml import etree

from config.errors import ErrorCode
from normalizers.base import (
    NormalizeContext,
    NormalizedDocument,
    check_zip_limits,
    iso_datetime,
    register,
)

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DOCM_MIME = "application/vnd.ms-word.document.macroEnabled.12"

_W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_WRITER = "gfm-raw_html-tex_math_gfm+tex_math_dollars"
# Pandoc's heap may grow to a few times the (already limited) decompressed package size.
_HEAP_PER_DECOMPRESSED_BYTE = 8
_MIN_HEAP_BYTES = 2 * 1024**3

_HEADING_NAME = re.compile(
    r"^(?:heading|заголовок|überschrift|titre|título|titolo|kop|nagłówek)\s*([1-9])$",
    re.IGNORECASE,
)
# Paragraph styles pandoc moves into document metadata; kept as body text instead.
_METADATA_STYLE_NAMES = frozenset({"subtitle", "author", "date", "abstract"})
_CODE_STYLE_NAMES = frozenset({"source code", "macro", "html preformatted"})
# A table of contents repeats the headings with page numbers: noise in an index.
_TOC_STYLE_NAME = re.compile(r"^toc(?: heading|\s*[1-9])$", re.IGNORECASE)
_MONOSPACE_FONTS = (
    "courier",
    "consolas",
    "menlo",
    "monaco",
    "lucida console",
    "lucida sans typewriter",
    "andale mono",
    "inconsolata",
    "cascadia",
    "source code",
    "fira code",
    "hack",
)
_CODE_MARKS = re.compile(r"[=;{}()\[\]<>\\/|*#$]|^\s{2,}\S")
_CHECKBOXES = {"☐": False, "☒": True, "☑": True}
_NO_ATTR: list[Any] = ["", [], []]


def _w(tag: str) -> str:
    return f"{{{_W_NS}}}{tag}"


@register("docx", extensions=(".docx", ".docm"), mimes=(DOCX_MIME, DOCM_MIME))
def normalize_docx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)
    package = _prepare_package(data, ctx)
    deadline = time.monotonic() + ctx.limits.conversion_timeout_s
    heap = max(_MIN_HEAP_BYTES, _HEAP_PER_DECOMPRESSED_BYTE * ctx.limits.max_decompressed_bytes)
    ast_json, read_warnings = _run_pandoc(
        ["-f", "docx", "-t", "json", "--track-changes=accept"], package, ctx, deadline, heap
    )
    ast = json.loads(ast_json)
    blocks = _rewrite(ast["blocks"])
    ast["blocks"] = blocks
    ast["meta"] = {}
    markdown, write_warnings = _run_pandoc(
        ["-f", "json", "-t", _WRITER, "--wrap=none"],
        json.dumps(ast).encode(),
        ctx,
        deadline,
        heap,
    )
    props = _core_properties(data)
    title = props.title or _first_heading_text(blocks)
    return NormalizedDocument(
        markdown=_drop_list_separators(markdown.decode("utf-8")),
        title=title,
        author=props.author,
        created_at=props.created,
        updated_at=props.modified,
        page_count=props.pages,
        language=props.language,
        metadata=props.extra,
        warnings=tuple(read_warnings + write_warnings),
    )


# --- running pandoc -------------------------------------------------------------------


def _run_pandoc(
    args: list[str], stdin: bytes, ctx: NormalizeContext, deadline: float, heap_bytes: int
) -> tuple[bytes, list[str]]:
    """Run pandoc sandboxed (no file or network access) with what is left of the time
    budget; every failure is the document's, never the process's."""
    try:
        pandoc = pypandoc.get_pandoc_path()
    except OSError as exc:
        raise ctx.fail(
            ErrorCode.UNSUPPORTED_FORMAT,
            f"pandoc is not available ({exc}); pip install pypandoc-binary",
        ) from None
    remaining = deadline - time.monotonic()
    command = [pandoc, "+RTS", f"-M{heap_bytes}", "-RTS", "--sandbox", *args]
    try:
        if remaining <= 0:
            raise subprocess.TimeoutExpired(command, 0)
        result = subprocess.run(command, input=stdin, capture_output=True, timeout=remaining)
    except subprocess.TimeoutExpired:
        # The same bytes would time out again: the document is over the processing
        # budget (too large or too complex), not damaged.
        raise ctx.fail(
            ErrorCode.TOO_LARGE,
            f"pandoc did not finish within limits.conversion_timeout_s "
            f"({ctx.limits.conversion_timeout_s:g} s)",
        ) from None
    stderr = result.stderr.decode("utf-8", "replace").strip()
    if result.returncode != 0:
        if "heap overflow" in stderr.lower() or "heap exhausted" in stderr.lower():
            raise ctx.fail(ErrorCode.TOO_LARGE, f"pandoc ran out of its {heap_bytes:,}-byte heap")
        raise ctx.fail(
            ErrorCode.CORRUPT,
            f"pandoc could not read it (exit {result.returncode}): {stderr[:500] or 'no message'}",
        )
    warnings = [line for line in stderr.splitlines() if line.startswith("[WARNING]")]
    return result.stdout, warnings


# --- step 1: package rewrite ----------------------------------------------------------


@dataclass
class _Style:
    name: str
    kind: str  # paragraph | character | table | numbering
    based_on: str | None
    outline_level: int | None  # own w:outlineLvl, 0-based; 9 means body text
    font: str | None  # own w:rFonts ascii/hAnsi
    element: etree._Element


@dataclass
class _StyleSheet:
    root: etree._Element
    styles: dict[str, _Style] = field(default_factory=dict)
    default_paragraph: str | None = None
    default_font: str | None = None

    def chain(self, style_id: str | None) -> Iterator[_Style]:
        seen: set[str] = set()
        while style_id and style_id in self.styles and style_id not in seen:
            seen.add(style_id)
            style = self.styles[style_id]
            yield style
            style_id = style.based_on

    def outline_level(self, style_id: str) -> int | None:
        return next(
            (s.outline_level for s in self.chain(style_id) if s.outline_level is not None), None
        )

    def font(self, style_id: str | None) -> str | None:
        return next((s.font for s in self.chain(style_id) if s.font), None)

    def style_named(self, name: str) -> str | None:
        return next((sid for sid, s in self.styles.items() if s.name.lower() == name), None)

    def ensure_paragraph_style(self, name: str) -> str:
        """The id of a paragraph style called `name`, added when there is none."""
        existing = self.style_named(name)
        if existing is not None:
            return existing
        style_id = "Ingest" + re.sub(r"\W", "", name.title())
        element = etree.SubElement(self.root, _w("style"))
        element.set(_w("type"), "paragraph")
        element.set(_w("styleId"), style_id)
        etree.SubElement(element, _w("name")).set(_w("val"), name)
        self.styles[style_id] = _Style(name, "paragraph", None, None, None, element)
        return style_id


_XML_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=True)


def _parse_xml(blob: bytes, part: str, ctx: NormalizeContext) -> etree._Element:
    try:
        return etree.fromstring(blob, _XML_PARSER)
    except etree.XMLSyntaxError as exc:
        raise ctx.fail(ErrorCode.CORRUPT, f"broken XML in {part}: {exc}") from None


def _prepare_package(data: bytes, ctx: NormalizeContext) -> bytes:
    """The package with styles and body rewritten for pandoc and media emptied."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        names = source.namelist()
        if "word/document.xml" not in names:
            raise ctx.fail(ErrorCode.CORRUPT, "the package has no word/document.xml")
        sheet = _StyleSheet(etree.Element(_w("styles")))
        if "word/styles.xml" in names:
            sheet = _read_styles(_parse_xml(source.read("word/styles.xml"), "styles.xml", ctx))
        _rename_styles(sheet)
        numbering = _Numbering(etree.Element(_w("numbering")), sheet)
        if "word/numbering.xml" in names:
            numbering_xml = _parse_xml(source.read("word/numbering.xml"), "numbering.xml", ctx)
            numbering = _Numbering(numbering_xml, sheet)
        document = _parse_xml(source.read("word/document.xml"), "document.xml", ctx)
        _rewrite_body(document, sheet, numbering)
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as target:
            for info in source.infolist():
                if info.filename == "word/document.xml":
                    blob = etree.tostring(document, xml_declaration=True, encoding="UTF-8")
                elif info.filename == "word/styles.xml":
                    blob = etree.tostring(sheet.root, xml_declaration=True, encoding="UTF-8")
                elif info.filename == "word/numbering.xml":
                    blob = etree.tostring(numbering.root, xml_declaration=True, encoding="UTF-8")
                elif info.filename.startswith(("word/media/", "word/embeddings/")):
                    blob = b""  # only alt text is kept; decoding pictures is wasted work
                else:
                    blob = source.read(info.filename)
                target.writestr(info.filename, blob)
    return out.getvalue()


def _read_styles(root: etree._Element) -> _StyleSheet:
    sheet = _StyleSheet(root)
    for element in root.iterfind(_w("style")):
        style_id = element.get(_w("styleId"))
        if not style_id:
            continue
        name_el = element.find(_w("name"))
        based_el = element.find(_w("basedOn"))
        level_el = element.find(f"{_w('pPr')}/{_w('outlineLvl')}")
        level = _int_attr(level_el)
        sheet.styles[style_id] = _Style(
            name=name_el.get(_w("val"), style_id) if name_el is not None else style_id,
            kind=element.get(_w("type"), "paragraph"),
            based_on=based_el.get(_w("val")) if based_el is not None else None,
            outline_level=level,
            font=_fonts_of(element.find(_w("rPr"))),
            element=element,
        )
        if element.get(_w("type")) == "paragraph" and element.get(_w("default")) in ("1", "true"):
            sheet.default_paragraph = style_id
    defaults = root.find(f"{_w('docDefaults')}/{_w('rPrDefault')}/{_w('rPr')}")
    sheet.default_font = _fonts_of(defaults)
    return sheet


def _int_attr(element: etree._Element | None, name: str = "val") -> int | None:
    if element is None:
        return None
    try:
        return int(element.get(_w(name), ""))
    except ValueError:
        return None


def _fonts_of(rpr: etree._Element | None) -> str | None:
    fonts = rpr.find(_w("rFonts")) if rpr is not None else None
    if fonts is None:
        return None
    font: str | None = fonts.get(_w("ascii")) or fonts.get(_w("hAnsi"))
    return font


def _heading_level(sheet: _StyleSheet, style_id: str) -> int | None:
    """1-6 for a heading style: by outline level (language-independent, what Word uses),
    else by a heading name in a few languages."""
    level = sheet.outline_level(style_id)
    if level is not None:
        return min(level + 1, 6) if 0 <= level <= 8 else None
    match = _HEADING_NAME.match(sheet.styles[style_id].name.strip())
    return min(int(match.group(1)), 6) if match else None


def _set_style_name(style: _Style, name: str) -> None:
    name_el = style.element.find(_w("name"))
    if name_el is None:
        name_el = etree.SubElement(style.element, _w("name"))
        style.element.insert(0, name_el)
    name_el.set(_w("val"), name)
    style.name = name


def _rename_styles(sheet: _StyleSheet) -> None:
    """Give pandoc the style names it understands (see the module docstring)."""
    for style_id, style in sheet.styles.items():
        if style.kind != "paragraph":
            continue
        lowered = style.name.strip().lower()
        if _TOC_STYLE_NAME.match(lowered):
            continue  # "TOC Heading" inherits heading 1's outline level; it is dropped
        level = _heading_level(sheet, style_id)
        if level is not None:
            _set_style_name(style, f"heading {level}")
        elif lowered == "title":
            _set_style_name(style, "heading 1")
        elif lowered in _METADATA_STYLE_NAMES:
            _set_style_name(style, f"{style.name} text")
        elif lowered in _CODE_STYLE_NAMES:
            _set_style_name(style, "Source Code")


def _rewrite_body(document: etree._Element, sheet: _StyleSheet, numbering: _Numbering) -> None:
    _drop_table_of_contents(document, sheet)
    _hoist_text_boxes(document)
    _fill_grid_gaps(document)
    _apply_direct_outline_levels(document, sheet)
    _write_number_labels(document, sheet, numbering)
    _mark_code_paragraphs(document, sheet)


@dataclass
class _Level:
    start: int
    fmt: str  # w:numFmt: decimal, lowerLetter, upperRoman, bullet, ...
    text: str  # w:lvlText, e.g. "%1.%2."
    legal: bool  # w:isLgl: every number in the label drawn as decimal
    style: str | None  # w:pStyle: the paragraph style this level belongs to
    element: etree._Element

    def markdown_can_number(self, ilvl: int) -> bool:
        """Markdown ordered lists draw only "N." or "N)" themselves; every other label
        (2.3.1., a), IV., б)) has to be written out as text."""
        if self.fmt in ("bullet", "none"):
            return True
        return self.fmt == "decimal" and self.text in (f"%{ilvl + 1}.", f"%{ilvl + 1})")


_LATIN = "abcdefghijklmnopqrstuvwxyz"
_RUSSIAN = "абвгдежзиклмнопрстуфхцчшщэюя"  # Word's russianLower skips ё, й, ъ, ы, ь
_ALPHABETS = {
    "lowerLetter": _LATIN,
    "upperLetter": _LATIN.upper(),
    "russianLower": _RUSSIAN,
    "russianUpper": _RUSSIAN.upper(),
}


def _format_number(n: int, fmt: str) -> str:
    if fmt in _ALPHABETS and n > 0:
        letters = _ALPHABETS[fmt]
        # Past the alphabet Word repeats the letter: y, z, aa, bb, ...
        return letters[(n - 1) % len(letters)] * ((n - 1) // len(letters) + 1)
    if fmt in ("lowerRoman", "upperRoman") and n > 0:
        roman = _roman(n)
        return roman if fmt == "upperRoman" else roman.lower()
    if fmt == "decimalZero":
        return f"{n:02d}"
    if fmt == "none":
        return ""
    return str(n)


def _roman(n: int) -> str:
    out = []
    for value, numeral in (
        (1000, "M"),
        (900, "CM"),
        (500, "D"),
        (400, "CD"),
        (100, "C"),
        (90, "XC"),
        (50, "L"),
        (40, "XL"),
        (10, "X"),
        (9, "IX"),
        (5, "V"),
        (4, "IV"),
        (1, "I"),
    ):
        count, n = divmod(n, value)
        out.append(numeral * count)
    return "".join(out)


class _Numbering:
    """Word's list numbering (numbering.xml): the labels it draws in front of numbered
    paragraphs, counted in document order the way Word counts them."""

    def __init__(self, root: etree._Element, sheet: _StyleSheet) -> None:
        self.root = root
        self.levels: dict[str, dict[int, _Level]] = {}
        self.nums: dict[str, tuple[str, dict[int, int]]] = {}  # numId -> abstract, overrides
        self.counters: dict[str, list[int | None]] = {}
        self.started: set[str] = set()
        style_links: dict[str, str] = {}
        for abstract in root.iterfind(_w("abstractNum")):
            abstract_id = abstract.get(_w("abstractNumId"), "")
            self.levels[abstract_id] = {
                ilvl: _parse_level(element)
                for element in abstract.iterfind(_w("lvl"))
                if (ilvl := _int_attr(element, "ilvl")) is not None
            }
            link = abstract.find(_w("numStyleLink"))
            if link is not None:
                style_links[abstract_id] = link.get(_w("val"), "")
        for num in root.iterfind(_w("num")):
            abstract_el = num.find(_w("abstractNumId"))
            overrides = {
                ilvl: start
                for override in num.iterfind(_w("lvlOverride"))
                if (ilvl := _int_attr(override, "ilvl")) is not None
                and (start := _int_attr(override.find(_w("startOverride")))) is not None
            }
            if abstract_el is not None:
                self.nums[num.get(_w("numId"), "")] = (abstract_el.get(_w("val"), ""), overrides)
        # An abstract list that follows a numbering style (numStyleLink) shares the levels
        # and the counters of the list that style points to.
        self.canonical: dict[str, str] = {}
        for abstract_id, style_id in style_links.items():
            target = _style_num_id(sheet, style_id)
            if target in self.nums:
                self.canonical[abstract_id] = self.nums[target][0]

    def abstract_of(self, num_id: str) -> str | None:
        entry = self.nums.get(num_id)
        if entry is None:
            return None
        return self.canonical.get(entry[0], entry[0])

    def level_for_style(self, num_id: str, style_id: str | None) -> int:
        levels = self.levels.get(self.abstract_of(num_id) or "", {})
        return next((i for i, lvl in levels.items() if style_id and lvl.style == style_id), 0)

    def next_label(self, num_id: str, ilvl: int) -> tuple[str, _Level] | None:
        """Count one more paragraph at (num_id, ilvl); its label and level definition."""
        abstract_id = self.abstract_of(num_id)
        levels = self.levels.get(abstract_id or "", {})
        if abstract_id is None or ilvl not in levels or not 0 <= ilvl <= 8:
            return None
        counters = self.counters.setdefault(abstract_id, [None] * 9)
        if num_id not in self.started:  # a list instance's start overrides apply once
            self.started.add(num_id)
            for overridden, start in self.nums[num_id][1].items():
                if 0 <= overridden <= 8:
                    counters[overridden] = start - 1
        level = levels[ilvl]
        current = counters[ilvl]
        counters[ilvl] = level.start if current is None else current + 1
        for deeper in range(ilvl + 1, 9):
            counters[deeper] = None

        def number(match: re.Match[str]) -> str:
            k = int(match.group(1)) - 1
            defined = levels.get(k)
            value = counters[k] if counters[k] is not None else (defined.start if defined else 1)
            fmt = "decimal" if level.legal or defined is None else defined.fmt
            return _format_number(value or 0, fmt)

        return re.sub(r"%([1-9])", number, level.text), level


def _parse_level(element: etree._Element) -> _Level:
    fmt_el, text_el = element.find(_w("numFmt")), element.find(_w("lvlText"))
    style_el = element.find(_w("pStyle"))
    return _Level(
        start=_int_attr(element.find(_w("start"))) or 0,  # ECMA-376: absent means 0
        fmt=fmt_el.get(_w("val"), "decimal") if fmt_el is not None else "decimal",
        text=text_el.get(_w("val"), "") if text_el is not None else "",
        legal=element.find(_w("isLgl")) is not None,
        style=style_el.get(_w("val")) if style_el is not None else None,
        element=element,
    )


def _style_num_id(sheet: _StyleSheet, style_id: str | None) -> str | None:
    for style in sheet.chain(style_id):
        num_id = style.element.find(f"{_w('pPr')}/{_w('numPr')}/{_w('numId')}")
        if num_id is not None:
            value: str | None = num_id.get(_w("val"))
            return value
    return None


def _paragraph_numbering(
    paragraph: etree._Element, sheet: _StyleSheet, numbering: _Numbering
) -> tuple[str, int] | None:
    """(numId, level) of a numbered paragraph: its own w:numPr, else its style's."""
    style_id = _paragraph_style(paragraph, sheet)
    numpr = paragraph.find(f"{_w('pPr')}/{_w('numPr')}")
    num_el = numpr.find(_w("numId")) if numpr is not None else None
    num_id = num_el.get(_w("val")) if num_el is not None else _style_num_id(sheet, style_id)
    if not num_id or num_id == "0":
        return None
    level = _int_attr(numpr.find(_w("ilvl"))) if numpr is not None else None
    for style in sheet.chain(style_id):
        if level is not None:
            break
        level = _int_attr(style.element.find(f"{_w('pPr')}/{_w('numPr')}/{_w('ilvl')}"))
    return num_id, level if level is not None else numbering.level_for_style(num_id, style_id)


def _write_number_labels(
    document: etree._Element, sheet: _StyleSheet, numbering: _Numbering
) -> None:
    """Write Word's number labels into the text where Markdown cannot draw them:
    numbered headings ("2.1 Scope") and list levels whose labels are not plain "N."
    (those levels become bullets carrying their label, e.g. "- 2.3.1. Budget")."""
    for paragraph in document.iter(_w("p")):
        numbered = _paragraph_numbering(paragraph, sheet, numbering)
        if numbered is None:
            continue
        labelled = numbering.next_label(*numbered)
        if labelled is None:
            continue
        label, level = labelled
        style_id = _paragraph_style(paragraph, sheet)
        heading = style_id in sheet.styles and _heading_level(sheet, style_id) is not None
        if not heading and level.markdown_can_number(numbered[1]):
            continue
        if not heading:
            _as_bullet_level(level)
        if label.strip():
            _prepend_text(paragraph, label + " ")


def _as_bullet_level(level: _Level) -> None:
    for tag, value in (("numFmt", "bullet"), ("lvlText", "•")):
        element = level.element.find(_w(tag))
        if element is None:
            element = etree.SubElement(level.element, _w(tag))
        element.set(_w("val"), value)


def _prepend_text(paragraph: etree._Element, text: str) -> None:
    run = etree.Element(_w("r"))
    text_el = etree.SubElement(run, _w("t"))
    text_el.text = text
    text_el.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
    ppr = paragraph.find(_w("pPr"))
    if ppr is None:
        paragraph.insert(0, run)
    else:
        ppr.addnext(run)


def _drop_table_of_contents(document: etree._Element, sheet: _StyleSheet) -> None:
    """Remove tables of contents: Word's content control for one, and paragraphs in
    the "toc N"/"TOC Heading" styles (a TOC field without the control)."""
    gallery_path = f"{_w('sdtPr')}/{_w('docPartObj')}/{_w('docPartGallery')}"
    doomed = []
    for sdt in document.iter(_w("sdt")):
        gallery = sdt.find(gallery_path)
        if gallery is not None and gallery.get(_w("val"), "").lower() == "table of contents":
            doomed.append(sdt)
    for paragraph in document.iter(_w("p")):
        style_id = _paragraph_style(paragraph, sheet)
        style = sheet.styles.get(style_id or "")
        if style is not None and _TOC_STYLE_NAME.match(style.name.strip()):
            doomed.append(paragraph)
    for element in doomed:
        parent = element.getparent()
        if parent is not None:
            parent.remove(element)


def _hoist_text_boxes(document: etree._Element) -> None:
    """Move each text box's paragraphs after the paragraph that anchors it (boxes of one
    anchor in document order) and then drop the drawings (with their VML fallback twins),
    so pandoc reads every text box, VML ones included."""
    fallback = f"{{{_MC_NS}}}Fallback"
    insert_after: dict[etree._Element, etree._Element] = {}
    drawings: list[tuple[etree._Element, etree._Element]] = []
    for content in list(document.iter(_w("txbxContent"))):
        if any(a.tag == fallback for a in content.iterancestors()):
            continue
        anchor = next(content.iterancestors(_w("p")), None)
        run = next(content.iterancestors(_w("r")), None)
        drawing = next((a for a in content.iterancestors() if a.getparent() is run), None)
        if anchor is None or run is None or drawing is None:
            continue
        after = insert_after.get(anchor, anchor)
        for block in list(content):
            after.addnext(block)
            after = block
        insert_after[anchor] = after
        drawings.append((run, drawing))
    for run, drawing in drawings:
        if drawing.getparent() is run:
            run.remove(drawing)


def _fill_grid_gaps(document: etree._Element) -> None:
    """Rows that start late or end early (w:gridBefore/w:gridAfter) get empty cells
    spanning the gap: pandoc ignores the gap and shifts the row's cells left."""
    for row in document.iter(_w("tr")):
        trpr = row.find(_w("trPr"))
        if trpr is None:
            continue
        for tag in ("gridBefore", "gridAfter"):
            gap_el = trpr.find(_w(tag))
            gap = _int_attr(gap_el)
            if gap_el is None:
                continue
            trpr.remove(gap_el)
            if not gap or gap <= 0:
                continue
            cell = etree.Element(_w("tc"))
            span = etree.SubElement(etree.SubElement(cell, _w("tcPr")), _w("gridSpan"))
            span.set(_w("val"), str(gap))
            etree.SubElement(cell, _w("p"))
            if tag == "gridAfter":
                row.append(cell)
            else:
                first_cell = next(
                    (c for c in row if c.tag not in (_w("trPr"), _w("tblPrEx"))), None
                )
                if first_cell is None:
                    row.append(cell)
                else:
                    first_cell.addprevious(cell)


def _apply_direct_outline_levels(document: etree._Element, sheet: _StyleSheet) -> None:
    for level_el in document.iter(_w("outlineLvl")):
        level = _int_attr(level_el)
        ppr = level_el.getparent()
        if level is None or not 0 <= level <= 8 or ppr is None or ppr.tag != _w("pPr"):
            continue
        style_id = sheet.ensure_paragraph_style(f"heading {min(level + 1, 6)}")
        _set_paragraph_style(ppr, style_id)


def _set_paragraph_style(ppr: etree._Element, style_id: str) -> None:
    pstyle = ppr.find(_w("pStyle"))
    if pstyle is None:
        pstyle = etree.Element(_w("pStyle"))
        ppr.insert(0, pstyle)
    pstyle.set(_w("val"), style_id)


def _paragraph_style(paragraph: etree._Element, sheet: _StyleSheet) -> str | None:
    pstyle = paragraph.find(f"{_w('pPr')}/{_w('pStyle')}")
    return pstyle.get(_w("val")) if pstyle is not None else sheet.default_paragraph


def _is_monospace(font: str | None) -> bool:
    lowered = (font or "").lower()
    return lowered.startswith(_MONOSPACE_FONTS) or " mono" in lowered


def _monospace_text(paragraph: etree._Element, sheet: _StyleSheet) -> str | None:
    """The paragraph's text when every visible run is monospaced, else None."""
    style_id = _paragraph_style(paragraph, sheet)
    if style_id is not None and (
        style_id not in sheet.styles
        or _heading_level(sheet, style_id) is not None
        or sheet.styles[style_id].name == "Source Code"
    ):
        return None
    if paragraph.find(f"{_w('pPr')}/{_w('numPr')}") is not None:
        return None
    paragraph_font = sheet.font(style_id) or sheet.default_font
    parts: list[str] = []
    for run in paragraph.iter(_w("r")):
        text = "".join(t.text or "" for t in run.iterfind(_w("t")))
        if not text.strip():
            parts.append(text)
            continue
        rpr = run.find(_w("rPr"))
        rstyle = rpr.find(_w("rStyle")) if rpr is not None else None
        font = (
            _fonts_of(rpr)
            or (sheet.font(rstyle.get(_w("val"))) if rstyle is not None else None)
            or paragraph_font
        )
        if not _is_monospace(font):
            return None
        parts.append(text)
    text = "".join(parts)
    return text if text.strip() else None


def _mark_code_paragraphs(document: etree._Element, sheet: _StyleSheet) -> None:
    """Runs of sibling paragraphs set wholly in a monospaced font become "Source Code"
    when at least one line looks like code (typewriter-styled prose stays prose)."""
    group: list[etree._Element] = []

    def flush() -> None:
        texts = [_monospace_text(p, sheet) or "" for p in group]
        if any(_CODE_MARKS.search(t) for t in texts):
            style_id = sheet.ensure_paragraph_style("Source Code")
            for paragraph in group:
                ppr = paragraph.find(_w("pPr"))
                if ppr is None:
                    ppr = etree.Element(_w("pPr"))
                    paragraph.insert(0, ppr)
                _set_paragraph_style(ppr, style_id)
        group.clear()

    for paragraph in list(document.iter(_w("p"))):
        if _monospace_text(paragraph, sheet) is None:
            flush()
            continue
        if group and group[-1].getnext() is not paragraph:
            flush()
        group.append(paragraph)
    flush()


# --- step 2: AST rewrite --------------------------------------------------------------


# Nodes with nothing inside to rewrite: most of a document's nodes, skipped cheaply.
_LEAVES = frozenset({"Str", "Space", "SoftBreak", "LineBreak", "Code", "Math"})


def _rewrite(node: Any) -> Any:
    """Bottom-up rewrite of pandoc's JSON AST (see the module docstring)."""
    if isinstance(node, list):
        items = [_rewrite(item) for item in node]
        if items and all(isinstance(i, dict) and "t" in i for i in items):
            return _rewrite_sequence(items)
        return items
    if isinstance(node, dict):
        if node.get("t") in _LEAVES:
            return node
        return {key: _rewrite(value) for key, value in node.items()}
    return node


def _rewrite_sequence(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items:
        kind = item["t"]
        content: Any = item.get("c")
        if kind == "Image":
            out.extend(content[1])  # alt text only: no base64, no media paths
        elif kind in ("Underline", "SmallCaps"):
            out.extend(content)
        elif kind in ("Span", "Div"):
            out.extend(content[1])
        elif kind == "Figure":
            out.extend(content[2] + content[1][1])  # body, then caption
        elif kind in ("RawInline", "RawBlock"):
            continue  # no raw HTML/OpenXML in the output
        elif kind == "CodeBlock":
            out.append(_fenced_code(content[1]))
        elif kind == "Table":
            out.extend(_simple_table(item))
        elif kind in ("Para", "Plain") and (task := _checkbox_item(content)) is not None:
            _append_merging_lists(out, {"t": "BulletList", "c": [[task]]})
        elif kind in ("BulletList", "OrderedList"):
            _append_merging_lists(out, _tight_list(item))
        else:
            _append_merging_lists(out, item)
    return out


def _tight_list(item: dict[str, Any]) -> dict[str, Any]:
    """Word list items are paragraphs, which pandoc writes as a loose list (blank lines
    between items); an item's leading paragraph becomes plain text to keep it tight."""
    items = item["c"] if item["t"] == "BulletList" else item["c"][1]
    for blocks in items:
        if blocks and blocks[0]["t"] == "Para":
            blocks[0] = {"t": "Plain", "c": blocks[0]["c"]}
    return item


def _append_merging_lists(out: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Adjacent bullet lists merge. Adjacent numbered lists stay apart (each keeps its own
    numbering) by alternating "1." and "1)", which CommonMark reads as separate lists;
    the writer's separator between them is then dropped by `_drop_list_separators`."""
    previous = out[-1] if out else None
    if previous is not None and item["t"] == previous["t"] == "BulletList":
        previous["c"] = previous["c"] + item["c"]
        return
    if previous is not None and item["t"] == previous["t"] == "OrderedList":
        start, style, delimiter = item["c"][0]
        after_period = previous["c"][0][2]["t"] != "OneParen"
        delimiter = {"t": "OneParen" if after_period else "Period"}
        item = {"t": "OrderedList", "c": [[start, style, delimiter], item["c"][1]]}
    out.append(item)


# What the writer puts between adjacent lists: an HTML comment, or without raw HTML a
# paragraph holding only a no-break space.
_LIST_SEPARATORS = frozenset({"<!-- -->", "&nbsp;"})
_FENCE = re.compile(r"^(`{3,}|~{3,})")


def _drop_list_separators(markdown: str) -> str:
    """Remove the separators pandoc writes between adjacent lists (outside code)."""
    lines: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        opener = _FENCE.match(line)
        if fence is None and opener:
            fence = opener.group(1)
        elif (
            fence is not None and line.strip().startswith(fence) and set(line.strip()) == {fence[0]}
        ):
            fence = None
        elif fence is None and line in _LIST_SEPARATORS:
            continue
        lines.append(line)
    return "\n".join(lines)


def _checkbox_item(inlines: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A paragraph starting with a checkbox glyph becomes a task list item (the GFM
    writer prints `- [ ]`/`- [x]` for list items starting with these glyphs)."""
    if not inlines or inlines[0]["t"] != "Str":
        return None
    first: str = inlines[0]["c"]
    glyph = first[:1]
    if glyph not in _CHECKBOXES:
        return None
    rest = inlines[1:] if first == glyph else [{"t": "Str", "c": first[1:]}, *inlines[1:]]
    while rest and rest[0]["t"] == "Space":
        rest = rest[1:]
    marker = "☒" if _CHECKBOXES[glyph] else "☐"
    return {"t": "Plain", "c": [{"t": "Str", "c": marker}, {"t": "Space"}, *rest]}


def _fenced_code(code: str) -> dict[str, Any]:
    longest = max((len(m) for m in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return {"t": "RawBlock", "c": ["gfm", f"{fence}\n{code}\n{fence}"]}


def _simple_table(table: dict[str, Any]) -> list[dict[str, Any]]:
    """The caption's blocks, then a grid every row of which has every column, merged
    cells repeated in each cell they cover, each cell one line, one header row."""
    _attr, caption, _colspecs, head, bodies, foot = table["c"]
    rows = list(head[1])
    for body in bodies:
        rows.extend(body[2])
        rows.extend(body[3])
    rows.extend(foot[1])
    grid: dict[tuple[int, int], list[dict[str, Any]]] = {}
    width = 0
    for r, row in enumerate(rows):
        c = 0
        for cell in row[1]:
            while (r, c) in grid:
                c += 1
            _cell_attr, _align, row_span, col_span, blocks = cell
            inlines = _cell_inlines(blocks)
            for dr in range(max(1, row_span)):
                for dc in range(max(1, col_span)):
                    grid[(r + dr, c + dc)] = inlines
            c += max(1, col_span)
        width = max(width, c)
    caption_blocks: list[dict[str, Any]] = caption[1]
    if width == 0:
        return caption_blocks
    table_rows = [
        [_NO_ATTR, [_simple_cell(grid.get((r, c), [])) for c in range(width)]]
        for r in range(len(rows))
    ]
    colspecs = [[{"t": "AlignDefault"}, {"t": "ColWidthDefault"}] for _ in range(width)]
    simple = {
        "t": "Table",
        "c": [
            _NO_ATTR,
            [None, []],
            colspecs,
            [_NO_ATTR, table_rows[:1]],
            [[_NO_ATTR, 0, [], table_rows[1:]]],
            [_NO_ATTR, []],
        ],
    }
    return [*caption_blocks, simple]


def _simple_cell(inlines: list[dict[str, Any]]) -> list[Any]:
    blocks = [{"t": "Plain", "c": inlines}] if inlines else []
    return [_NO_ATTR, {"t": "AlignDefault"}, 1, 1, blocks]


def _cell_inlines(blocks: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """A cell's blocks as one line: paragraphs joined by spaces, list items marked."""
    return _join((_block_inlines(block) for block in blocks), [])


def _block_inlines(block: dict[str, Any]) -> list[dict[str, Any]]:
    kind: str = block["t"]
    content: Any = block.get("c")
    if kind in ("Plain", "Para"):
        return _one_line(content)
    if kind == "Header":
        return _one_line(content[2])
    if kind == "LineBlock":
        return _join([_one_line(line) for line in content], [])
    if kind == "RawBlock" and content[0] == "gfm":  # a fenced code block from above
        code = content[1].split("\n", 1)[-1].rsplit("\n", 1)[0]
        return [{"t": "Code", "c": [_NO_ATTR, " ".join(code.split())]}]
    if kind in ("BlockQuote", "Div"):
        return _cell_inlines(content[-1] if kind == "Div" else content)
    if kind in ("BulletList", "OrderedList"):
        items = content if kind == "BulletList" else content[1]
        start = 1 if kind == "BulletList" else content[0][0]
        return _join(
            (
                [
                    {"t": "Str", "c": "•" if kind == "BulletList" else f"{n}."},
                    {"t": "Space"},
                    *_cell_inlines(item),
                ]
                for n, item in enumerate(items, start=start)
            ),
            [],
        )
    if kind == "DefinitionList":
        return _cell_inlines(
            [{"t": "Plain", "c": term} for term, _ in content]
            + [b for _, definitions in content for d in definitions for b in d]
        )
    if kind == "Table":  # a nested table, already simple: rows joined with " / "
        _a, _c, _s, head, bodies, _f = content
        rows = head[1] + [row for body in bodies for row in body[3]]
        lines = [_join([_cell_inlines(cell[4]) for cell in row[1]], []) for row in rows]
        return _join(lines, [{"t": "Str", "c": "/"}, {"t": "Space"}])
    return []


def _join(
    parts: Iterable[list[dict[str, Any]]], separator: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Non-empty parts joined by a space, `separator` and the space it ends with."""
    out: list[dict[str, Any]] = []
    for part in parts:
        if not part:
            continue
        if out:
            out.extend([{"t": "Space"}, *separator])
        out.extend(part)
    return out


def _one_line(inlines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Line breaks become spaces (a pipe table row is one line), recursively."""
    out: list[dict[str, Any]] = []
    for inline in inlines:
        kind = inline["t"]
        if kind in ("LineBreak", "SoftBreak"):
            out.append({"t": "Space"})
        elif kind in ("Emph", "Strong", "Strikeout", "Superscript", "Subscript"):
            out.append({"t": kind, "c": _one_line(inline["c"])})
        elif kind in ("Link", "Quoted", "Cite"):
            content = list(inline["c"])
            content[1] = _one_line(content[1])
            out.append({"t": kind, "c": content})
        else:
            out.append(inline)
    return out


def _plain_text(inlines: Iterable[dict[str, Any]]) -> str:
    parts: list[str] = []
    for inline in inlines:
        kind: str = inline["t"]
        content: Any = inline.get("c")
        if kind == "Str":
            parts.append(content)
        elif kind in ("Space", "SoftBreak", "LineBreak"):
            parts.append(" ")
        elif kind in ("Code", "Math"):
            parts.append(content[1])
        elif kind in ("Emph", "Strong", "Strikeout", "Superscript", "Subscript"):
            parts.append(_plain_text(content))
        elif kind in ("Link", "Quoted", "Cite"):
            parts.append(_plain_text(content[1]))
    return " ".join("".join(parts).split())


def _first_heading_text(blocks: list[dict[str, Any]]) -> str | None:
    for block in blocks:
        if block["t"] == "Header" and block["c"][0] == 1:
            return _plain_text(block["c"][2]) or None
    return None


# --- core properties ------------------------------------------------------------------


@dataclass
class _Properties:
    title: str | None = None
    author: str | None = None
    created: str | None = None
    modified: str | None = None
    language: str | None = None
    pages: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _core_properties(data: bytes) -> _Properties:
    """Title, author, dates (ISO 8601) and language from docProps/core.xml through
    python-docx, the page count Word last saved from docProps/app.xml."""
    package = OpcPackage.open(io.BytesIO(data))
    props = _Properties()
    # python-docx invents defaults ("Word Document", now) when the part is missing.
    if any(rel.reltype == RT.CORE_PROPERTIES for rel in package.rels.values()):
        core = package.core_properties
        props.title = core.title.strip() or None
        props.author = core.author.strip() or None
        props.created = iso_datetime(core.created)
        props.modified = iso_datetime(core.modified)
        props.language = core.language.strip() or None
        for key in ("subject", "keywords", "category", "last_modified_by"):
            value = getattr(core, key).strip()
            if value:
                props.extra[key] = value
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        if "docProps/app.xml" in archive.namelist():
            app = etree.fromstring(archive.read("docProps/app.xml"), _XML_PARSER)
            pages = app.findtext("{*}Pages")
            props.pages = int(pages) if pages and pages.strip().isdigit() else None
        if props.language is None and "word/styles.xml" in archive.namelist():
            styles = etree.fromstring(archive.read("word/styles.xml"), _XML_PARSER)
            lang = styles.find(f"{_w('docDefaults')}//{_w('lang')}")
            props.language = lang.get(_w("val")) if lang is not None else None
    return props
