"""tesseract, the command: which languages it has, and a picture's words with their
confidence, place (block, paragraph, line) and size from its TSV output."""

from __future__ import annotations

import csv
import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

# The project's language codes -> tesseract's.
TESSERACT_LANGUAGES = MappingProxyType({"en": "eng", "ru": "rus"})
_WORD_LEVEL = "5"  # TSV rows of level 5 are words; the others are their page, blocks, lines
# Page segmentation: automatic, and with orientation detection (text turned 90/180/270
# degrees found turned and read turned back, where the picture has enough text to tell),
# which costs about twice the CPU time of a read.
_SEGMENTATION, _SEGMENTATION_WITH_ORIENTATION = "3", "1"


class OcrTimeout(Exception):
    """tesseract ran past the time limit (and was stopped)."""


class OcrFailed(Exception):
    """tesseract refused the picture (an image its library cannot read)."""


@dataclass(frozen=True)
class Word:
    block: int
    paragraph: int
    line: int
    confidence: float
    text: str
    size: int  # the shorter side of its box, in pixels: the text's height either way it runs


@functools.cache
def tesseract_version() -> str | None:
    """The installed tesseract's version line, None where there is none."""
    if shutil.which("tesseract") is None:
        return None
    try:
        done = subprocess.run(
            ["tesseract", "--version"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = (done.stdout or done.stderr).splitlines()
    return lines[0].strip() if lines else "tesseract"


@functools.cache
def installed_languages() -> frozenset[str]:
    """The languages tesseract has data for (`eng`, `rus`, ...)."""
    if tesseract_version() is None:
        return frozenset()
    try:
        done = subprocess.run(
            ["tesseract", "--list-langs"], capture_output=True, text=True, timeout=30, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    # the first line says where the data lies ("List of available languages in ...")
    return frozenset(line.strip() for line in done.stdout.splitlines()[1:] if line.strip())


def ocr_languages(languages: Sequence[str]) -> tuple[str | None, list[str]]:
    """tesseract's `-l` argument for the languages it has data for (None: none, or no
    tesseract), and a warning for each part missing."""
    if tesseract_version() is None:
        return None, [
            "pictures.ocr is on but tesseract is not installed (apt-get install tesseract-ocr): "
            "pictures, image files and scanned PDF pages are not read"
        ]
    have = installed_languages()
    wanted = [TESSERACT_LANGUAGES[language] for language in languages]
    missing = [code for code in wanted if code not in have]
    found = [code for code in wanted if code in have]
    warnings = [
        f"tesseract has no {code} language data (apt-get install tesseract-ocr-{code}): "
        + (f"pictures are read in {'+'.join(found)} only" if found else "OCR is off")
        for code in missing
    ]
    if found and not orientation_detection():
        warnings.append(
            "tesseract has no orientation data (apt-get install tesseract-ocr-osd): "
            "turned text in pictures is found only by reading them turned each way"
        )
    return ("+".join(found) or None), warnings


def orientation_detection() -> bool:
    """Whether tesseract has the data (`osd`) to tell which way a picture's text is turned."""
    return "osd" in installed_languages()


def read_words(
    image: bytes, languages: str, timeout_s: float, *, orientation: bool = False
) -> list[Word]:
    """The words tesseract finds in `image` (a format it reads), in reading order;
    `orientation`: with its orientation detection (which needs `orientation_detection()`)."""
    psm = _SEGMENTATION_WITH_ORIENTATION if orientation else _SEGMENTATION
    try:
        done = subprocess.run(
            ["tesseract", "stdin", "stdout", "-l", languages, "--psm", psm, "tsv"],
            input=image,
            capture_output=True,
            timeout=timeout_s,
            # one thread per picture: a run reads several documents at once already
            env={**os.environ, "OMP_THREAD_LIMIT": "1"},
        )
    except subprocess.TimeoutExpired:
        raise OcrTimeout(f"OCR took over {timeout_s:g} s") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise OcrFailed(detail[-1] if detail else f"tesseract exited with {done.returncode}")
    rows = csv.reader(done.stdout.decode("utf-8", "replace").splitlines(), delimiter="\t",
                      quoting=csv.QUOTE_NONE)  # fmt: skip
    words = []
    for row in rows:
        if len(row) < 12 or row[0] != _WORD_LEVEL or not row[11].strip():
            continue
        block, paragraph, line = int(row[2]), int(row[3]), int(row[4])
        size = min(int(row[8]), int(row[9]))
        words.append(Word(block, paragraph, line, float(row[10]), row[11].strip(), size))
    return words
