"""Pictures that show real text, drawn by Pillow in a real font (DejaVu Sans Mono,
vendored in tests/fonts with its licence), for the OCR tests."""

from __future__ import annotations

import functools
import io
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

FONT = Path(__file__).with_name("fonts") / "DejaVuSansMono.ttf"


def text_picture(
    lines: list[str],
    *,
    size: tuple[int, int] | None = None,
    font_size: int = 28,
    blurred: list[str] | None = None,
    format: str = "PNG",
) -> bytes:
    """A white picture with `lines` in black (and `blurred` lines smudged past easy
    reading, for the confidence filter), encoded as `format`."""
    font = ImageFont.truetype(str(FONT), font_size)
    step = font_size * 2
    width, height = size or (font_size * 30, step * (len(lines) + len(blurred or [])) + step)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((20, 20 + i * step), line, fill="black", font=font)
    for j, line in enumerate(blurred or []):
        strip = Image.new("RGB", (width, step), "white")
        ImageDraw.Draw(strip).text((20, font_size // 2), line, fill="black", font=font)
        image.paste(strip.filter(ImageFilter.GaussianBlur(3.2)), (0, 20 + (len(lines) + j) * step))
    out = io.BytesIO()
    image.save(out, format=format)
    return out.getvalue()


@functools.cache
def oversized_picture() -> bytes:
    """A valid 10,000 x 10,000 PNG: 100 million pixels, over Pillow's decompression-bomb
    limit; blank (one bit a pixel), so about 32 kB on disk."""
    out = io.BytesIO()
    Image.new("1", (10_000, 10_000), 1).save(out, format="PNG")
    return out.getvalue()
