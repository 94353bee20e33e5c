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


class PictureTooLarge(Exception):
    """The picture has more pixels than Pillow reads (its message says how many)."""


@dataclass(frozen=True)
class Picture:
    width: int
    height: int
    format: str  # Pillow's name: PNG, JPEG, GIF, WEBP, ...
    transparent: bool
    turned: bool = False  # its EXIF orientation turns or mirrors it for display


def probe(data: bytes) -> Picture:
    """The picture's size and format from its header (no pixels decoded). A picture
    over Pillow's pixel limit is a decompression bomb, not one to read
    (`PictureTooLarge`)."""
    try:
        with warnings.catch_warnings():
            # the limit is checked below, where the picture's size can be named
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                turned = image.getexif().get(_EXIF_ORIENTATION, 1) not in (0, 1)
                picture = Picture(
                    image.width, image.height, image.format or "", _has_alpha(image), turned
                )
    except Image.DecompressionBombError:  # over twice the limit: refused, size unsaid
        raise PictureTooLarge(_too_large(None)) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UnreadablePicture(f"{type(exc).__name__}: {exc}") from None
    if Image.MAX_IMAGE_PIXELS and picture.width * picture.height > Image.MAX_IMAGE_PIXELS:
        raise PictureTooLarge(_too_large((picture.width, picture.height)))
    return picture


def _too_large(size: tuple[int, int] | None) -> str:
    limit = Image.MAX_IMAGE_PIXELS or 0
    pixels = f"{size[0]:,} x {size[1]:,} pixels" if size else f"over {2 * limit:,} pixels"
    return (
        f"{pixels}, more than Pillow reads: its decompression-bomb guard stops at "
        f"{limit:,} pixels (PIL.Image.MAX_IMAGE_PIXELS, not a setting); scale the picture "
        "down under that to have its text read"
    )


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
