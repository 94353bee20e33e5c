"""DOCX/DOCM to Markdown: pandoc for the body, python-docx for the core properties.

Three steps, because pandoc alone misses things a RAG index needs:

1. `package`: the package XML is rewritten before pandoc reads it (heading styles in
   any language, number labels, text boxes, grid gaps, code paragraphs; media emptied).
2. `pandoc`: pandoc's JSON AST is simplified (plain-grid tables, alt text for images,
   fenced code, tight and separated lists, task items; with a picture reader, each
   picture's text after the block showing it: `pictures`).
3. `pandoc`: the AST is written as GFM without raw HTML, math as `$...$`/`$$...$$`.

Nothing is lost (docs/sources.md#nothing-is-lost): the words of every paragraph of the rewritten
package are checked against pandoc's Markdown; where pandoc dropped more than a few, the body is
read by `walk` (python-docx's own walk of the same package) instead, when that keeps
more of them. Readers, best first (`normalizers.fallback`): pandoc, the walk (when
pandoc cannot read the package at all), a LibreOffice round trip.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass, field, replace
from typing import Any

from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.coreprops import CoreProperties
from docx.oxml import parse_xml as parse_docx_xml

from config.safe_parsing import xml_root
from normalizers.docx.package import prepare_package, w
from normalizers.docx.pandoc import pandoc_markdown
from normalizers.docx.pictures import ReadOnce, ShownPictures
from normalizers.docx.walk import walk_markdown
from normalizers.fallback import Reader, first_that_reads, office_round_trip
from normalizers.libreoffice import DOCX_ROUND_TRIP
from normalizers.model import NormalizeContext, NormalizedDocument
from normalizers.ooxml import check_zip_limits, iso_datetime, without_doctypes
from normalizers.selfcheck import loss_warning, word_loss

# The parts whose text the document's Markdown holds (DOCTYPEs are removed from these).
_TEXT_PARTS = ("word/",)
_FIRST_HEADING = re.compile(r"^# (.+)$", re.MULTILINE)
_ESCAPE = re.compile(r"\\(.)")
_CHECKED = "the document's paragraphs"


def normalize_docx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)  # a broken zip directory or a zip bomb ends here
    if ctx.pictures is not None:
        ctx = replace(ctx, pictures=ReadOnce(ctx.pictures))
    return first_that_reads(_READERS, data, ctx)


def _read_with_pandoc(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    prepared = prepare_package(without_doctypes(data, _TEXT_PARTS), ctx)
    shown = _shown_pictures(data, ctx)
    body = pandoc_markdown(prepared.data, ctx, shown.for_pandoc if shown else None)
    markdown, title, warnings = body.markdown, body.first_heading, list(body.warnings)
    loss = word_loss(prepared.texts, markdown)
    if loss.significant:
        try:
            shown = _shown_pictures(data, ctx)  # the walk shows every picture anew
            walked = walk_markdown(prepared.data, shown.text if shown else None)
        except Exception as exc:  # python-docx choked where pandoc did not: keep pandoc's
            warnings.append(f"python-docx could not walk it either ({type(exc).__name__})")
        else:
            walked_loss = word_loss(prepared.texts, walked)
            if walked_loss.lost < loss.lost:
                warnings.append(
                    f"read with python-docx's walk: pandoc's Markdown lacked {loss.lost} of "
                    f"the {loss.total} words ({loss.share:.1%}), e.g. {', '.join(loss.examples)}"
                )
                markdown, title, loss = walked, _first_heading(walked), walked_loss
    note = loss_warning(loss, _CHECKED)
    return _document(data, markdown, title, [*warnings, note] if note else warnings)


def _read_with_python_docx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    prepared = prepare_package(without_doctypes(data, _TEXT_PARTS), ctx)
    shown = _shown_pictures(data, ctx)
    markdown = walk_markdown(prepared.data, shown.text if shown else None)
    note = loss_warning(word_loss(prepared.texts, markdown), _CHECKED)
    return _document(data, markdown, _first_heading(markdown), [note] if note else [])


def _shown_pictures(data: bytes, ctx: NormalizeContext) -> ShownPictures | None:
    """One rendering's pictures of the package; None without a picture reader."""
    return ShownPictures(data, ctx.pictures) if ctx.pictures is not None else None


def _first_heading(markdown: str) -> str | None:
    match = _FIRST_HEADING.search(markdown)
    return _ESCAPE.sub(r"\1", match.group(1)).strip() or None if match else None


def _document(
    data: bytes, markdown: str, first_heading: str | None, warnings: list[str]
) -> NormalizedDocument:
    try:
        props = _core_properties(data)
    except Exception as exc:  # broken metadata parts cost the metadata, not the body
        props = _Properties()
        warnings = [*warnings, f"document properties unreadable ({type(exc).__name__})"]
    return NormalizedDocument(
        markdown=markdown,
        title=props.title or first_heading,
        author=props.author,
        created_at=props.created,
        updated_at=props.modified,
        page_count=props.pages,
        language=props.language,
        metadata=props.extra,
        warnings=tuple(warnings),
    )


_PANDOC = Reader("pandoc", _read_with_pandoc)
_READERS = (
    _PANDOC,
    Reader("python-docx's walk", _read_with_python_docx),
    office_round_trip(DOCX_ROUND_TRIP, _PANDOC),
)


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
    python-docx's CoreProperties (that part alone: opening the whole package would parse
    every part and read every picture), the page count Word last saved from
    docProps/app.xml."""
    props = _Properties()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        core_part = _core_part(archive) if "_rels/.rels" in names else None
        # python-docx invents defaults ("Word Document", now) when the part is missing.
        if core_part in names:
            core = CoreProperties(parse_docx_xml(archive.read(core_part)))
            props.title = core.title.strip() or None
            props.author = core.author.strip() or None
            props.created = iso_datetime(core.created)
            props.modified = iso_datetime(core.modified)
            props.language = core.language.strip() or None
            for key in ("subject", "keywords", "category", "last_modified_by"):
                value = getattr(core, key).strip()
                if value:
                    props.extra[key] = value
        if "docProps/app.xml" in names:
            app = xml_root(archive.read("docProps/app.xml"), huge_tree=True)
            pages = app.findtext("{*}Pages")
            props.pages = int(pages) if pages and pages.strip().isdigit() else None
        if props.language is None and "word/styles.xml" in names:
            styles = xml_root(archive.read("word/styles.xml"), huge_tree=True)
            lang = styles.find(f"{w('docDefaults')}//{w('lang')}")
            props.language = lang.get(w("val")) if lang is not None else None
    return props


def _core_part(archive: zipfile.ZipFile) -> str | None:
    """The zip path of the core properties part, from the package relationships."""
    rels = xml_root(archive.read("_rels/.rels"), huge_tree=True)
    for rel in rels:
        if rel.get("Type") == RT.CORE_PROPERTIES:
            target: str = rel.get("Target", "")
            return target.lstrip("/")
    return None
