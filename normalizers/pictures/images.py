"""A picture's size and a form tesseract reads, by Pillow: the size from the header
alone (no pixels decoded); WebP, GIF and other formats re-encoded as PNG (an animation's
first frame), transparent pictures laid on white (tesseract would see transparent
as black: dark text on it vanishes), a photo turned as its EXIF orientation says (as a
viewer shows it), and on request turned or scaled (small or turned text)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, ImageOps

# What leptonica (tesseract's image library) reads as it is; anything else becomes PNG.
_TESSERACT_READS = frozenset({"PNG", "JPEG", "TIFF", "BMP"})
_EXIF_ORIENTATION = 0x0112  # 1: as stored; 2-8: mirrored and/or turned for display


class UnreadablePicture(Exception):
    """The bytes are no image Pillow reads (truncated, an unknown format)."""


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    format: str  # Pillow's name: PNG, JPEG, GIF, WEBP, ...
    transparent: bool
    turned: bool = False  # its EXIF orientation turns or mirrors it for display


def probe(data: bytes) -> Picture:
    """The picture's size and format from its header (no pixels decoded). A picture
    over Pillow's pixel limit (`Image.MAX_IMAGE_PIXELS`, about 89 million) is a
    decompression bomb, not one to read."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                turned = image.getexif().get(_EXIF_ORIENTATION, 1) not in (0, 1)
                return Picture(
                    image.width, image.height, image.format or "", _has_alpha(image), turned
                )
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise UnreadablePicture(f"{type(exc).__name__}: {exc}") from None
    except Image.DecompressionBombWarning as exc:
        raise UnreadablePicture(str(exc)) from None


def for_tesseract(data: bytes, picture: Picture, *, scale: float = 1.0, turn: int = 0) -> bytes:
    """The bytes as they are where tesseract reads them and nothing is to change, else
    the (first frame of the) picture as PNG: on white where it is transparent, as a
    viewer shows it, turned `turn` degrees counter-clockwise and scaled by `scale`."""
    changed = picture.transparent or picture.turned or scale != 1.0 or turn % 360
    if picture.format in _TESSERACT_READS and not changed:
        return data
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.seek(0)
            shown = ImageOps.exif_transpose(image) if picture.turned else image
            if picture.transparent:
                rgba = shown.convert("RGBA")
                frame = Image.new("RGB", rgba.size, "white")
                frame.paste(rgba, mask=rgba.getchannel("A"))
            else:
                frame = shown.convert("RGB")
            if turn % 360:
                frame = frame.rotate(turn, expand=True)
            if scale != 1.0:
                size = (round(frame.width * scale), round(frame.height * scale))
                frame = frame.resize(size, Image.Resampling.LANCZOS)
            out = io.BytesIO()
            frame.save(out, format="PNG")
            return out.getvalue()
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise UnreadablePicture(f"{type(exc).__name__}: {exc}") from None


def _has_alpha(image: Image.Image) -> bool:
    return image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
