"""Pictures and diagrams benchmark: label words recovered, and seconds per file.

    .venv/bin/python -m bench.pictures [--formats drawio,image,vsdx] [--json] [--files]
        [--no-others]   (the comparison needs `.venv/bin/pip install -e '.[bench]'`)

Settings come from the defaults and `INGEST_*` variables, so a setting's effect can be
measured: `INGEST_PICTURES__MIN_CONFIDENCE=0 .venv/bin/python -m bench.pictures`.

Converts every file of the corpus with the product (`tasks.stages.normalize_source`,
default settings, the path a run takes) and, in the same run on the same files, with
MarkItDown, and prints per format and converter: files OK / failed (with codes), word
recall (per file: mean and minimum; pooled: matched words over all reference words),
the share of output words that are reference words ("precision", which shows a
converter that dumps raw XML), and wall-clock seconds per file (wall clock, because
OCR runs in a tesseract subprocess that CPU time of this process would not see).
Where both converters read a file, a sign test compares their per-file recall.

Corpus (`bench/data/pictures/`, each folder with its licence and sources):

- `drawio/`: draw.io's public example diagrams (jgraph/drawio-diagrams, Apache-2.0),
  plain and compressed, one and several pages;
- `screenshots/`: pictures with text: test images of the tesseract.js and pytesseract
  test suites (Apache-2.0) and screenshots of small HTML pages taken with headless
  Chromium for this benchmark;
- the real Visio files (`*.vsdx`) under `tests/corpus/diagrams/`, of the diagram tests.

The reference is made independently of the product's code:

- draw.io: the words of every cell's `value` / `label` attribute, read straight from
  the XML by the minimal reader below (a compressed page is base64, raw deflate, then
  URL-encoded), HTML stripped to its text;
- Visio: the text of every `<Text>` element of the package's pages;
- pictures: a reference file `NAME.txt` next to each picture, written by a person
  looking at the picture (what a reader sees, in reading order).

Word recall is the share of the reference's words found in the output, counted with
repeats and case-folded (words are those of `normalizers.selfcheck.words`: runs of
letters and digits, NFKC, lowercase); a diagram has no reading order, so order is not
scored.
"""

from __future__ import annotations

import argparse
import base64
import importlib.util
import io
import json
import re
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from bench.comparison import FileOutcome, FormatTally, attempt
from query.paired import sign_test

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "bench" / "data" / "pictures"
VSDX_DIR = REPO / "tests" / "corpus" / "diagrams"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".bmp", ".tif", ".tiff", ".webp"}


# --- the reference: a minimal reader of each format, separate from the product's -----


class _TextOfHtml(HTMLParser):
    """The text of an HTML fragment; block elements and <br> separate words."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def html_text(fragment: str) -> str:
    parser = _TextOfHtml()
    parser.feed(fragment)
    parser.close()
    return "".join(parser.parts)


def _drawio_pages(root: ET.Element) -> Iterator[ET.Element]:
    """Each page's `mxGraphModel`, inflating the compressed ones."""
    if root.tag == "mxGraphModel":
        yield root
        return
    for diagram in root.iter("diagram"):
        model = diagram.find("mxGraphModel")
        if model is not None:
            yield model
        elif (diagram.text or "").strip():
            raw = zlib.decompress(base64.b64decode(diagram.text or ""), -15)
            yield ET.fromstring(urllib.parse.unquote(raw.decode("utf-8")))


# A label with `placeholders="1"` shows `%name%` as the attribute `name` of its cell or
# of the nearest ancestor cell that has one (draw.io's rule); an unknown name stays as is.
_PLACEHOLDER = re.compile(r"%([A-Za-z_]\w*)%")
_CELLS = ("mxCell", "UserObject", "object")


def _fill_placeholders(label: str, cell: ET.Element, cells: dict[str, ET.Element]) -> str:
    def value(match: re.Match[str]) -> str:
        here: ET.Element | None = cell
        seen: set[str] = set()
        while here is not None and here.get("id") not in seen:
            if match[1] in here.attrib:
                return here.attrib[match[1]]
            seen.add(here.get("id", ""))
            here = cells.get(_parent_id(here))
        return match[0]

    return _PLACEHOLDER.sub(value, label)


def _parent_id(cell: ET.Element) -> str:
    """A cell's parent; a UserObject/object keeps it on the mxCell it wraps."""
    inner = cell.find("mxCell") if cell.tag != "mxCell" else cell
    return (inner if inner is not None else cell).get("parent", "")


def drawio_reference(data: bytes) -> str:
    """The label text of every cell of every page of a draw.io file, one label a line."""
    labels: list[str] = []
    for model in _drawio_pages(ET.fromstring(data)):
        cells = {e.get("id", ""): e for e in model.iter() if e.tag in _CELLS and e.get("id")}
        for element in model.iter():
            if element.tag not in _CELLS:
                continue
            for attribute in ("value", "label"):
                value = element.get(attribute)
                if value:
                    if element.get("placeholders") == "1":
                        value = _fill_placeholders(value, element, cells)
                    labels.append(html_text(value))
    return "\n".join(labels)


def vsdx_reference(data: bytes) -> str:
    """The text of every shape's `<Text>` element on every page of a VSDX package."""
    texts: list[str] = []
    with zipfile.ZipFile(io.BytesIO(data)) as package:
        for name in sorted(package.namelist()):
            if re.fullmatch(r"visio/pages/page\d+\.xml", name):
                root = ET.fromstring(package.read(name))
                texts += [" ".join(e.itertext()) for e in root.iter() if e.tag.endswith("}Text")]
    return "\n".join(texts)


def reference(fmt: str, path: Path) -> str:
    if fmt == "drawio":
        return drawio_reference(path.read_bytes())
    if fmt == "vsdx":
        return vsdx_reference(path.read_bytes())
    return path.with_name(path.name + ".txt").read_text(encoding="utf-8")


def corpus_files(formats: list[str] | None) -> list[tuple[str, Path]]:
    files = [
        ("drawio", p)
        for p in sorted((DATA / "drawio").iterdir())
        if p.suffix in {".drawio", ".xml"}
    ]
    files += [
        ("image", p)
        for p in sorted((DATA / "screenshots").iterdir())
        if p.suffix.lower() in IMAGE_SUFFIXES
    ]
    if VSDX_DIR.is_dir():
        files += [("vsdx", p) for p in sorted(VSDX_DIR.rglob("*.vsdx"))]
    return [(fmt, path) for fmt, path in files if not formats or fmt in formats]


# --- measures ------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    matched: int  # reference words found in the output, counted with repeats
    ref_words: int
    out_words: int
    missing: tuple[str, ...]  # the reference words most often not found


def match_words(reference_text: str, output: str) -> Match:
    from normalizers.selfcheck import words

    ref, out = Counter(words(reference_text)), Counter(words(output))
    missing = tuple(word for word, _ in (ref - out).most_common(_SHOWN_MISSING))
    return Match(sum((ref & out).values()), ref.total(), out.total(), missing)


_SHOWN_MISSING = 6


# --- converters: each returns the Markdown or raises ---------------------------------


_PICTURES: Any = None  # the run's picture setup and limits, made once


def convert_ours(path: Path) -> str:
    """As a run normalizes a file: the defaults with any `INGEST_*` variables (e.g.
    `INGEST_PICTURES__MIN_CONFIDENCE`), OCR without the stage cache (so every picture is
    read, not looked up)."""
    from config.settings import load_settings
    from normalizers.pictures import picture_setup
    from tasks.stages import local_file_source, normalize_source

    global _PICTURES
    if _PICTURES is None:
        settings = load_settings()
        _PICTURES = (picture_setup(settings.pictures)[0], settings.limits)
    setup, limits = _PICTURES
    return normalize_source(local_file_source(path), limits, setup).markdown


_MARKITDOWN: Any = None


def convert_markitdown(path: Path) -> str:
    global _MARKITDOWN
    if _MARKITDOWN is None:
        from markitdown import MarkItDown

        _MARKITDOWN = MarkItDown()
    return str(_MARKITDOWN.convert(str(path)).text_content)


Converter = Callable[[Path], str]


@dataclass
class FileResult(FileOutcome):
    seconds: float = 0.0
    matched: int = 0
    ref_words: int = 0
    out_words: int = 0
    missing: tuple[str, ...] = ()

    @property
    def recall(self) -> float:
        return self.matched / self.ref_words if self.ref_words else 1.0


@dataclass
class Row(FormatTally):
    matched: int = 0
    ref_words: int = 0
    out_words: int = 0
    seconds: float = 0.0
    files: int = 0

    def summary(self) -> dict[str, Any]:
        return {
            "converter": self.converter,
            "format": self.fmt,
            "files": self.files,
            "ok": self.ok,
            "failed": dict(self.failed),
            "recall_mean": round(sum(self.recalls) / self.files, 3) if self.files else None,
            "recall_min": round(min(self.recalls), 3) if self.recalls else None,
            "recall_pooled": round(self.matched / self.ref_words, 3) if self.ref_words else None,
            "precision": round(self.matched / self.out_words, 3) if self.out_words else None,
            "s_per_file": round(self.seconds / self.files, 3) if self.files else None,
        }


def run_file(name: str, convert: Converter, fmt: str, path: Path, ref: str) -> FileResult:
    result = FileResult(name, fmt, path.name, ok=False)
    start = time.perf_counter()
    markdown = attempt(convert, path, result)
    if markdown is not None:
        result.ok = True
        match = match_words(ref, markdown)
        result.matched, result.out_words, result.missing = (
            match.matched,
            match.out_words,
            match.missing,
        )
    result.seconds = time.perf_counter() - start
    result.ref_words = match_words(ref, "").ref_words
    return result


def summarize(results: list[FileResult]) -> list[Row]:
    """Per format and converter; a failed file counts as recall 0 in the mean and pool."""
    rows: dict[tuple[str, str], Row] = {}
    for r in results:
        row = rows.setdefault((r.fmt, r.converter), Row(r.converter, r.fmt))
        row.files += 1
        row.seconds += r.seconds
        row.ref_words += r.ref_words
        row.matched += r.matched
        row.out_words += r.out_words
        row.recalls.append(r.recall if r.ok else 0.0)
        if r.ok:
            row.ok += 1
        else:
            row.failed[r.code or "?"] += 1
    return list(rows.values())


def paired(results: list[FileResult], other: str) -> dict[str, dict[str, Any]]:
    """Per format, ours against `other` on the files both read: the sign test of
    per-file recall."""
    by_key = {(r.fmt, r.name, r.converter): r for r in results}
    tests: dict[str, dict[str, Any]] = {}
    for fmt in sorted({r.fmt for r in results}):
        pairs = [
            (ours.recall, theirs.recall)
            for (f, name, conv), ours in by_key.items()
            if f == fmt and conv == "ours" and ours.ok
            for theirs in [by_key.get((fmt, name, other))]
            if theirs is not None and theirs.ok
        ]
        if pairs:
            a, b = zip(*pairs, strict=True)
            tests[fmt] = {"files": len(pairs), **sign_test(a, b)}
    return tests


def print_table(rows: list[Row], tests: dict[str, dict[str, Any]], other: str) -> None:
    header = (
        f"{'format':7} {'converter':11} {'files':>5} {'ok':>4} {'failed':22} {'recall':>7} "
        f"{'min':>6} {'pooled':>7} {'precis.':>7} {'s/file':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in sorted(rows, key=lambda r: (r.fmt, r.converter != "ours")):
        s = row.summary()
        failed = ", ".join(f"{code}x{n}" for code, n in sorted(row.failed.items())) or "-"
        print(
            f"{row.fmt:7} {row.converter:11} {row.files:>5} {row.ok:>4} {failed:22.22} "
            f"{s['recall_mean'] or 0:>7.3f} {s['recall_min'] or 0:>6.3f} "
            f"{s['recall_pooled'] or 0:>7.3f} {s['precision'] or 0:>7.3f} {s['s_per_file'] or 0:>7.3f}"
        )
    for fmt, test in tests.items():
        print(
            f"{fmt}: ours vs {other} on {test['files']} files read by both: recall diff "
            f"{test['diff']:+.3f}, won/lost {test['won/lost']}, sign test "
            + (f"p={test['p']}" if test["p"] else "p<0.0001")  # the test rounds p to 4 places
        )


def print_files(results: list[FileResult]) -> None:
    print()
    print(f"{'file':46} {'converter':11} {'recall':>7} {'words':>6} {'s':>6}  missing/failure")
    for r in sorted(results, key=lambda r: (r.fmt, r.name, r.converter)):
        recall = f"{r.recall:.3f}" if r.ok else "-"
        note = " ".join(r.missing) if r.ok else f"{r.code}: {r.message or ''}"[:60]
        print(
            f"{r.fmt + '/' + r.name:46.46} {r.converter:11} {recall:>7} {r.ref_words:>6} {r.seconds:>6.2f}  {note}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--formats", help="comma-separated: drawio, image, vsdx (default: all)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--no-others", action="store_true", help="skip MarkItDown")
    parser.add_argument("--files", action="store_true", help="also print one line per file")
    args = parser.parse_args(argv)

    others = not args.no_others
    if others and not importlib.util.find_spec("markitdown"):
        raise SystemExit(
            "MarkItDown is compared in the same run: install it with "
            "`.venv/bin/pip install -e '.[bench]'`, or pass --no-others"
        )
    converters: list[tuple[str, Converter]] = [("ours", convert_ours)]
    if others:
        converters.append(("markitdown", convert_markitdown))
    files = corpus_files(args.formats.split(",") if args.formats else None)
    references = {path: reference(fmt, path) for fmt, path in files}
    # One untimed conversion per converter and format, so imports and start-up (a
    # library's first load, tesseract's first run) are not billed to a file.
    for name, convert in converters:
        for fmt in sorted({fmt for fmt, _ in files}):
            first = next(path for f, path in files if f == fmt)
            run_file(name, convert, fmt, first, references[first])
    results = [
        run_file(name, convert, fmt, path, references[path])
        for fmt, path in files
        for name, convert in converters
    ]
    rows = summarize(results)
    tests = paired(results, "markitdown") if others else {}
    if args.json:
        dump = {
            "rows": [row.summary() for row in rows],
            "paired_vs_markitdown": tests,
            "files": [asdict(r) | {"recall": round(r.recall, 3)} for r in results],
        }
        print(json.dumps(dump, ensure_ascii=False))
        return 0
    if others:
        from importlib.metadata import version

        print(
            f"markitdown {version('markitdown')}; Docling: not installed (see docs/benchmarks.md)"
        )
    print_table(rows, tests, "markitdown")
    if args.files:
        print_files(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
