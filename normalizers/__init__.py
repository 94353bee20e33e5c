"""Files to Markdown: what the rest of the system uses of the normalizers.

`normalize_bytes` turns a file's bytes into a `NormalizedDocument`; `LegacyBatch`
converts a batch's legacy Office files ahead (`Upcoming` documents, found again through
`ConvertedAhead`); `picture_setup` builds the picture reader's setup (`PictureSetup`,
`ocr_languages`, `VisionCaptioner`), `settled` says whether a picture cache is complete;
`supported_extensions` lists the file types there is a normalizer for.

Each name is imported on first use: `import normalizers` loads nothing else, so commands
that never normalize (a search) do not pay for the format libraries.
"""

from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normalizers.base import normalize_bytes
    from normalizers.legacy_batch import LegacyBatch, Upcoming
    from normalizers.model import ConvertedAhead, NormalizedDocument
    from normalizers.pictures import PictureSetup, ocr_languages, picture_setup, settled
    from normalizers.pictures.captions import VisionCaptioner
    from normalizers.registry import supported_extensions

_HOMES = MappingProxyType(
    {
        "ConvertedAhead": "normalizers.model",
        "LegacyBatch": "normalizers.legacy_batch",
        "NormalizedDocument": "normalizers.model",
        "PictureSetup": "normalizers.pictures",
        "Upcoming": "normalizers.legacy_batch",
        "VisionCaptioner": "normalizers.pictures.captions",
        "normalize_bytes": "normalizers.base",
        "ocr_languages": "normalizers.pictures",
        "picture_setup": "normalizers.pictures",
        "settled": "normalizers.pictures",
        "supported_extensions": "normalizers.registry",
    }
)

__all__ = [
    "ConvertedAhead",
    "LegacyBatch",
    "NormalizedDocument",
    "PictureSetup",
    "Upcoming",
    "VisionCaptioner",
    "normalize_bytes",
    "ocr_languages",
    "picture_setup",
    "settled",
    "supported_extensions",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'normalizers' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
