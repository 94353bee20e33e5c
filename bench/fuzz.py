"""Mutation fuzz of every normalizer over real files (docs/sources.md#bad-input).

Each case takes a real file from `tests/corpus/docling/<format>/`, applies one seeded
mutation (byte flips, truncation, a run of random bytes, and for OOXML a corrupted or
truncated zip entry) and runs `normalizers.base.normalize_bytes` on it. The only
acceptable outcomes are a `NormalizedDocument` or an `IngestError` with a valid
`ErrorCode` whose message names the file; anything else is a crash.

    .venv/bin/python -m bench.fuzz --seconds 60            # every format, 60 s each
    .venv/bin/python -m bench.fuzz --seconds 10 --format docx --seed 7
    .venv/bin/python -m bench.fuzz --atheris --format xlsx --seconds 120   # pip install atheris

`tests/test_hostile_input.py` runs a small fixed-seed slice of the same cases.
"""

from __future__ import annotations

import argparse
import io
import random
import sys
import time
import traceback
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from config.errors import ErrorCode, IngestError
from config.settings import LimitsSettings
from normalizers.base import normalize_bytes
from normalizers.model import NormalizedDocument
from testkit.corpus import DOCLING

CORPUS = DOCLING
OOXML = frozenset({"docx", "xlsx", "pptx"})
# Small, fast files per format (a few ms to ~0.1 s each to normalize).
SEED_FILES: dict[str, tuple[str, ...]] = {
    "docx": ("docx_lists.docx", "word_tables.docx"),
    "xlsx": ("xlsx_05_table_with_title.xlsx", "xlsx_06_edge_cases_.xlsx"),
    "pptx": ("powerpoint_sample.pptx", "powerpoint_bad_text.pptx"),
    "pdf": ("table_mislabeled_as_picture.pdf", "code_and_formula.pdf"),
    "html": ("html_rich_table_cells.html", "example_03.html"),
}

Mutation = Callable[[bytes, random.Random], bytes]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(1, len(data))]


def splice_random(data: bytes, rng: random.Random) -> bytes:
    i = rng.randrange(len(data))
    junk = rng.randbytes(rng.randint(1, 256))
    return data[:i] + junk + data[i + rng.randint(0, 256) :]


def _rezip(data: bytes, rng: random.Random, change: Callable[[bytes], bytes]) -> bytes:
    """The same OOXML package with one XML entry (chosen by rng) passed through `change`."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as src:
            infos = src.infolist()
            parts = {info.filename: src.read(info) for info in infos}
    except (zipfile.BadZipFile, ValueError, OSError):
        return flip_bytes(data, rng)
    xml = [i.filename for i in infos if i.filename.endswith((".xml", ".rels"))]
    target = rng.choice(xml or [infos[0].filename])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in infos:
            body = parts[info.filename]
            # A fixed timestamp: the same seed gives byte-identical cases on every run.
            entry = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            dst.writestr(entry, change(body) if info.filename == target else body)
    return out.getvalue()


def corrupt_entry(data: bytes, rng: random.Random) -> bytes:
    return _rezip(data, rng, lambda body: flip_bytes(body, rng) if body else b"\xff")


def truncate_entry(data: bytes, rng: random.Random) -> bytes:
    return _rezip(data, rng, lambda body: body[: rng.randrange(len(body))] if body else b"")


def drop_entry(data: bytes, rng: random.Random) -> bytes:
    return _rezip(data, rng, lambda _body: b"")


def mutations_for(fmt: str) -> tuple[Mutation, ...]:
    base: tuple[Mutation, ...] = (flip_bytes, truncate, splice_random)
    if fmt in OOXML:
        return (*base, corrupt_entry, truncate_entry, drop_entry)
    return base


def cases(fmt: str, seed: int) -> Iterator[tuple[str, str, bytes]]:
    """Endless seeded cases for one format: (file name, mutation name, mutated bytes)."""
    rng = random.Random(f"{fmt}:{seed}")
    originals = [(name, (CORPUS / fmt / name).read_bytes()) for name in SEED_FILES[fmt]]
    muts = mutations_for(fmt)
    while True:
        name, data = rng.choice(originals)
        mutation = rng.choice(muts)
        yield name, mutation.__name__, mutation(data, rng)


@dataclass
class Outcome:
    kind: str  # "ok" | "error" | "crash"
    code: ErrorCode | None
    seconds: float
    detail: str = ""


def run_case(name: str, data: bytes, limits: LimitsSettings | None = None) -> Outcome:
    """Normalize one case; classify the outcome. A crash is any exception but a well-formed
    `IngestError` (valid code, message naming the file)."""
    start = time.perf_counter()
    try:
        doc = normalize_bytes(data, name, limits=limits)
    except IngestError as exc:
        seconds = time.perf_counter() - start
        if not isinstance(exc.code, ErrorCode) or name not in str(exc):
            return Outcome("crash", None, seconds, f"malformed IngestError: {exc!r}")
        return Outcome("error", exc.code, seconds, str(exc))
    except BaseException as exc:  # the point is to catch everything
        if isinstance(exc, KeyboardInterrupt):
            raise
        seconds = time.perf_counter() - start
        return Outcome("crash", None, seconds, "".join(traceback.format_exception(exc)))
    seconds = time.perf_counter() - start
    if not isinstance(doc, NormalizedDocument) or not isinstance(doc.markdown, str):
        return Outcome("crash", None, seconds, f"returned {type(doc).__name__}")
    return Outcome("ok", None, seconds)


@dataclass
class Report:
    fmt: str
    cases: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    crashes: list[str] = field(default_factory=list)
    slowest: tuple[float, str] = (0.0, "")


def fuzz_format(fmt: str, seconds: float, seed: int) -> Report:
    report = Report(fmt)
    deadline = time.monotonic() + seconds
    for i, (name, mutation, data) in enumerate(cases(fmt, seed)):
        if time.monotonic() >= deadline:
            break
        outcome = run_case(name, data)
        report.cases += 1
        report.outcomes["ok" if outcome.code is None else outcome.code.value] += (
            outcome.kind != "crash"
        )
        label = f"case {i} {name} {mutation}"
        if outcome.kind == "crash":
            report.outcomes["CRASH"] += 1
            report.crashes.append(f"{label}: {outcome.detail}")
        if outcome.seconds > report.slowest[0]:
            report.slowest = (outcome.seconds, label)
    return report


def _atheris_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("atheris") is not None


def atheris_main(fmt: str, seconds: float, extra: list[str]) -> int:
    """Coverage-guided fuzz of one format with atheris (libFuzzer), seeded with the corpus
    files of that format. Stops at the first crash (any exception but a typed error)."""
    import importlib
    import tempfile

    # Imported by name: atheris is optional, not a project dependency (mypy sees no stub).
    atheris: Any = importlib.import_module("atheris")
    atheris.instrument_all()
    name = f"fuzz.{fmt}"

    def one_input(data: bytes) -> None:
        outcome = run_case(name, data)
        if outcome.kind == "crash":
            raise RuntimeError(outcome.detail)

    with tempfile.TemporaryDirectory(prefix="ingest-atheris-") as seeds:
        for seed in SEED_FILES[fmt]:
            (Path(seeds) / seed).write_bytes((CORPUS / fmt / seed).read_bytes())
        atheris.Setup(
            [sys.argv[0], f"-max_total_time={int(seconds)}", "-rss_limit_mb=4096", *extra, seeds],
            one_input,
        )
        atheris.Fuzz()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="budget per format")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--format", action="append", choices=sorted(SEED_FILES), help="repeatable; default all"
    )
    parser.add_argument(
        "--atheris",
        action="store_true",
        help="coverage-guided atheris run of one --format instead (pip install atheris)",
    )
    args, extra = parser.parse_known_args(argv)
    if args.atheris:
        if not _atheris_available():
            parser.error("atheris is not installed: pip install atheris")
        if not args.format or len(args.format) != 1:
            parser.error("--atheris takes exactly one --format")
        return atheris_main(args.format[0], args.seconds, extra)
    formats = args.format or sorted(SEED_FILES)
    print(f"mutation fuzz, {args.seconds:g} s per format, seed {args.seed}")
    if not _atheris_available():
        print("(atheris not installed: seeded mutation fuzz only)")
    crashes = 0
    for fmt in formats:
        report = fuzz_format(fmt, args.seconds, args.seed)
        outcomes = ", ".join(f"{k}={v}" for k, v in sorted(report.outcomes.items()) if v)
        print(
            f"{fmt:5} cases={report.cases} crashes={len(report.crashes)} "
            f"slowest={report.slowest[0]:.3f}s ({report.slowest[1]}) | {outcomes}"
        )
        for crash in report.crashes[:5]:
            print("  CRASH", crash)
        crashes += len(report.crashes)
    print(f"total crashes: {crashes}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
