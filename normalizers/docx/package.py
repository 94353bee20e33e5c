"""DOCX step 1: the package XML rewritten before pandoc reads it.

Pandoc finds headings only by the English style names "heading N", so every paragraph
style with an outline level (what Word itself uses: Russian templates call them
"Заголовок 1" with id "1") is renamed to "heading N"; paragraphs with a direct outline
level get such a style. Title/Subtitle/Author/Date/Abstract styles would vanish into
pandoc's metadata, so they become body paragraphs (the title an H1). Word's number labels
that Markdown cannot draw (numbered headings, "1.1."/"a)"/"iv." list levels) are written
into the text. Text boxes are moved out of their drawing next to the paragraph that
anchors them (pandoc skips VML text boxes); table rows that start late (w:gridBefore) get
the empty cells pandoc would otherwise drop; runs of paragraphs set entirely in a
monospaced font that look like code get the "Source Code" style pandoc turns into code
blocks. Media parts are emptied: only images' alt text is kept.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType

from lxml import etree

from config.errors import ErrorCode
from config.safe_parsing import parse_xml
from normalizers.model import NormalizeContext

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_MC_NS = "http://schemas.openxmlformats.org/markup-compatibility/2006"

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


def w(tag: str) -> str:
    return f"{{{W_NS}}}{tag}"


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
        element = etree.SubElement(self.root, w("style"))
        element.set(w("type"), "paragraph")
        element.set(w("styleId"), style_id)
        etree.SubElement(element, w("name")).set(w("val"), name)
        self.styles[style_id] = _Style(name, "paragraph", None, None, None, element)
        return style_id


def _parse_xml(blob: bytes, part: str, ctx: NormalizeContext) -> etree._Element:
    """A part of the package; a DOCX body may hold text nodes past libxml2's size limit."""
    return parse_xml(blob, ctx.fail, part, huge_tree=True)


@dataclass(frozen=True)
class PreparedPackage:
    data: bytes  # the rewritten package
    # The text of every paragraph of the body and the notes, what the Markdown must hold
    # (the self-check): the table of contents, deleted text and comments are not in it.
    texts: tuple[str, ...]


def prepare_package(data: bytes, ctx: NormalizeContext) -> PreparedPackage:
    """The package with styles and body rewritten for pandoc and media emptied."""
    with zipfile.ZipFile(io.BytesIO(data)) as source:
        names = source.namelist()
        if "word/document.xml" not in names:
            raise ctx.fail(ErrorCode.CORRUPT, "the package has no word/document.xml")
        sheet = _StyleSheet(etree.Element(w("styles")))
        if "word/styles.xml" in names:
            sheet = _read_styles(_parse_xml(source.read("word/styles.xml"), "styles.xml", ctx))
        _rename_styles(sheet)
        numbering = _Numbering(etree.Element(w("numbering")), sheet)
        if "word/numbering.xml" in names:
            numbering_xml = _parse_xml(source.read("word/numbering.xml"), "numbering.xml", ctx)
            numbering = _Numbering(numbering_xml, sheet)
        document = _parse_xml(source.read("word/document.xml"), "document.xml", ctx)
        _rewrite_body(document, sheet, numbering)
        texts = paragraph_texts(document)
        for notes in ("word/footnotes.xml", "word/endnotes.xml"):
            if notes in names:
                texts.extend(_note_texts(_parse_xml(source.read(notes), notes, ctx)))
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
    return PreparedPackage(out.getvalue(), tuple(text for text in texts if text))


_FALLBACK = f"{{{_MC_NS}}}Fallback"
_NOTE_SEPARATORS = frozenset({"separator", "continuationSeparator", "continuationNotice"})


def body_paragraphs(root: etree._Element) -> Iterator[etree._Element]:
    """Every paragraph under `root` but those of an mc:Fallback (the old-format twin of
    a drawing, which repeats its text)."""
    twins = {p for fallback in root.iter(_FALLBACK) for p in fallback.iter(w("p"))}
    return (paragraph for paragraph in root.iter(w("p")) if paragraph not in twins)


def paragraph_texts(root: etree._Element) -> list[str]:
    """`paragraph_text` of every paragraph under `root` (`body_paragraphs`)."""
    hidden = _hidden_text(root)
    return [paragraph_text(paragraph, hidden) for paragraph in body_paragraphs(root)]


_NOTE_REFERENCES = (w("footnoteReference"), w("endnoteReference"))
# Text that is not shown: deleted, or the old place of moved text (tracked changes).
_REMOVED = (w("del"), w("moveFrom"))
_TEXT_TAGS = (w("t"), w("tab"), w("br"), w("cr"), w("ruby"), *_NOTE_REFERENCES)


def paragraph_text(
    paragraph: etree._Element,
    hidden: set[etree._Element] | None = None,
    *,
    note_marks: bool = False,
) -> str:
    """The paragraph's visible text: its runs' text (inserted text included; deleted
    and moved-away text left out), tabs and breaks as spaces, ruby as "base(guide)";
    with `note_marks`, note references as `[^id]` (the ids are no words of the text:
    Markdown numbers notes its own way). `hidden`: `_hidden_text` of the paragraph or of
    a part holding it."""
    if hidden is None:
        hidden = _hidden_text(paragraph)
    parts: list[str] = []
    for node in paragraph.iter(*_TEXT_TAGS):
        if node.tag == w("t"):
            if node not in hidden:
                parts.append(node.text or "")
        elif node.tag == w("ruby"):
            if node not in hidden:  # a ruby inside deleted text
                parts.append(_ruby_text(node))
        elif node.tag in _NOTE_REFERENCES:
            parts.append(f"[^{node.get(w('id'), '')}]" if note_marks else " ")
        else:
            parts.append(" ")
    return "".join(parts)


def _hidden_text(root: etree._Element) -> set[etree._Element]:
    """The w:t (and w:ruby) elements whose text is not read as such: removed text, and
    ruby parts (`_ruby_text` reads them)."""
    hidden: set[etree._Element] = set()
    for element in root.iter(w("ruby"), *_REMOVED):
        hidden.update(element.iterdescendants(w("t"), w("ruby")))
    return hidden


def _ruby_text(ruby: etree._Element) -> str:
    base = "".join(t.text or "" for t in ruby.iterfind(f"{w('rubyBase')}//{w('t')}"))
    guide = "".join(t.text or "" for t in ruby.iterfind(f"{w('rt')}//{w('t')}"))
    return f"{base}({guide})" if guide else base


def _note_texts(root: etree._Element) -> list[str]:
    return [
        text
        for note in root
        if note.get(w("type")) not in _NOTE_SEPARATORS
        for text in paragraph_texts(note)
    ]


def _read_styles(root: etree._Element) -> _StyleSheet:
    sheet = _StyleSheet(root)
    for element in root.iterfind(w("style")):
        style_id = element.get(w("styleId"))
        if not style_id:
            continue
        name_el = element.find(w("name"))
        based_el = element.find(w("basedOn"))
        level_el = element.find(f"{w('pPr')}/{w('outlineLvl')}")
        level = _int_attr(level_el)
        sheet.styles[style_id] = _Style(
            name=name_el.get(w("val"), style_id) if name_el is not None else style_id,
            kind=element.get(w("type"), "paragraph"),
            based_on=based_el.get(w("val")) if based_el is not None else None,
            outline_level=level,
            font=_fonts_of(element.find(w("rPr"))),
            element=element,
        )
        if element.get(w("type")) == "paragraph" and element.get(w("default")) in ("1", "true"):
            sheet.default_paragraph = style_id
    defaults = root.find(f"{w('docDefaults')}/{w('rPrDefault')}/{w('rPr')}")
    sheet.default_font = _fonts_of(defaults)
    return sheet


def _int_attr(element: etree._Element | None, name: str = "val") -> int | None:
    if element is None:
        return None
    try:
        return int(element.get(w(name), ""))
    except ValueError:
        return None


def _fonts_of(rpr: etree._Element | None) -> str | None:
    fonts = rpr.find(w("rFonts")) if rpr is not None else None
    if fonts is None:
        return None
    font: str | None = fonts.get(w("ascii")) or fonts.get(w("hAnsi"))
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
    name_el = style.element.find(w("name"))
    if name_el is None:
        name_el = etree.SubElement(style.element, w("name"))
        style.element.insert(0, name_el)
    name_el.set(w("val"), name)
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
    _unwrap(document, _WRAPPERS)
    _drop_table_of_contents(document, sheet)
    _hoist_text_boxes(document)
    _fill_grid_gaps(document)
    _spell_out_table_looks(document)
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
_ALPHABETS = MappingProxyType(
    {
        "lowerLetter": _LATIN,
        "upperLetter": _LATIN.upper(),
        "russianLower": _RUSSIAN,
        "russianUpper": _RUSSIAN.upper(),
    }
)


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
        for abstract in root.iterfind(w("abstractNum")):
            abstract_id = abstract.get(w("abstractNumId"), "")
            self.levels[abstract_id] = {
                ilvl: _parse_level(element)
                for element in abstract.iterfind(w("lvl"))
                if (ilvl := _int_attr(element, "ilvl")) is not None
            }
            link = abstract.find(w("numStyleLink"))
            if link is not None:
                style_links[abstract_id] = link.get(w("val"), "")
        for num in root.iterfind(w("num")):
            abstract_el = num.find(w("abstractNumId"))
            overrides = {
                ilvl: start
                for override in num.iterfind(w("lvlOverride"))
                if (ilvl := _int_attr(override, "ilvl")) is not None
                and (start := _int_attr(override.find(w("startOverride")))) is not None
            }
            if abstract_el is not None:
                self.nums[num.get(w("numId"), "")] = (abstract_el.get(w("val"), ""), overrides)
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
    fmt_el, text_el = element.find(w("numFmt")), element.find(w("lvlText"))
    style_el = element.find(w("pStyle"))
    return _Level(
        start=_int_attr(element.find(w("start"))) or 0,  # ECMA-376: absent means 0
        fmt=fmt_el.get(w("val"), "decimal") if fmt_el is not None else "decimal",
        text=text_el.get(w("val"), "") if text_el is not None else "",
        legal=element.find(w("isLgl")) is not None,
        style=style_el.get(w("val")) if style_el is not None else None,
        element=element,
    )


def _style_num_id(sheet: _StyleSheet, style_id: str | None) -> str | None:
    for style in sheet.chain(style_id):
        num_id = style.element.find(f"{w('pPr')}/{w('numPr')}/{w('numId')}")
        if num_id is not None:
            value: str | None = num_id.get(w("val"))
            return value
    return None


def _paragraph_numbering(
    paragraph: etree._Element, sheet: _StyleSheet, numbering: _Numbering
) -> tuple[str, int] | None:
    """(numId, level) of a numbered paragraph: its own w:numPr, else its style's."""
    style_id = _paragraph_style(paragraph, sheet)
    numpr = paragraph.find(f"{w('pPr')}/{w('numPr')}")
    num_el = numpr.find(w("numId")) if numpr is not None else None
    num_id = num_el.get(w("val")) if num_el is not None else _style_num_id(sheet, style_id)
    if not num_id or num_id == "0":
        return None
    level = _int_attr(numpr.find(w("ilvl"))) if numpr is not None else None
    for style in sheet.chain(style_id):
        if level is not None:
            break
        level = _int_attr(style.element.find(f"{w('pPr')}/{w('numPr')}/{w('ilvl')}"))
    return num_id, level if level is not None else numbering.level_for_style(num_id, style_id)


def _write_number_labels(
    document: etree._Element, sheet: _StyleSheet, numbering: _Numbering
) -> None:
    """Write Word's number labels into the text where Markdown cannot draw them:
    numbered headings ("2.1 Scope") and list levels whose labels are not plain "N."
    (those levels become bullets carrying their label, e.g. "- 2.3.1. Budget")."""
    for paragraph in document.iter(w("p")):
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
        element = level.element.find(w(tag))
        if element is None:
            element = etree.SubElement(level.element, w(tag))
        element.set(w("val"), value)


def _prepend_text(paragraph: etree._Element, text: str) -> None:
    run = etree.Element(w("r"))
    text_el = etree.SubElement(run, w("t"))
    text_el.text = text
    text_el.set("{http://www.w3.org/XML/1998/namespace}space", "preserve")
    ppr = paragraph.find(w("pPr"))
    if ppr is None:
        paragraph.insert(0, run)
    else:
        ppr.addnext(run)


def _drop_table_of_contents(document: etree._Element, sheet: _StyleSheet) -> None:
    """Remove tables of contents: Word's content control for one, and paragraphs in
    the "toc N"/"TOC Heading" styles (a TOC field without the control)."""
    gallery_path = f"{w('sdtPr')}/{w('docPartObj')}/{w('docPartGallery')}"
    doomed = []
    for sdt in document.iter(w("sdt")):
        gallery = sdt.find(gallery_path)
        if gallery is not None and gallery.get(w("val"), "").lower() == "table of contents":
            doomed.append(sdt)
    for paragraph in document.iter(w("p")):
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
    for content in list(document.iter(w("txbxContent"))):
        if any(a.tag == fallback for a in content.iterancestors()):
            continue
        anchor = next(content.iterancestors(w("p")), None)
        run = next(content.iterancestors(w("r")), None)
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
    for row in document.iter(w("tr")):
        trpr = row.find(w("trPr"))
        if trpr is None:
            continue
        for tag in ("gridBefore", "gridAfter"):
            gap_el = trpr.find(w(tag))
            gap = _int_attr(gap_el)
            if gap_el is None:
                continue
            trpr.remove(gap_el)
            if not gap or gap <= 0:
                continue
            cell = etree.Element(w("tc"))
            span = etree.SubElement(etree.SubElement(cell, w("tcPr")), w("gridSpan"))
            span.set(w("val"), str(gap))
            etree.SubElement(cell, w("p"))
            if tag == "gridAfter":
                row.append(cell)
            else:
                first_cell = next((c for c in row if c.tag not in (w("trPr"), w("tblPrEx"))), None)
                if first_cell is None:
                    row.append(cell)
                else:
                    first_cell.addprevious(cell)


# Elements that only wrap content pandoc would read without them, and with them drops
# whole (custom XML around rows, cells and tables; bidi runs; simple fields).
_WRAPPERS = frozenset(w(tag) for tag in ("customXml", "smartTag", "dir", "bdo", "fldSimple"))
_WRAPPER_PROPERTIES = frozenset(w(tag) for tag in ("customXmlPr", "smartTagPr"))


def _unwrap(root: etree._Element, tags: frozenset[str]) -> None:
    """Replace every element with one of `tags` by its children (its properties
    dropped), keeping document order; nested wrappers unwrap too."""
    for element in list(root.iter(*tags)):
        parent = element.getparent()
        if parent is None:
            continue
        index = parent.index(element)
        children = [c for c in element if c.tag not in _WRAPPER_PROPERTIES]
        parent.remove(element)  # lxml keeps the wrapper's tail only with the wrapper
        for offset, child in enumerate(children):
            parent.insert(index + offset, child)


_FIRST_ROW_LOOK = 0x0020  # tblLook's w:val bit for "header row"


def _spell_out_table_looks(document: etree._Element) -> None:
    """Say plainly in w:firstRow whether a table has a header row, for pandoc (which
    reads only that attribute) and the walk: Word 2007 writes the look only as a bit
    field in w:val; a table without any look (LibreOffice writes none) keeps its first
    row as the header, as no mark says otherwise."""
    for table in document.iter(w("tbl")):
        properties = table.find(w("tblPr"))
        if properties is None:
            properties = etree.Element(w("tblPr"))
            table.insert(0, properties)
        look = properties.find(w("tblLook"))
        if look is None:
            etree.SubElement(properties, w("tblLook")).set(w("firstRow"), "1")
            continue
        if look.get(w("firstRow")) is not None or look.get(w("val")) is None:
            continue
        try:
            bits = int(look.get(w("val"), ""), 16)
        except ValueError:
            continue
        look.set(w("firstRow"), "1" if bits & _FIRST_ROW_LOOK else "0")


def _apply_direct_outline_levels(document: etree._Element, sheet: _StyleSheet) -> None:
    for level_el in document.iter(w("outlineLvl")):
        level = _int_attr(level_el)
        ppr = level_el.getparent()
        if level is None or not 0 <= level <= 8 or ppr is None or ppr.tag != w("pPr"):
            continue
        style_id = sheet.ensure_paragraph_style(f"heading {min(level + 1, 6)}")
        _set_paragraph_style(ppr, style_id)


def _set_paragraph_style(ppr: etree._Element, style_id: str) -> None:
    pstyle = ppr.find(w("pStyle"))
    if pstyle is None:
        pstyle = etree.Element(w("pStyle"))
        ppr.insert(0, pstyle)
    pstyle.set(w("val"), style_id)


def _paragraph_style(paragraph: etree._Element, sheet: _StyleSheet) -> str | None:
    pstyle = paragraph.find(f"{w('pPr')}/{w('pStyle')}")
    return pstyle.get(w("val")) if pstyle is not None else sheet.default_paragraph


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
    if paragraph.find(f"{w('pPr')}/{w('numPr')}") is not None:
        return None
    paragraph_font = sheet.font(style_id) or sheet.default_font
    parts: list[str] = []
    for run in paragraph.iter(w("r")):
        text = "".join(t.text or "" for t in run.iterfind(w("t")))
        if not text.strip():
            parts.append(text)
            continue
        rpr = run.find(w("rPr"))
        rstyle = rpr.find(w("rStyle")) if rpr is not None else None
        font = (
            _fonts_of(rpr)
            or (sheet.font(rstyle.get(w("val"))) if rstyle is not None else None)
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
                ppr = paragraph.find(w("pPr"))
                if ppr is None:
                    ppr = etree.Element(w("pPr"))
                    paragraph.insert(0, ppr)
                _set_paragraph_style(ppr, style_id)
        group.clear()

    for paragraph in list(document.iter(w("p"))):
        if _monospace_text(paragraph, sheet) is None:
            flush()
            continue
        if group and group[-1].getnext() is not paragraph:
            flush()
        group.append(paragraph)
    flush()
