"""Normalization benchmark on the Docling corpus (run by hand, not in CI).

    .venv/bin/python -m bench.normalize [--formats pdf,docx] [--json] [--no-others]
        (the comparison needs `.venv/bin/pip install -e '.[bench]'`)
    .venv/bin/python -m bench.normalize --big-pdf [--pages 500]

Converts every file in `tests/corpus/docling/<format>/` with `normalize_bytes` and, in
the same run on the same files, with pymupdf4llm (PDF only) and markitdown (every
format), and prints per format and converter:

- files OK / failed (with error codes);
- word recall against Docling's reference Markdown: the share of the reference's words
  found in ours *in order*, i.e. the exact longest common subsequence (LCS) of the two
  word sequences over the reference's length. Words are those of the normalizers'
  self-check (`normalizers.selfcheck.words`: maximal runs of Unicode letters and digits,
  NFKC-normalized and lowercased, so markup is never a word; Docling's `<!-- image -->`
  placeholders are dropped);
- tables found (GFM tables in the output) vs tables in the reference;
- headings found (ATX headings) vs headings in the reference;
- pages per CPU-second (PDF) or files per CPU-second (other formats); CPU time is
  `time.process_time()`, which counts every thread of the process.

`--big-pdf` generates a PDF (text and a ruled table on every page), converts it in a
fresh subprocess and reports that subprocess's peak RSS (the target is under 1 GB).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.comparison import FileOutcome, FormatTally, attempt
from bench.measure import peak_rss_mib
from normalizers.selfcheck import words

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "docling"

_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)+\|?\s*$", re.MULTILINE)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+\S", re.MULTILINE)


def lcs_length(a: list[str], b: list[str]) -> int:
    """Exact LCS length of two word sequences, bit-parallel (Hyyrö 2004): one big-int
    step per word of `b`, so a 10,000-word document takes milliseconds."""
    masks: dict[str, int] = {}
    for i, word in enumerate(a):
        masks[word] = masks.get(word, 0) | (1 << i)
    full = (1 << len(a)) - 1
    row = full
    for word in b:
        matches = row & masks.get(word, 0)
        row = ((row + matches) | (row - matches)) & full
    return len(a) - row.bit_count()


def word_recall(reference: str, ours: str) -> float:
    """Share of the reference's words found in ours, in order (1.0 for no words)."""
    ref = words(reference)
    if not ref:
        return 1.0
    return lcs_length(ref, words(ours)) / len(ref)


def count_tables(markdown: str) -> int:
    return len(_TABLE_DELIMITER.findall(markdown))


def count_headings(markdown: str) -> int:
    return len(_HEADING.findall(markdown))


@dataclass
class FileResult(FileOutcome):
    cpu_s: float = 0.0
    pages: int = 1
    recall: float | None = None
    tables: int = 0
    ref_tables: int = 0
    headings: int = 0
    ref_headings: int = 0


@dataclass
class Row(FormatTally):
    tables: int = 0
    ref_tables: int = 0
    headings: int = 0
    ref_headings: int = 0
    cpu_s: float = 0.0
    pages: int = 0


# --- converters: each returns (markdown, pages) or raises ---------------------------


def convert_ours(path: Path) -> tuple[str, int]:
    from normalizers.base import normalize_bytes

    doc = normalize_bytes(path.read_bytes(), path.name)
    return doc.markdown, doc.page_count or 1


def open_pdf(path: Path | None = None) -> Any:
    """A pymupdf Document (new and empty without a path); pymupdf's constructors are
    untyped, so the document is Any."""
    import pymupdf

    opener: Any = pymupdf.open
    return opener(path) if path is not None else opener()


def convert_pymupdf4llm(path: Path) -> tuple[str, int]:
    import pymupdf4llm

    with open_pdf(path) as doc:
        return pymupdf4llm.to_markdown(doc, show_progress=False), doc.page_count


_MARKITDOWN: Any = None


def convert_markitdown(path: Path) -> tuple[str, int]:
    global _MARKITDOWN
    if _MARKITDOWN is None:
        from markitdown import MarkItDown

        _MARKITDOWN = MarkItDown()
    text = _MARKITDOWN.convert(str(path)).text_content
    return text, _pdf_pages(path) if path.suffix.lower() == ".pdf" else 1


def _pdf_pages(path: Path) -> int:
    with open_pdf(path) as doc:
        return int(doc.page_count)


Converter = Callable[[Path], tuple[str, int]]


def converters(fmt: str, others: bool) -> list[tuple[str, Converter]]:
    chosen: list[tuple[str, Converter]] = [("ours", convert_ours)]
    if others and fmt == "pdf":
        chosen.append(("pymupdf4llm", convert_pymupdf4llm))
    if others:
        chosen.append(("markitdown", convert_markitdown))
    return chosen


def run_file(name: str, convert: Converter, fmt: str, path: Path) -> FileResult:
    reference = path.with_name(path.name + ".md").read_text(encoding="utf-8")
    result = FileResult(name, fmt, path.name, ok=False)
    result.ref_tables = count_tables(reference)
    result.ref_headings = count_headings(reference)
    start = time.process_time()
    converted = attempt(convert, path, result)
    if converted is not None:
        markdown, pages = converted
        result.ok = True
        result.pages = pages
        result.recall = word_recall(reference, markdown)
        result.tables = count_tables(markdown)
        result.headings = count_headings(markdown)
    result.cpu_s = time.process_time() - start
    return result


def corpus_files(formats: list[str] | None) -> list[tuple[str, Path]]:
    files = []
    for folder in sorted(p for p in CORPUS.iterdir() if p.is_dir()):
        if formats and folder.name not in formats:
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix != ".md" and path.with_name(path.name + ".md").exists():
                files.append((folder.name, path))
    return files


def warm_up(others: bool) -> None:
    """Import every converter once so library import time is not billed to a file."""
    quiet: Any = __import__("pymupdf")
    quiet.set_messages(pylogging=True)  # MuPDF/pymupdf4llm notes to logging, not stdout
    convert_ours(next(p for _, p in corpus_files(["pdf"])))
    if others:
        others_list = (("pymupdf4llm", convert_pymupdf4llm), ("markitdown", convert_markitdown))
        for name, convert in others_list:
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    convert(next(p for _, p in corpus_files(["pdf"])))
            except Exception as exc:
                print(f"warning: {name} unavailable: {exc}", file=sys.stderr)


def summarize(results: list[FileResult]) -> list[Row]:
    rows: dict[tuple[str, str], Row] = {}
    for r in results:
        row = rows.setdefault((r.fmt, r.converter), Row(r.converter, r.fmt))
        row.cpu_s += r.cpu_s
        row.ref_tables += r.ref_tables
        row.ref_headings += r.ref_headings
        if r.ok:
            row.ok += 1
            row.pages += r.pages
            row.recalls.append(r.recall or 0.0)
            row.tables += r.tables
            row.headings += r.headings
        else:
            row.failed[r.code or "?"] += 1
    return list(rows.values())


def print_table(rows: list[Row]) -> None:
    header = (
        f"{'format':6} {'converter':12} {'ok':>4} {'failed':18} {'recall mean':>11} "
        f"{'min':>6} {'tables':>9} {'headings':>9} {'units/CPU-s':>12}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        failed = ", ".join(f"{code}x{n}" for code, n in sorted(row.failed.items())) or "-"
        mean = sum(row.recalls) / len(row.recalls) if row.recalls else 0.0
        low = min(row.recalls) if row.recalls else 0.0
        unit = "pg" if row.fmt == "pdf" else "f"
        rate = f"{row.pages / row.cpu_s:.2f} {unit}" if row.cpu_s else "-"
        print(
            f"{row.fmt:6} {row.converter:12} {row.ok:>4} {failed:18.18} {mean:>11.3f} "
            f"{low:>6.3f} {f'{row.tables}/{row.ref_tables}':>9} "
            f"{f'{row.headings}/{row.ref_headings}':>9} {rate:>12}"
        )


def print_files(results: list[FileResult]) -> None:
    print()
    print(f"{'file':42} {'converter':12} {'recall':>7} {'tables':>7} {'head.':>6} {'CPU s':>6}")
    for r in sorted(results, key=lambda r: (r.fmt, r.name, r.converter)):
        recall = f"{r.recall:.3f}" if r.recall is not None else (r.code or "?")
        print(
            f"{r.fmt + '/' + r.name:42.42} {r.converter:12} {recall:>7} "
            f"{f'{r.tables}/{r.ref_tables}':>7} {f'{r.headings}/{r.ref_headings}':>6} "
            f"{r.cpu_s:>6.2f}"
        )


# --- memory: a big generated PDF -----------------------------------------------------


def make_big_pdf(path: Path, pages: int) -> None:
    """`pages` pages, each a heading, three paragraphs and a 6x4 ruled table."""
    doc = open_pdf()
    sentence = "The quarterly figures were reviewed by the committee and approved. "
    for n in range(1, pages + 1):
        page = doc.new_page()
        page.insert_text((72, 72), f"Section {n}", fontsize=16, fontname="hebo")
        y = 100.0
        for p in range(3):
            for line in range(5):
                page.insert_text((72, y), f"{sentence[:60]} {n}.{p}.{line}", fontsize=10)
                y += 13
            y += 8
        top = y + 10
        rows, cols, height, width = 6, 4, 18.0, 110.0
        for i in range(rows + 1):
            page.draw_line((72, top + i * height), (72 + cols * width, top + i * height))
        for j in range(cols + 1):
            page.draw_line((72 + j * width, top), (72 + j * width, top + rows * height))
        for i in range(rows):
            for j in range(cols):
                label = f"Head {j}" if i == 0 else f"r{i}c{j} {n}"
                page.insert_text((76 + j * width, top + i * height + 13), label, fontsize=9)
        page.insert_text((300, 800), str(n), fontsize=9)
    doc.save(path, garbage=3, deflate=True)
    doc.close()


def big_pdf(pages: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"big-{pages}.pdf"
        start = time.perf_counter()
        make_big_pdf(path, pages)
        generated_s = time.perf_counter() - start
        # A fresh process, so its peak RSS is the conversion's alone.
        done = subprocess.run(
            [sys.executable, "-m", "bench.normalize", "--convert-one", str(path)],
            capture_output=True,
            text=True,
            check=True,
            cwd=REPO,
        )
        child = json.loads(done.stdout)
        return {
            "pages": child["pages"],
            "file_bytes": path.stat().st_size,
            "generate_s": round(generated_s, 1),
            "markdown_chars": child["markdown_chars"],
            "tables": child["tables"],
            "cpu_s": round(child["cpu_s"], 1),
            "pages_per_cpu_s": round(child["pages"] / child["cpu_s"], 1),
            "peak_rss_mib": round(child["peak_rss_mib"], 1),
        }


def convert_one(path: Path) -> dict[str, Any]:
    start = time.process_time()
    markdown, pages = convert_ours(path)
    return {
        "pages": pages,
        "markdown_chars": len(markdown),
        "tables": count_tables(markdown),
        "cpu_s": time.process_time() - start,
        "peak_rss_mib": peak_rss_mib(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--formats", help="comma-separated folders of the corpus (default: all)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument("--no-others", action="store_true", help="skip pymupdf4llm and markitdown")
    parser.add_argument("--files", action="store_true", help="also print one line per file")
    parser.add_argument("--big-pdf", action="store_true", help="peak RSS on a generated PDF")
    parser.add_argument("--pages", type=int, default=500, help="pages of the --big-pdf PDF")
    parser.add_argument("--convert-one", type=Path, help=argparse.SUPPRESS)  # --big-pdf's child
    args = parser.parse_args(argv)

    if args.convert_one:
        print(json.dumps(convert_one(args.convert_one)))
        return 0
    if args.big_pdf:
        report = big_pdf(args.pages)
        lines = [f"{key}: {value}" for key, value in report.items()]
        print(json.dumps(report) if args.json else "\n".join(lines))
        return 0

    formats = args.formats.split(",") if args.formats else None
    others = not args.no_others
    if others and not all(importlib.util.find_spec(m) for m in ("pymupdf4llm", "markitdown")):
        raise SystemExit(
            "pymupdf4llm and markitdown are compared in the same run: install them with "
            "`.venv/bin/pip install -e '.[bench]'`, or pass --no-others"
        )
    warm_up(others)
    results = [
        run_file(name, convert, fmt, path)
        for fmt, path in corpus_files(formats)
        for name, convert in converters(fmt, others)
    ]
    rows = summarize(results)
    if args.json:
        dump = {"rows": [asdict(r) for r in rows], "files": [asdict(r) for r in results]}
        print(json.dumps(dump))
        return 0
    if others:
        from importlib.metadata import version

        print(
            f"pymupdf {version('pymupdf')}, pymupdf4llm {version('pymupdf4llm')}, "
            f"markitdown {version('markitdown')}"
        )
    print_table(rows)
    if args.files:
        print_files(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
