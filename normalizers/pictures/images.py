"""A picture's size and a form tesseract reads, by Pillow: the size from the header
alone (no pixels decoded); WebP, GIF and other formats re-encoded as PNG (an animation's
first frame), and transparent pictures laid on white (tesseract would see transparent
as black: dark text on it vanishes)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image

# What leptonica (tesseract's image library) reads as it is; anything else becomes PNG.
_TESSERACT_READS = frozenset({"PNG", "JPEG", "TIFF", "BMP"})


class UnreadablePicture(Exception):
    """The bytes are no image Pillow reads (truncated, an unknown format)."""


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    format: str  # Pillow's name: PNG, JPEG, GIF, WEBP, ...
    transparent: bool


def probe(data: bytes) -> Picture:
    """The picture's size and format from its header (no pixels decoded). A picture
    over Pillow's pixel limit (`Image.MAX_IMAGE_PIXELS`, about 89 million) is a
    decompression bomb, not one to read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                return Picture(image.width, image.height, image.format or "", _has_alpha(image))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadablePicture(f"{type(exc).__name__}: {exc}") from None
    except Image.DecompressionBombWarning as exc:
        raise UnreadablePicture(str(exc)) from None


def for_tesseract(data: bytes, picture: Picture) -> bytes:
    """The bytes as they are where tesseract reads them, else the (first frame of the)
    picture as PNG, on white where it is transparent."""
    if picture.format in _TESSERACT_READS and not picture.transparent:
        return data
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            if picture.transparent:
                rgba = image.convert("RGBA")
                frame = Image.new("RGB", rgba.size, "white")
                frame.paste(rgba, mask=rgba.getchannel("A"))
            else:
                frame = image.convert("RGB")
            out = io.BytesIO()
            frame.save(out, format="PNG")
            return out.getvalue()
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise UnreadablePicture(f"{type(exc).__name__}: {exc}") from None


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
