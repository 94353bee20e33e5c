"""The formats normalizers read: a format's name, its normalizer as a "module:function"
string imported on first use (normalizing a Markdown file imports no PDF or Office
library), its extensions and MIME types."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from normalizers.model import Normalizer


@dataclass(frozen=True)
class FormatEntry:
    name: str
    target: str  # "module:function" of its normalizer
    extensions: tuple[str, ...] = ()  # lower case, with the dot
    mimes: tuple[str, ...] = ()

    @property
    def normalize(self) -> Normalizer:
        """The normalizer, its module imported now (once: Python keeps it)."""
        module, _, function = self.target.partition(":")
        normalizer: Normalizer = getattr(importlib.import_module(module), function)
        return normalizer


FORMATS: Mapping[str, FormatEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            FormatEntry(
                "markdown",
                "normalizers.text:normalize_markdown_file",
                (".md", ".markdown", ".mdown", ".mkd"),
                ("text/markdown", "text/x-markdown"),
            ),
            FormatEntry(
                "text",
                "normalizers.text:normalize_text_file",
                (".txt", ".text", ".log"),
                ("text/plain",),
            ),
            FormatEntry(
                "html",
                "normalizers.html:normalize_html",
                (".html", ".htm", ".xhtml"),
                ("text/html", "application/xhtml+xml"),
            ),
            FormatEntry("pdf", "normalizers.pdf:normalize_pdf", (".pdf",), ("application/pdf",)),
            FormatEntry(
                "docx",
                "normalizers.docx:normalize_docx",
                (".docx", ".docm"),
                (
                    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                    "application/vnd.ms-word.document.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "xlsx",
                "normalizers.xlsx:normalize_xlsx",
                (".xlsx", ".xlsm"),
                (
                    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                    "application/vnd.ms-excel.sheet.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "pptx",
                "normalizers.pptx:normalize_pptx",
                (".pptx", ".pptm"),
                (
                    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                    "application/vnd.ms-powerpoint.presentation.macroEnabled.12",
                ),
            ),
            FormatEntry(
                "doc", "normalizers.legacy:normalize_doc", (".doc",), ("application/msword",)
            ),
            FormatEntry(
                "xls", "normalizers.legacy:normalize_xls", (".xls",), ("application/vnd.ms-excel",)
            ),
            FormatEntry(
                "ppt",
                "normalizers.legacy:normalize_ppt",
                (".ppt",),
                ("application/vnd.ms-powerpoint",),
            ),
            FormatEntry(
                "drawio",
                "normalizers.diagrams.drawio:normalize_drawio",
                (".drawio", ".dio"),
                ("application/vnd.jgraph.mxfile",),
            ),
            FormatEntry(
                "gliffy",
                "normalizers.diagrams.gliffy:normalize_gliffy",
                (".gliffy",),
                ("application/gliffy+json",),
            ),
            FormatEntry(
                "vsdx",
                "normalizers.diagrams.visio:normalize_vsdx",
                (".vsdx", ".vsdm"),
                (
                    "application/vnd.ms-visio.drawing",
                    "application/vnd.ms-visio.drawing.main+xml",
                    "application/vnd.ms-visio.drawing.macroEnabled.12",
                    "application/vnd.ms-visio.drawing.macroEnabled.main+xml",
                ),
            ),
            FormatEntry(
                "vsd",
                "normalizers.diagrams.visio:normalize_vsd",
                (".vsd",),
                ("application/vnd.visio",),
            ),
            FormatEntry(
                "image",
                "normalizers.pictures.document:normalize_image",
                (".png", ".jpg", ".jpeg", ".gif", ".tif", ".tiff", ".bmp", ".webp"),
                (
                    "image/png",
                    "image/jpeg",
                    "image/gif",
                    "image/tiff",
                    "image/bmp",
                    "image/webp",
                ),
            ),
            FormatEntry(
                "confluence",
                "normalizers.confluence:normalize_confluence",
                mimes=("application/vnd.atlassian.confluence.storage+xml",),
            ),
        )
    }
)


def supported_extensions(without: tuple[str, ...] = ()) -> frozenset[str]:
    """The extensions of every format but those named in `without`."""
    return frozenset(
        e for entry in FORMATS.values() if entry.name not in without for e in entry.extensions
    )
