"""DOCX/DOCM to Markdown: pandoc for the body, python-docx for the core properties.

Three steps, because pandoc alone misses things a RAG index needs:

1. `package`: the package XML is rewritten before pandoc reads it (heading styles in
   any language, number labels, text boxes, grid gaps, code paragraphs; media emptied).
2. `pandoc`: pandoc's JSON AST is simplified (plain-grid tables, alt text for images,
   fenced code, tight and separated lists, task items).
3. `pandoc`: the AST is written as GFM without raw HTML, math as `$...$`/`$$...$$`.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass, field
from typing import Any

from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.opc.package import OpcPackage
from lxml import etree

from normalizers.base import (
    NormalizeContext,
    NormalizedDocument,
    check_zip_limits,
    iso_datetime,
    register,
)
from normalizers.docx.package import XML_PARSER, prepare_package, w
from normalizers.docx.pandoc import pandoc_markdown

DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DOCM_MIME = "application/vnd.ms-word.document.macroEnabled.12"


@register("docx", extensions=(".docx", ".docm"), mimes=(DOCX_MIME, DOCM_MIME))
def normalize_docx(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
    check_zip_limits(data, ctx)
    body = pandoc_markdown(prepare_package(data, ctx), ctx)
    props = _core_properties(data)
    title = props.title or body.first_heading
    return NormalizedDocument(
        markdown=body.markdown,
        title=title,
        author=props.author,
        created_at=props.created,
        updated_at=props.modified,
        page_count=props.pages,
        language=props.language,
        metadata=props.extra,
        warnings=body.warnings,
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
            app = etree.fromstring(archive.read("docProps/app.xml"), XML_PARSER)
            pages = app.findtext("{*}Pages")
            props.pages = int(pages) if pages and pages.strip().isdigit() else None
        if props.language is None and "word/styles.xml" in archive.namelist():
            styles = etree.fromstring(archive.read("word/styles.xml"), XML_PARSER)
            lang = styles.find(f"{w('docDefaults')}//{w('lang')}")
            props.language = lang.get(w("val")) if lang is not None else None
    return props
