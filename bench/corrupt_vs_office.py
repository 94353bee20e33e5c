"""Files we call CORRUPT that an office suite opens (run by hand, not in CI;
docs/sources.md#nothing-is-lost).

    .venv/bin/python -m bench.corrupt_vs_office [--mutations 300] [--seed 0] [--json]

Normalizes every file of the Docling corpus (`tests/corpus/docling/<format>/`) and a
seeded mutation set drawn with `bench.fuzz.cases` (the same byte flips, truncations and
broken zip entries; `--mutations` cases spread evenly over the formats). Every file
that ends `CORRUPT` is then handed to LibreOffice headless (`soffice --convert-to pdf`,
the import filter forced as in `normalizers.libreoffice`, so a damaged file is not "opened"
as plain text): the target is that none of them converts, i.e. no file that a user's
office suite opens is reported `CORRUPT`. The PDF LibreOffice writes also tells whether
it showed any text (a damaged file may open as blank pages). Prints the outcome codes
per set and format and every CORRUPT file LibreOffice opened, with both messages.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.fuzz import SEED_FILES, cases, run_case
from bench.normalize import open_pdf
from normalizers.libreoffice import find_soffice
from testkit.corpus import DOCLING

# What LibreOffice is asked to do with each format: its import filter and a PDF export.
_OFFICE = {
    "docx": ("MS Word 2007 XML", "pdf:writer_pdf_Export"),
    "xlsx": ("Calc MS Excel 2007 XML", "pdf:calc_pdf_Export"),
    "pptx": ("Impress MS PowerPoint 2007 XML", "pdf:impress_pdf_Export"),
    "pdf": ("draw_pdf_import", "pdf:draw_pdf_Export"),
    "html": ("HTML (StarWriter)", "pdf:writer_pdf_Export"),
}


@dataclass
class Case:
    corpus: str  # "docling" or "mutated"
    fmt: str
    name: str
    code: str  # "ok" or the error code
    message: str = ""
    office_opens: bool | None = None  # asked only for CORRUPT files
    office_shows_text: bool | None = None  # and whether what it opened holds any text
    office_seconds: float = 0.0


def office_opens(data: bytes, fmt: str, workdir: Path) -> tuple[bool, bool]:
    """Whether LibreOffice converts the bytes (a non-empty PDF), and whether that PDF
    holds any text."""
    soffice = find_soffice()
    if soffice is None:
        raise SystemExit("LibreOffice (soffice) is not installed")
    import_filter, export = _OFFICE[fmt]
    source = workdir / f"case.{fmt}"
    source.write_bytes(data)
    out = workdir / "out"
    for stale in out.glob("*"):
        stale.unlink()
    command = [
        soffice,
        f"-env:UserInstallation={(workdir / 'profile').as_uri()}",
        "--headless",
        "--norestore",
        f"--infilter={import_filter}",
        "--convert-to",
        export,
        "--outdir",
        str(out),
        str(source),
    ]
    try:
        subprocess.run(command, capture_output=True, timeout=120, check=False)
    except subprocess.TimeoutExpired:
        return False, False
    converted = out / "case.pdf"
    if not converted.is_file() or converted.stat().st_size == 0:
        return False, False
    with open_pdf(converted) as pdf:
        return True, any(page.get_text().strip() for page in pdf)


def corpus_cases() -> list[tuple[str, str, bytes]]:
    return [
        (folder.name, path.name, path.read_bytes())
        for folder in sorted(p for p in DOCLING.iterdir() if p.is_dir())
        for path in sorted(folder.iterdir())
        if path.suffix != ".md"
    ]


def mutated_cases(count: int, seed: int) -> list[tuple[str, str, bytes]]:
    formats = sorted(SEED_FILES)
    out: list[tuple[str, str, bytes]] = []
    for i, fmt in enumerate(formats):
        share = count // len(formats) + (1 if i < count % len(formats) else 0)
        generated = cases(fmt, seed)
        for n in range(share):
            name, mutation, data = next(generated)
            stem, _, ext = name.rpartition(".")
            out.append((fmt, f"{stem}.{n}.{mutation}.{ext}", data))
    return out


def run(count: int, seed: int) -> list[Case]:
    results: list[Case] = []
    with tempfile.TemporaryDirectory(prefix="ingest-office-") as tmp:
        workdir = Path(tmp)
        for corpus, items in (("docling", corpus_cases()), ("mutated", mutated_cases(count, seed))):
            for fmt, name, data in items:
                outcome = run_case(name, data)
                code = (
                    "CRASH"
                    if outcome.kind == "crash"
                    else (outcome.code.value if outcome.code else "ok")
                )
                case = Case(corpus, fmt, name, code, outcome.detail[:300])
                if code == "CORRUPT":
                    started = time.perf_counter()
                    case.office_opens, case.office_shows_text = office_opens(data, fmt, workdir)
                    case.office_seconds = time.perf_counter() - started
                results.append(case)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutations", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = run(args.mutations, args.seed)
    if args.json:
        print(json.dumps([asdict(c) for c in results]))
    else:
        for corpus in ("docling", "mutated"):
            for fmt in sorted({c.fmt for c in results}):
                mine = [c for c in results if c.corpus == corpus and c.fmt == fmt]
                codes = Counter(c.code for c in mine)
                opened = sum(1 for c in mine if c.office_opens)
                shown = sum(1 for c in mine if c.office_shows_text)
                print(
                    f"{corpus:8} {fmt:5} files={len(mine):4} "
                    + " ".join(f"{k}={v}" for k, v in sorted(codes.items()))
                    + f" | CORRUPT that LibreOffice opens: {opened} (with text: {shown})"
                )
        for c in results:
            if c.office_opens:
                text = "with text" if c.office_shows_text else "blank"
                print(f"  OPENS ({text}) {c.corpus}/{c.fmt}/{c.name}: {c.message}")
    bad = sum(1 for c in results if c.office_opens or c.code == "CRASH")
    print(f"CORRUPT files LibreOffice opens, and crashes: {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
