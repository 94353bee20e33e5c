"""Legacy binary Office files (DOC, XLS, PPT): LibreOffice converts them headless to
the OOXML format (`normalizers.libreoffice`), whose normalizer then does the rest.
"""

from __future__ import annotations

from config.errors import ErrorCode
from normalizers.libreoffice import (
    DOC_TO_DOCX,
    PPT_TO_PPTX,
    XLS_TO_XLSX,
    Conversion,
    convert_with_libreoffice,
)
from normalizers.model import NormalizeContext, NormalizedDocument, Normalizer
from normalizers.registry import FORMATS


def _legacy_normalizer(conversion: Conversion) -> Normalizer:
    def normalize(data: bytes, ctx: NormalizeContext) -> NormalizedDocument:
        converted = convert_with_libreoffice(data, conversion, ctx)
        entry = FORMATS.get(conversion.target)
        if entry is None:
            raise ctx.fail(
                ErrorCode.UNSUPPORTED_FORMAT, f"no {conversion.target.upper()} normalizer"
            )
        document = entry.normalize(converted, ctx)
        document.metadata.setdefault("converted_with", "libreoffice")
        return document

    return normalize


normalize_doc = _legacy_normalizer(DOC_TO_DOCX)
normalize_xls = _legacy_normalizer(XLS_TO_XLSX)
normalize_ppt = _legacy_normalizer(PPT_TO_PPTX)
