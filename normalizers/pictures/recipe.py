"""How a picture is read, in one to a few tesseract reads within its time limit:

- as a viewer shows it (its EXIF orientation applied);
- small text (a UI screenshot at 1x: 11-14 px) read again scaled up to the height
  tesseract reads well, that read kept unless it is unsure where the first was not;
- a read tesseract is unsure of (text turned 90/180/270 degrees, or no text) read again
  with tesseract's orientation detection (which costs about a read more, so only
  then), and if still unsure, turned upside down, then a quarter each way (a short
  line is too little for orientation detection to tell which way is up), until one is
  sure; the read with the most confident characters kept.

Sure and confident are tesseract's confidence over the read's characters, not the
configured threshold, so a cached result holds whatever the settings are."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence

from normalizers.pictures.images import Picture, for_tesseract
from normalizers.pictures.ocr import OcrTimeout, Word, orientation_detection, read_words

# Part of the OCR cache's key: bump when a change here, or in what a read returns (a
# word's fields), changes what a picture's cached result holds.
RECIPE_VERSION = "3"
# Words whose box's shorter side is under this many pixels are small text ...
SMALL_TEXT_PX = 20
# ... read again scaled by the least whole factor that makes them this tall, by at most
# MAX_SCALE and to no more than MAX_SCALED_PIXELS. Measured with `bench.pictures` on
# anti-aliased screen text: 22 reads best; at 26-30 text in an input box runs into
# the box's edge and is lost.
READABLE_TEXT_PX = 22
MAX_SCALE = 4
MAX_SCALED_PIXELS = 16_000_000
# A read whose words' mean confidence (weighted by characters) is under this is
# mostly noise: text turned, or no text at all. Upright reads of the benchmark's
# pictures score 82-97; upside-down Latin read as Cyrillic about 60.
SURE_CONFIDENCE = 70.0
_TURNS = (180, 90, 270)  # degrees counter-clockwise: the other ways a picture can lie


def read_picture(data: bytes, picture: Picture, languages: str, timeout_s: float) -> list[Word]:
    """The words of the picture's best read (see the module's text) within `timeout_s`
    for all its reads: `OcrTimeout` where the time runs out before the reads it takes
    end. A read cut short keeps no part of the result, which would then depend on how
    busy the machine was: the picture is skipped for `timeout`, and read again by the
    next run."""
    deadline = time.monotonic() + timeout_s

    def read(scale: float = 1.0, turn: int = 0, orientation: bool = False) -> list[Word]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise OcrTimeout(f"OCR took over {timeout_s:g} s")
        image = for_tesseract(data, picture, scale=scale, turn=turn)
        return read_words(image, languages, left, orientation=orientation)

    words = read()
    scale = _scale_for(words, picture)
    if scale > 1.0:
        scaled = read(scale)
        if _sure(scaled) or not _sure(words):
            words = scaled
    if not _sure(words) and orientation_detection():
        words = max(words, read(scale, orientation=True), key=_score)
    for turn in _TURNS:
        if _sure(words):
            break
        words = max(words, read(scale, turn), key=_score)
    return words


def _scale_for(words: Sequence[Word], picture: Picture) -> float:
    """How much to enlarge the picture for its text to read well: 1 where its words
    are not small (or there are none)."""
    sizes = [word.size for word in words if len(word.text) > 1]  # "|", "." tell no height
    if not sizes:
        return 1.0
    size = float(statistics.median(sizes))
    if size >= SMALL_TEXT_PX:
        return 1.0
    most = math.sqrt(MAX_SCALED_PIXELS / (picture.width * picture.height))
    return max(1.0, min(math.ceil(READABLE_TEXT_PX / max(size, 1.0)), MAX_SCALE, most))


def _score(words: Sequence[Word]) -> float:
    """The read's characters, each counted by tesseract's confidence in its word."""
    return sum(len(word.text) * word.confidence for word in words)


def _sure(words: Sequence[Word]) -> bool:
    """No words, or words tesseract is on the whole sure of."""
    characters = sum(len(word.text) for word in words)
    return not characters or _score(words) / characters >= SURE_CONFIDENCE
