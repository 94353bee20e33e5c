"""Text in pictures: tesseract reads what a picture shows (`PictureReader`, one per
document), a vision model may describe it; image files as documents (`normalize_image`)."""

from __future__ import annotations

from normalizers.pictures.ocr import ocr_languages
from normalizers.pictures.reader import (
    SKIP_REASONS,
    Captioner,
    PictureCache,
    PictureCounts,
    PictureReader,
    PictureReading,
    PictureSetup,
    picture_setup,
    settled,
)

__all__ = [
    "SKIP_REASONS",
    "Captioner",
    "PictureCache",
    "PictureCounts",
    "PictureReader",
    "PictureReading",
    "PictureSetup",
    "ocr_languages",
    "picture_setup",
    "settled",
]
